/**
 * A shard: one worker thread that owns one kernel (its keys' state) and decides the batches it is sent, in
 * order. Batches are synchronous, so decisions for a key never interleave.
 */
import { workerData } from 'node:worker_threads';
import { move } from 'piscina';
import { Kernel } from './kernel.js';
import { LEG_IN, LEG_OUT, STATE_ROW, type KernelLimit, type ShardInit, type ShardRequest } from './protocol.js';
import { AdmissionLog } from './admissions.js';
import { serveChannels } from './channel.js';

const init = workerData as ShardInit;
const kernel = new Kernel(init.module, {
  maxKeys: init.maxKeys, maxBatch: init.maxBatch, keyBytes: 0, limits: init.limits, limitCapacity: init.limitCapacity,
  logEntries: init.logEntries,
});
const admitted = new AdmissionLog();

/** State rows the kernel's input holds at once (a batch's ShardTask.states are set in parts of this many). */
const STATE_ROOM = Math.floor(kernel.legIn.length / STATE_ROW);

// Checks a front thread decides synchronously (src/shard/channel.ts), between the batches piscina brings, and the
// limits a reload adds (through the same channels, before any check can name them).
if (init.channels !== undefined) {
  serveChannels(init.channels, Number(process.env.SLUICE_SHARD), (legs, n, now, seq, ack, out) => {
    kernel.legIn.set(legs.subarray(0, n * LEG_IN));
    kernel.decide(n, now);
    if (seq !== 0) admitted.record(seq, ack, n, legs, kernel.legOut);
    out.set(kernel.legOut.subarray(0, n * LEG_OUT));
  }, (limits) => {
    for (const { id, limit } of limits as Array<{ id: number; limit: KernelLimit }>) kernel.setLimit(id, limit);
  }, init.limitsGen ?? 0);
}

export default function handle(req: ShardRequest): unknown {
  switch (req.kind) {
    case 'batch': {
      // the states the batch's checks start from (onStoreError: local): set first, in the order they came
      if (req.states !== undefined) {
        const rows = req.states.length / STATE_ROW;
        for (let at = 0; at < rows; at += STATE_ROOM) {
          const n = Math.min(STATE_ROOM, rows - at);
          kernel.legIn.set(req.states.subarray(at * STATE_ROW, (at + n) * STATE_ROW));
          kernel.setState(n, req.now);
        }
      }
      kernel.legIn.set(req.legs.length === req.n * LEG_IN ? req.legs : req.legs.subarray(0, req.n * LEG_IN));
      kernel.decide(req.n, req.now);
      if (req.seq !== undefined) admitted.record(req.seq, req.ack ?? 0, req.n, req.legs, kernel.legOut);
      return move(kernel.legOut.slice(0, req.n * LEG_OUT) as unknown as ArrayBufferView);
    }
    case 'setState':
      if (req.params !== undefined) admitted.debit(req.rows, req.n, req.params, req.after ?? 0, req.settled);
      kernel.legIn.set(req.rows);
      kernel.setState(req.n, req.now);
      return null;
    case 'peek':
      kernel.legIn.set(req.legs.subarray(0, req.n * LEG_IN));
      kernel.peek(req.n);
      return move(kernel.legOut.slice(0, req.n * LEG_OUT) as unknown as ArrayBufferView);
    case 'remove':
      kernel.legIn.set(req.legs.subarray(0, req.n * LEG_IN));
      return kernel.remove(req.n);
    case 'purge':
      return req.ids.map((id) => kernel.purgeLimit(id, req.now));
    case 'stats':
      return kernel.stats();
    case 'ping':
      return 'pong';
  }
}
