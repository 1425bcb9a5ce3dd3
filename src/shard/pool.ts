import { Piscina } from 'piscina';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { packageRoot } from '../util/paths.js';
import { SluiceError } from '../util/errors.js';
import type { ShardInit, ShardRequest, ShardTask } from './protocol.js';

/** Batches queued per shard before new ones are refused (each batch is one turn's checks for that shard). */
const MAX_QUEUED_BATCHES = 1024;

/**
 * N shards, each a single-thread piscina pool, so a key's batches always reach its one owner in order.
 * piscina replaces a worker that exits and rejects the tasks it held; we map that to SHARD_FAILED.
 */
export class ShardPool {
  private constructor(private readonly pools: Piscina[]) {}

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
    try {
      await Promise.all(pools.map((p) => p.run({ kind: 'ping' } satisfies ShardRequest)));
    } catch (e) {
      await pool.close();
      throw new Error(`sluice: shard workers failed to start: ${(e as Error).message}`);
    }
    return pool;
  }

  get size(): number {
    return this.pools.length;
  }

  /** Decides one batch on shard `s`. Rejects with SHARD_FAILED if the worker dies, OVERLOADED if its queue is full. */
  async run(s: number, task: ShardTask): Promise<Float64Array> {
    try {
      return (await this.pools[s].run(task, { transferList: [task.legs.buffer as ArrayBuffer] })) as Float64Array;
    } catch (e) {
      const msg = (e as Error).message ?? String(e);
      if (/queue is at limit/i.test(msg)) throw new SluiceError('OVERLOADED', `shard ${s}: queue full (${MAX_QUEUED_BATCHES} batches)`);
      throw new SluiceError('SHARD_FAILED', `shard ${s} failed while deciding: ${msg}`);
    }
  }

  /** Each shard's kernel counters. */
  stats(): Promise<Array<{ keys: number; slots: number; evictions: number; memoryBytes: number }>> {
    return Promise.all(this.pools.map((p) => p.run({ kind: 'stats' } satisfies ShardRequest)));
  }

  /** The worker threads, for fault tests that must kill one. */
  threads(s: number): readonly import('node:worker_threads').Worker[] {
    return this.pools[s].threads;
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((p) => p.close()));
  }
}
