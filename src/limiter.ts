import type { CheckRequest, Decision, Limiter, LimiterOptions, LimiterStats } from './types.js';
import { compilePolicies, isCompiled, type CompiledPolicy } from './config/policies.js';
import { Kernel, kernelModule, MAX_KERNEL_KEYS } from './shard/kernel.js';
import { ShardPool } from './shard/pool.js';
import { Hasher } from './keys/hasher.js';
import { buildRuntimes, kernelLimits } from './engine/runtime.js';
import { Front } from './engine/front.js';
import { configError, SluiceError } from './util/errors.js';
import { RedisStore } from './store/redis.js';

/** Legs per kernel call (and keys per hash call). */
const MAX_BATCH = 4096;
const MAX_SHARDS = 64;
/** How long createLimiter waits for Redis to connect, in ms. */
const STORE_CONNECT_WAIT_MS = 2000;

/**
 * Creates a limiter: compiles and checks the policies, instantiates the WASM kernel, and with `shards > 0`
 * starts one worker thread per shard.
 *
 * @throws SluiceError CONFIG naming the policy and field for an invalid policy, or the option at fault.
 * @throws SluiceError SHARD_FAILED when a shard worker fails to start, or does not answer within `startTimeoutMs`.
 * @example
 * const limiter = await createLimiter({ policies: { free: { algorithm: 'token_bucket', limit: 100, period: '1m' } } });
 * const d = await limiter.check({ policy: 'free', key: 'tenant-42', cost: 1 });
 */
export async function createLimiter(opts: LimiterOptions): Promise<Limiter> {
  if (typeof opts !== 'object' || opts === null) throw configError('createLimiter', 'options', 'must be an object');
  const shards = intOption(opts.shards, 'shards', 0, 0, MAX_SHARDS);
  const maxKeys = intOption(opts.maxKeys, 'maxKeys', 1_000_000, 1, MAX_KERNEL_KEYS);
  const maxPending = intOption(opts.maxPending, 'maxPending', 100_000, 1, 2 ** 30);
  const clock = opts.clock ?? Date.now;
  if (typeof clock !== 'function') throw configError('createLimiter', 'clock', 'must be a function returning Unix-epoch ms');
  const policies = opts.policies instanceof Map ? compiledOnly(opts.policies) : compilePolicies(opts.policies);
  const needsStore = [...policies.values()].find((p) => p.consistency !== 'local');
  if (needsStore && opts.redis === undefined) {
    throw configError('createLimiter', 'redis', `policy "${needsStore.name}" has consistency ${needsStore.consistency}: give the redis option`);
  }
  const { limits, firstId } = kernelLimits(policies);
  const module = kernelModule();
  // With shards, this thread's kernel only hashes: keep its table tiny.
  const kernel = new Kernel(module, { maxKeys: shards === 0 ? maxKeys : 1, maxBatch: MAX_BATCH, limits });
  const hasher = new Hasher(kernel, MAX_BATCH);
  const store = needsStore ? RedisStore.create(opts.redis) : null;
  // Give Redis a moment, so that the first decisions do not fall back needlessly; a Redis that is down does
  // not stop the limiter from starting (each policy's onStoreError covers it).
  await store?.connected(STORE_CONNECT_WAIT_MS);
  const runtimes = buildRuntimes(policies, firstId, hasher, store?.prefix ?? '');
  // Guarded checks all go to the guard's shard (to keep the guard exact), so that shard may hold every key.
  const guarded = [...policies.values()].some((p) => p.guard !== null);
  const perShard = guarded ? maxKeys : Math.ceil(maxKeys / shards);
  const pool = shards === 0 ? null
    : await ShardPool.start(shards, { module, maxKeys: perShard, maxBatch: MAX_BATCH, limits }, {
      startTimeoutMs: intOption(opts.startTimeoutMs, 'startTimeoutMs', 5000, 1, 2 ** 31 - 1),
      recovery: {
        minDelayMs: intOption(opts.shardRecovery?.minDelayMs, 'shardRecovery.minDelayMs', 1000, 1, 2 ** 31 - 1),
        maxDelayMs: intOption(opts.shardRecovery?.maxDelayMs, 'shardRecovery.maxDelayMs', 30_000, 1, 2 ** 31 - 1),
      },
    });
  const front = new Front({
    runtimes, hasher, kernel, pool, store, clock, maxBatch: MAX_BATCH, maxPending, syncIntervalMs: opts.redis?.syncIntervalMs,
  });
  let closing: Promise<void> | null = null;

  return {
    policies,
    check: (req: CheckRequest): Promise<Decision> => front.check(req),
    checkMany: (reqs: readonly CheckRequest[]) =>
      Promise.all(reqs.map((r) => front.check(r).catch((e: Error) => e))),
    async stats(options?: { waitMs?: number }): Promise<LimiterStats> {
      if (closing !== null) throw new SluiceError('CLOSED', 'limiter is closed');
      const parts = pool === null ? [kernel.stats()] : await pool.stats(options?.waitMs);
      return {
        shards,
        keys: parts.reduce((a, p) => a + p.keys, 0),
        evictions: parts.reduce((a, p) => a + p.evictions, 0),
        memoryBytes: parts.reduce((a, p) => a + p.memoryBytes, 0),
        pending: front.pending,
        perShard: pool?.shardStates() ?? [],
        ...(store ? { store: { ...store.stats(), sync: front.syncStats() } } : {}),
      };
    },
    storeStatus: () => (store === null ? 'none' : store.ready ? 'connected' : 'disconnected'),
    close(): Promise<void> {
      closing ??= (async () => {
        await front.close();
        await pool?.close();
        await store?.close();
      })();
      return closing;
    },
    // Internal: fault tests reach the shard workers through this symbol.
    ...{ [Symbol.for('sluice.pool')]: pool },
  };
}

function intOption(v: unknown, name: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw configError('createLimiter', name, `must be an integer in [${min}, ${max}] (got ${String(v)})`);
  }
  return v;
}

/** A Map of policies is accepted only as the config loader made it: anything else has skipped validation. */
function compiledOnly(m: ReadonlyMap<string, CompiledPolicy>): ReadonlyMap<string, CompiledPolicy> {
  if (!isCompiled(m)) {
    throw configError('createLimiter', 'policies', 'a Map must come from compilePolicies or the config loader; pass a plain object of specs instead');
  }
  return m;
}
