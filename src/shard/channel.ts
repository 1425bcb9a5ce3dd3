/**
 * A synchronous channel from a front thread to a shard: shared memory and `Atomics`, no message and no promise.
 *
 * Why: uWebSockets.js closes a connection on which a pipelined request arrives while an earlier answer is
 * pending ("async pipelining is not supported", uNetworking/uWebSockets#1395), so an HTTP check that leaves
 * uWS's callback unanswered loses every request pipelined behind it. Through this channel a front thread
 * decides a check on the shard that owns its key and answers inside the callback, as it does with no shards.
 *
 * One channel per (front thread, shard): a front thread has at most one call in flight on it, so a channel
 * needs no queue and no lock, only a state word. A shard has one doorbell for all its channels: a front writes
 * its legs, sets its channel's state to REQUEST, rings (increments) the shard's doorbell and sleeps in
 * `Atomics.wait` on its state; the shard worker, which waits for its doorbell with `Atomics.waitAsync` between
 * its other tasks (so piscina's batches still reach it), claims each channel in REQUEST (→ BUSY), decides its
 * legs on its kernel, writes the output rows and sets DONE (a CAS from BUSY, so an answer given up by the front
 * is dropped), then wakes the front.
 *
 * Layout of a channel's SharedArrayBuffer: CONTROL_BYTES of Int32 control words, then f64s: the batch's clock
 * (Unix ms), its sync sequence number and ack (0 without sync policies), maxLegs input rows (LEG_IN f64s) and
 * maxLegs output rows (LEG_OUT f64s), the kernel's row layouts (src/shard/abi.ts).
 */
import { LEG_IN, LEG_OUT } from './abi.js';

/** The states of a channel's STATE word. */
export const IDLE = 0;
export const REQUEST = 1;
export const BUSY = 2;
export const DONE = 3;

/** Int32 control words: the state, the number of legs, and 1 when the shard failed to decide the call. */
const STATE = 0;
const LEGS = 1;
const FAILED = 2;
const CONTROL_BYTES = 64;
/** f64 header slots after the control words. */
const NOW = 0;
const SEQ = 1;
const ACK = 2;
const HEADER = 3;

// No spinning before a sleep, on either side: measured on this project's shared 2-core machine, polling the
// state word or the doorbell for 200-20,000 loads before Atomics.wait made a call 2-50x slower under load
// (the spinning thread took the core the other side needed), and a call is ~16-50 µs without it.

/** Int32 slots between two shards' doorbells (64 bytes: each on its own cache line). */
const BELL_STRIDE = 16;

/**
 * Longest a front thread sleeps on a synchronous call to a shard (src/shard/channel.ts), in ms. A shard serves
 * calls between its batches, each a few ms at most; past this it is stalled, and the check answers 503.
 */
export const CHANNEL_TIMEOUT_MS = 1000;

/**
 * Legs one call carries (32 KiB of input and of output rows per channel): a check has at most MAX_GROUP (16);
 * a larger batch is sent in calls of this many.
 */
export const CHANNEL_LEGS = 1024;

/** The shared memory of every channel of a pool: what a shard worker is started with (ShardInit.channels). */
export interface ChannelMemory {
  /** One doorbell per shard, {@link BELL_STRIDE} Int32s apart. */
  bells: SharedArrayBuffer;
  /** `byShard[s][t]`: the channel from front thread t to shard s (thread 0: the limiter's own). */
  byShard: SharedArrayBuffer[][];
  /** Legs a channel holds per call. */
  maxLegs: number;
}

/** Allocates the channels from `threads` front threads to each of `shards` shards, `maxLegs` legs per call. */
export function channelMemory(shards: number, threads: number, maxLegs: number): ChannelMemory {
  const bytes = CONTROL_BYTES + 8 * (HEADER + maxLegs * (LEG_IN + LEG_OUT));
  return {
    bells: new SharedArrayBuffer(4 * BELL_STRIDE * Math.max(1, shards)),
    byShard: Array.from({ length: shards }, () => Array.from({ length: threads }, () => new SharedArrayBuffer(bytes))),
    maxLegs,
  };
}

/** Views of one channel's memory. */
class Views {
  readonly ctl: Int32Array;
  readonly head: Float64Array;
  /** Input rows: the front writes them, the shard reads them. */
  readonly legs: Float64Array;
  /** Output rows: the shard writes them, the front reads them. */
  readonly out: Float64Array;
  constructor(sab: SharedArrayBuffer, maxLegs: number) {
    this.ctl = new Int32Array(sab, 0, CONTROL_BYTES / 4);
    this.head = new Float64Array(sab, CONTROL_BYTES, HEADER);
    this.legs = new Float64Array(sab, CONTROL_BYTES + 8 * HEADER, maxLegs * LEG_IN);
    this.out = new Float64Array(sab, CONTROL_BYTES + 8 * (HEADER + maxLegs * LEG_IN), maxLegs * LEG_OUT);
  }
}

/** What a call on a channel came to: answered (the output rows are in `out`), or why not. */
export type CallResult = 'done' | 'failed' | 'timeout' | 'busy';

/**
 * The front thread's end of its channel to one shard. Write the call's legs into {@link legs}, then
 * {@link call}; on 'done' the output rows are in {@link out} until the next call.
 */
export class ShardLink {
  private readonly v: Views;
  private readonly bells: Int32Array;
  private readonly bell: number;
  readonly legs: Float64Array;
  readonly out: Float64Array;
  readonly maxLegs: number;

  constructor(mem: ChannelMemory, shard: number, thread: number) {
    this.v = new Views(mem.byShard[shard][thread], mem.maxLegs);
    this.bells = new Int32Array(mem.bells);
    this.bell = shard * BELL_STRIDE;
    this.legs = this.v.legs;
    this.out = this.v.out;
    this.maxLegs = mem.maxLegs;
  }

  /**
   * Asks the shard to decide legs [0, n) of {@link legs} at `now` and sleeps until it has, at most `timeoutMs`.
   * 'timeout': the shard did not take the call in time, which is withdrawn (nothing was decided). 'busy': the
   * shard took the call (or an earlier one given up) and has not finished it: its answer will be dropped, and
   * the legs may have been decided; the channel is usable again once the shard is done. 'failed': the shard's
   * kernel threw on the call.
   */
  call(n: number, now: number, seq: number, ack: number, timeoutMs: number): CallResult {
    const { ctl, head } = this.v;
    const state = Atomics.load(ctl, STATE);
    // a call given up earlier that the shard has finished since: its answer is dropped
    if (state === DONE) Atomics.store(ctl, STATE, IDLE);
    else if (state !== IDLE) return 'busy';
    head[NOW] = now;
    head[SEQ] = seq;
    head[ACK] = ack;
    Atomics.store(ctl, LEGS, n);
    Atomics.store(ctl, STATE, REQUEST);
    Atomics.add(this.bells, this.bell, 1);
    Atomics.notify(this.bells, this.bell, 1);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = Atomics.load(ctl, STATE);
      if (s === DONE) {
        Atomics.store(ctl, STATE, IDLE);
        return Atomics.load(ctl, FAILED) === 0 ? 'done' : 'failed';
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        // withdraw the call if the shard has not claimed it; if it has, its answer is left to be dropped
        return Atomics.compareExchange(ctl, STATE, REQUEST, IDLE) === REQUEST ? 'timeout' : 'busy';
      }
      Atomics.wait(ctl, STATE, s, left);
    }
  }
}

/** `Atomics.waitAsync` (ES2024; in Node since 16), which this project's TypeScript lib does not declare yet. */
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, i: number, v: number): { async: false; value: string } | { async: true; value: Promise<string> };
}).waitAsync;

/** Decides one call's legs: the shard worker's kernel, and its sync admissions log. */
export type Decide = (legs: Float64Array, n: number, now: number, seq: number, ack: number, out: Float64Array) => void;

/**
 * The shard's end: serves every channel of shard `shard` (from any front thread) whenever its doorbell rings,
 * between the worker's other tasks, until the thread ends. Never blocks the worker's event loop.
 */
export function serveChannels(mem: ChannelMemory, shard: number, decide: Decide): void {
  const bells = new Int32Array(mem.bells);
  const bell = shard * BELL_STRIDE;
  const views = mem.byShard[shard].map((sab) => new Views(sab, mem.maxLegs));
  // A call left BUSY is a dead predecessor's (a shard has one worker at a time): answer it as failed, so its
  // caller (or the next one on that channel) is not refused as 'busy' for ever.
  for (const v of views) {
    if (Atomics.load(v.ctl, STATE) !== BUSY) continue;
    Atomics.store(v.ctl, FAILED, 1);
    if (Atomics.compareExchange(v.ctl, STATE, BUSY, DONE) === BUSY) Atomics.notify(v.ctl, STATE);
  }
  const serve = (): void => {
    for (;;) {
      const rung = Atomics.load(bells, bell);
      for (const v of views) {
        if (Atomics.compareExchange(v.ctl, STATE, REQUEST, BUSY) !== REQUEST) continue;
        const n = Atomics.load(v.ctl, LEGS);
        let failed = 0;
        try {
          decide(v.legs, n, v.head[NOW], v.head[SEQ], v.head[ACK], v.out);
        } catch {
          failed = 1; // the front answers SHARD_FAILED; the worker goes on serving
        }
        Atomics.store(v.ctl, FAILED, failed);
        if (Atomics.compareExchange(v.ctl, STATE, BUSY, DONE) === BUSY) Atomics.notify(v.ctl, STATE);
      }
      const w = waitAsync(bells, bell, rung);
      // rung again while this pass ran: serve again at once
      if (w.async) {
        void w.value.then(serve);
        return;
      }
    }
  };
  serve();
}
