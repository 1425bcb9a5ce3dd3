import { Piscina } from 'piscina';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { packageRoot } from '../util/paths.js';
import { SluiceError } from '../util/errors.js';
import type { ShardInit, ShardRequest, ShardStates, ShardTask } from './protocol.js';

/** Batches queued per shard before new ones are refused (each batch is one turn's checks for that shard). */
const MAX_QUEUED_BATCHES = 1024;

/**
 * N shards, each a single-thread piscina pool, so a key's batches always reach its one owner in order.
 * piscina replaces a worker that exits and rejects the tasks it held; we map that to SHARD_FAILED.
 */
export class ShardPool {
  /** Why each shard is out for good (its worker failed at start-up and piscina gave up), or null. */
  private readonly dead: Array<string | null>;
  private closing = false;

  private constructor(private readonly pools: Piscina[]) {
    this.dead = pools.map(() => null);
    pools.forEach((p, s) => {
      // Without a listener, a worker error outside any task (a replacement failing while it loads) is an
      // unhandled 'error' event: it would crash the process.
      p.on('error', (e: unknown) => this.workerLost(s, e));
      // piscina starts a replacement in the same call that removes a dead worker, unless that worker died
      // while loading: then it stops (no respawn loop) and the shard has no worker at all.
      p.on('workerDestroy', () => queueMicrotask(() => {
        if (p.threads.length === 0) this.workerLost(s, new Error('its worker exited while starting'));
      }));
    });
  }

  /** Marks shard `s` failed if it has no worker left: what it holds or is sent fails at once with SHARD_FAILED. */
  private workerLost(s: number, e: unknown): void {
    if (this.closing || this.dead[s] !== null || this.pools[s].threads.length > 0) return;
    this.dead[s] = (e as Error)?.message ?? String(e);
    // destroy() rejects the batches queued for the missing worker, so none waits forever.
    void this.pools[s].destroy();
  }

  /** Starts `n` workers and waits until each answers; a worker that cannot start fails the whole start. */
  static async start(n: number, init: ShardInit): Promise<ShardPool> {
    // Built JS runs beside this file; under a TS runner (vitest) the worker still needs the built copy.
    const filename = import.meta.url.endsWith('.ts')
      ? pathToFileURL(join(packageRoot(), 'dist', 'src', 'shard', 'worker.js')).href
      : new URL('./worker.js', import.meta.url).href;
    const pools = Array.from({ length: n }, (_, i) => new Piscina({
      filename,
      name: 'default',
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Infinity,
      concurrentTasksPerWorker: 16,
      maxQueue: MAX_QUEUED_BATCHES,
      workerData: init,
      env: { ...process.env, SLUICE_SHARD: String(i) },
    }));
    const pool = new ShardPool(pools);
    const started = await Promise.allSettled(pools.map((p) => p.run({ kind: 'ping' } satisfies ShardRequest)));
    const failed = started.findIndex((r) => r.status === 'rejected');
    if (failed >= 0) {
      // destroy(), not close(): close() waits for the replacement piscina starts, which fails the same way.
      await pool.destroy();
      const why = (started[failed] as PromiseRejectedResult).reason as Error;
      throw new SluiceError('SHARD_FAILED', `shard ${failed}: worker failed to start: ${why?.message ?? String(why)}`);
    }
    return pool;
  }

  get size(): number {
    return this.pools.length;
  }

  /** Decides one batch on shard `s`. Rejects with SHARD_FAILED if the worker dies, OVERLOADED if its queue is full. */
  async run(s: number, task: ShardTask): Promise<Float64Array> {
    const dead = this.dead[s];
    if (dead !== null) throw new SluiceError('SHARD_FAILED', `shard ${s} is down: its worker failed to start (${dead}) and is not restarted`);
    try {
      return (await this.pools[s].run(task, { transferList: [task.legs.buffer as ArrayBuffer] })) as Float64Array;
    } catch (e) {
      const msg = (e as Error).message ?? String(e);
      if (/queue is at limit/i.test(msg)) throw new SluiceError('OVERLOADED', `shard ${s}: queue full (${MAX_QUEUED_BATCHES} batches)`);
      const down = this.dead[s];
      if (down !== null) throw new SluiceError('SHARD_FAILED', `shard ${s} is down: its worker failed to start (${down}) and is not restarted`);
      throw new SluiceError('SHARD_FAILED', `shard ${s} failed while deciding: ${msg}`);
    }
  }

  /** Installs merged states on shard `s` (sync mode), in order with its batches. */
  async setState(s: number, req: ShardStates): Promise<void> {
    await this.pools[s].run(req, { transferList: [req.rows.buffer as ArrayBuffer] });
  }

  /** Each shard's kernel counters. */
  stats(): Promise<Array<{ keys: number; slots: number; evictions: number; memoryBytes: number }>> {
    return Promise.all(this.pools.map((p, s) => (this.dead[s] !== null
      ? { keys: 0, slots: 0, evictions: 0, memoryBytes: 0 } // a shard that is down holds nothing
      : p.run({ kind: 'stats' } satisfies ShardRequest))));
  }

  /** The worker threads, for fault tests that must kill one. */
  threads(s: number): readonly import('node:worker_threads').Worker[] {
    return this.pools[s].threads;
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.pools.map((p, s) => (this.dead[s] !== null ? p.destroy() : p.close())));
  }

  /** Stops every worker now; batches held or queued reject. */
  private async destroy(): Promise<void> {
    this.closing = true;
    await Promise.all(this.pools.map((p) => p.destroy()));
  }
}
