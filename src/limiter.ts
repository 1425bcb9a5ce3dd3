import type { CheckOptions, CheckRequest, Decision } from './types/decision.js';
import type { Limiter, LimiterOptions } from './types.js';
import type { LimiterStats } from './types/stats.js';
import type { ReloadResult } from './types/reload.js';
import { SLIDING_LOG_ENTRIES_CAP, SLIDING_LOG_MAX_ENTRIES, type CompiledPolicy, type PolicySpec } from './config/policy-spec.js';
import { checkLogEntries } from './config/limits.js';
import { compilePolicies, isCompiled } from './config/policies.js';
import { limitNumbers, policySetVersion } from './config/policy-version.js';
import { Kernel, kernelModule, LIMIT_CAPACITY, MAX_KERNEL_KEYS, MAX_LIMIT_IDS } from './shard/kernel.js';
import { Hasher } from './keys/hasher.js';
import { buildRuntimes } from './engine/runtime.js';
import { LimitTable, type LimitPlan } from './engine/limits.js';
import { Front } from './engine/front.js';
import { bindEngine } from './engine/handle.js';
import { KeyAdmin } from './engine/inspect.js';
import { ResetChannel } from './engine/reset-channel.js';
import { DEFAULT_MAX_DELAYED, waitDelay } from './engine/delay.js';
import { Leases } from './engine/leases.js';
import { SyncCheck } from './engine/sync-check.js';
import { ShardCaller, type FrontThreadLink, type FrontThreadSource, type PolicyFollower, type PolicySetUpdate } from './shard/caller.js';
import type { ShardPool } from './shard/pool.js';
import type { Store } from './store/contract.js';
import { LeaseDecider } from './engine/lease/decider.js';
import { randomBytes } from 'node:crypto';
import { configError, isSluiceError, SluiceError, closed } from './util/errors.js';
import { checkScopes, compileRegion } from './config/regions.js';
import { leaseRegionHooks } from './engine/regions/lease-hooks.js';

/** Legs per kernel call (and keys per hash call). */
const MAX_BATCH = 4096;
const MAX_SHARDS = 64;
/** How long createLimiter waits for Redis to connect, in ms. */
const STORE_CONNECT_WAIT_MS = 2000;

/**
 * What this package's own threads pass to createLimiter beyond {@link LimiterOptions}; not a public API.
 * `frontThread`: build the limiter of an extra HTTP front thread (src/server/front-thread.ts), whose shards are
 * the main thread's, reached through the synchronous channels of `frontThread.channels` as thread `thread`.
 * @internal
 */
export interface InternalLimiterOptions {
  frontThread?: FrontThreadLink;
}

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
export async function createLimiter(opts: LimiterOptions, internal?: InternalLimiterOptions): Promise<Limiter> {
  if (typeof opts !== 'object' || opts === null) throw configError('createLimiter', 'options', 'must be an object');
  const shards = intOption(opts.shards, 'shards', 0, 0, MAX_SHARDS);
  const maxKeys = intOption(opts.maxKeys, 'maxKeys', 1_000_000, 1, MAX_KERNEL_KEYS);
  const maxPending = intOption(opts.maxPending, 'maxPending', 100_000, 1, 2 ** 30);
  const maxDelayed = intOption(opts.maxDelayed, 'maxDelayed', DEFAULT_MAX_DELAYED, 0, 2 ** 30);
  const maxLogEntries = intOption(opts.maxLogEntries, 'maxLogEntries', SLIDING_LOG_MAX_ENTRIES, 1, SLIDING_LOG_ENTRIES_CAP);
  const clock = opts.clock ?? Date.now;
  if (typeof clock !== 'function') throw configError('createLimiter', 'clock', 'must be a function returning Unix-epoch ms');
  let policies = toCompiled(opts.policies);
  checkLogEntries(policies, maxLogEntries);
  const needsStore = [...policies.values()].find((p) => p.consistency !== 'local');
  if (needsStore && opts.redis === undefined && opts.store === undefined) {
    throw configError('createLimiter', 'redis', `policy "${needsStore.name}" has consistency ${needsStore.consistency}: give the redis option`);
  }
  const region = opts.region === undefined ? null : compileRegion(opts.region);
  if (region !== null && opts.redis === undefined) {
    throw configError('createLimiter', 'region', "needs the redis option: the region's own Redis holds its shares and decides every check");
  }
  checkScopes(policies, region);
  const initialLimits = [...policies.values()].reduce((a, p) => a + p.limits.length, 0);
  // Room for reloads to add limits with new numbers; ids no policy uses are reclaimed (see LimitTable).
  const table = new LimitTable(Math.min(MAX_LIMIT_IDS, Math.max(LIMIT_CAPACITY, 2 * initialLimits)));
  const plan = table.plan(policies);
  table.commit(plan);
  /** The limit ids of the set in force. */
  let inUse: ReadonlyMap<string, readonly number[]> = plan.ids;
  const limits = table.limits;
  const module = kernelModule();
  // With shards, this thread's kernel only hashes: keep its table tiny.
  const kernel = new Kernel(module, { maxKeys: shards === 0 ? maxKeys : 1, maxBatch: MAX_BATCH, limits, limitCapacity: table.capacity, logEntries: maxLogEntries });
  const hasher = new Hasher(kernel, MAX_BATCH);
  // With the redis option, the store exists even when no policy uses it yet, so a reload can add one.
  // loaded only when asked for, as the shard pool (piscina) is: ioredis alone adds ~20 MB to a process's RSS
  const store: Store | null = opts.store
    ?? (opts.redis !== undefined ? (await import('./store/redis.js')).RedisStore.create(opts.redis) : null);
  // Give Redis a moment, so that the first decisions do not fall back needlessly; a Redis that is down does
  // not stop the limiter from starting (each policy's onStoreError covers it).
  await store?.connected(STORE_CONNECT_WAIT_MS);
  const runtimes = buildRuntimes(policies, plan.ids, hasher, store?.prefix ?? '');
  // Guarded checks all go to the guard's shard (to keep the guard exact), so that shard may hold every key.
  const guarded = [...policies.values()].some((p) => p.guard !== null);
  const perShard = guarded ? maxKeys : Math.ceil(maxKeys / shards);
  const link = internal?.frontThread;
  const pool = link !== undefined ? new ShardCaller(link.channels, link.thread) as unknown as ShardPool
    : shards === 0 ? null
    : await (await import('./shard/pool.js')).ShardPool.start(shards, { module, maxKeys: perShard, maxBatch: MAX_BATCH, limits, limitCapacity: table.capacity, logEntries: maxLogEntries }, {
      startTimeoutMs: intOption(opts.startTimeoutMs, 'startTimeoutMs', 5000, 1, 2 ** 31 - 1),
      recovery: {
        minDelayMs: intOption(opts.shardRecovery?.minDelayMs, 'shardRecovery.minDelayMs', 1000, 1, 2 ** 31 - 1),
        maxDelayMs: intOption(opts.shardRecovery?.maxDelayMs, 'shardRecovery.maxDelayMs', 30_000, 1, 2 ** 31 - 1),
      },
    });
  // The region's reconciler (src/engine/regions/); the lease decider reports the global keys it holds to
  // `regions.usage` and leases them from the region's share.
  const regions = region === null || opts.redis === undefined ? null
    : (await import('./engine/regions/start.js')).startRegion(region, opts.redis, () => policies);
  // lease policies (src/engine/lease/): their decider, on the Redis store's connection (the in-memory store has
  // no lease script: a lease policy needs Redis)
  const leaseStore = store === null ? null : (await import('./store/lease.js')).LeaseStore.of(store, opts.redis?.timeoutMs);
  const lease = leaseStore === null ? null : new LeaseDecider({
    store: leaseStore, prefix: store!.prefix, clock, maxWaiting: maxPending, engine: () => front, instanceId: randomBytes(6).toString('hex'),
    ...(regions === null || region === null ? {} : leaseRegionHooks(region, regions.usage)),
  });
  checkLeasable(policies, lease !== null);
  const front: Front = new Front({
    runtimes, hasher, kernel, pool, store, clock, maxBatch: MAX_BATCH, maxPending, syncIntervalMs: opts.redis?.syncIntervalMs,
    deciders: lease === null ? undefined : new Map([['lease', lease]]),
    logger: opts.logger ?? null, maxDelayed,
  });
  let closing: Promise<void> | null = null;
  let version = policySetVersion(policies);
  // concurrency policies' leases (acquire, release): not checks, so beside the front, on this thread
  const leases = new Leases({ policies: () => policies, store, clock, maxKeys, degraded: store ? front.degraded : null, closed: () => closing !== null });
  // Resets told to the other instances on the store's pub/sub, and theirs heard (src/engine/reset-channel.ts)
  const resets: ResetChannel | null = store === null ? null : new ResetChannel({
    pubsub: store, prefix: store.prefix, apply: (r) => keyAdmin.heard(r),
    // resets may have been missed while the channel was away: no over-limit denial is kept past it
    onReady: () => front.strict?.clearDenials(),
  });
  const keyAdmin = new KeyAdmin({
    front, hasher, kernel, pool, store, clock, closed: () => closing !== null, lease,
    ...(resets === null ? {} : { announce: (p: string, v: string, k: string) => resets.announce(p, v, k) }),
  });
  const syncCheck = new SyncCheck({ front, hasher, kernel, clock, shards, closed: () => closing !== null });
  // Everything up to the first await is synchronous: a reload takes effect at the call (checks issued after
  // it are decided under the new set), and two reloads cannot interleave their plans.
  /**
   * Frees the limit ids no policy of the set in force uses and under which no kernel holds a key whose state
   * carries information (nor the write-behind a delta): their idle keys are removed first (Kernel.purgeLimit,
   * a scan of each table). An id a reload took back meanwhile stays. Resolves with how many were freed.
   */
  let reclaiming: Promise<number> | null = null;
  function reclaim(): Promise<number> {
    reclaiming ??= (async () => {
      // a store-backed check issued under a replaced set may still be decided by the kernels (onStoreError:
      // local) under that set's ids: none is freed (and set again with other numbers) before it is settled
      for (let e = front.epoch; ; e = front.epoch) {
        await front.settledBefore(e);
        if (front.epoch === e) break;
      }
      const held = front.syncWriter?.limitIdsHeld() ?? new Set<number>();
      const ids = table.retired(inUse).filter((id) => !held.has(id));
      if (ids.length === 0) return 0;
      const now = clock();
      const live = pool === null ? ids.map((id) => kernel.purgeLimit(id, now)) : await pool.purge({ kind: 'purge', now, ids });
      const still = new Set(table.retired(inUse));
      let freed = 0;
      ids.forEach((id, i) => {
        if (live[i] === 0 && still.has(id)) {
          table.release(id);
          freed++;
        }
      });
      return freed;
    })().finally(() => (reclaiming = null));
    return reclaiming;
  }

  /** Extra front threads' limiters (main thread, src/server/threads.ts): each reload waits for them. */
  const followers = new Set<PolicyFollower<CompiledPolicy>>();
  /** The set in force with its limit ids, as front threads adopt it. */
  const update = (): PolicySetUpdate<CompiledPolicy> => ({ policies, ids: inUse });
  async function tellFollowers(): Promise<void> {
    if (followers.size === 0) return;
    const set = update();
    await Promise.all([...followers].map((f) => f(set)));
  }

  async function reload(next: Record<string, PolicySpec> | ReadonlyMap<string, CompiledPolicy>): Promise<ReloadResult> {
    if (closing !== null) throw closed();
    const compiled = toCompiled(next);
    checkLogEntries(compiled, maxLogEntries);
    const before = policies;
    const result = await swap(compiled);
    try {
      await tellFollowers();
    } catch (e) {
      // a front thread did not switch: the reload fails as a whole, every thread back on the previous set
      await swap(before);
      await tellFollowers().catch(() => undefined);
      throw e;
    }
    // past half the room, free what the sets replaced in the background, so the next reload has room at once
    // (only now: until every front thread has switched, some still check under the replaced ids)
    if (2 * table.taken > table.capacity) void reclaim().catch(() => undefined);
    return result;
  }

  /** Makes `compiled` the set in force on this thread and the shards. */
  async function swap(compiled: ReadonlyMap<string, CompiledPolicy>): Promise<ReloadResult> {
    checkTransition(policies, compiled, store !== null);
    checkScopes(compiled, region);
    checkLeasable(compiled, lease !== null);
    let p: LimitPlan;
    try {
      p = table.plan(compiled);
    } catch (e) {
      // out of ids: free those no policy uses and no key's state refers to, then try once more (the new set is
      // then in force a scan later than the call, not at it)
      if (!isSluiceError(e) || e.code !== 'CONFIG' || (await reclaim()) === 0 || closing !== null) throw e;
      checkTransition(policies, compiled, store !== null);
      checkLeasable(compiled, lease !== null);
      p = table.plan(compiled);
    }
    // Checks queued this turn go out now, under the old set; this also frees the hasher for the new seeds.
    front.flush();
    const nextRuntimes = buildRuntimes(compiled, p.ids, hasher, store?.prefix ?? '');
    // Every kernel holds the new limits before any check can name them: this thread's, and each shard's,
    // whichever way a check reaches it (a batch through its worker's queue, or the synchronous channel, which
    // overtakes that queue). Throws, the set in force unchanged, when a shard did not take them.
    for (const { id, limit } of p.added) kernel.setLimit(id, limit);
    pool?.installLimits(p.added);
    table.commit(p);
    inUse = p.ids;
    front.setRuntimes(nextRuntimes);
    const result = diff(policies, compiled);
    policies = compiled;
    version = policySetVersion(compiled);
    return { version, ...result };
  }

  const limiter: Limiter = {
    get policies() {
      return policies;
    },
    get version() {
      return version;
    },
    ...(region === null ? {} : { region: region.name }),
    reload,
    check: (req: CheckRequest, options?: CheckOptions): Promise<Decision> =>
      options?.wait === true ? front.check(req).then((d) => waitDelay(front.delays, d, options.signal)) : front.check(req),
    checkSync: (req: CheckRequest): Decision => syncCheck.check(req),
    checkMany: (reqs: readonly CheckRequest[]) =>
      Promise.all(reqs.map((r) => front.check(r).catch((e: Error) => e))),
    async stats(options?: { waitMs?: number }): Promise<LimiterStats> {
      if (closing !== null) throw closed();
      const parts = pool === null ? [kernel.stats()] : await pool.stats(options?.waitMs);
      return {
        delayed: front.delays.stats(),
        shards,
        keys: parts.reduce((a, p) => a + p.keys, 0),
        evictions: parts.reduce((a, p) => a + p.evictions, 0),
        memoryBytes: parts.reduce((a, p) => a + p.memoryBytes, 0),
        pending: front.pending,
        perShard: pool?.shardStates() ?? [],
        ...(store ? { store: { ...store.stats(), sync: front.syncStats(), overLimitAnswers: front.strict!.answers, knownKeys: front.strict!.size, resets: resets!.stats() } } : {}),
        ...front.counters.snapshot(),
        ...(store ? { degraded: front.degraded.snapshot() } : {}),
        ...(regions ? { region: regions.reconciler.stats() } : {}),
        ...(lease !== null && lease.used ? { lease: lease.stats() } : {}),
      };
    },
    acquire: (req) => leases.acquire(req),
    release: (req) => leases.release(req),
    inspect: (req) => keyAdmin.inspect(req),
    reset: (req) => keyAdmin.reset(req),
    storeStatus: () => (store === null ? 'none' : !store.ready ? 'disconnected' : store.available ? 'connected' : 'unavailable'),
    close(options?: { drainMs?: number }): Promise<void> {
      closing ??= (async () => {
        const start = Date.now();
        // begun first: its bounded wait on a frozen Redis runs alongside the drain
        const channelClosed = resets?.close();
        await front.close(options?.drainMs);
        await regions?.reconciler.close();
        // unused leased tokens go back, and what was spent is reported, before the store closes
        await lease?.close(options?.drainMs === undefined ? undefined : Math.max(0, options.drainMs - (Date.now() - start)));
        await pool?.close();
        await channelClosed;
        await store?.close();
      })();
      return closing;
    },
  };
  // The transports' fast paths (src/engine/handle.ts): checkNow with shards too (through their synchronous
  // channels), and what extra HTTP front threads build on (src/server/threads.ts).
  const frontThreads: FrontThreadSource<CompiledPolicy> | null = pool === null ? null : {
    module, channels: link?.channels ?? (pool as ShardPool).channels, limitIds: () => inUse, current: update, wallClock: clock === Date.now,
    follow(f) {
      followers.add(f);
      return () => void followers.delete(f);
    },
    adopt(set) {
      // a front thread's limiter: the main thread planned the ids and told the shards the limits; this
      // thread's kernel only hashes, so it needs none of them
      front.flush();
      front.setRuntimes(buildRuntimes(set.policies, set.ids, hasher, store?.prefix ?? ''));
      inUse = set.ids;
      policies = set.policies;
      version = policySetVersion(set.policies);
    },
  };
  return bindEngine(limiter, {
    checkNow: (req) => front.checkNow(req),
    checkBatch: (src, from, to, out) => front.checkBatch(src, from, to, out),
    delays: front.delays,
    pool: link === undefined ? pool : null,
    frontThreads,
  });
}

/** A lease policy needs a Redis store (the lease script runs there): refused naming `consistency` otherwise. */
function checkLeasable(policies: ReadonlyMap<string, CompiledPolicy>, canLease: boolean): void {
  if (canLease) return;
  const p = [...policies.values()].find((x) => x.consistency === 'lease');
  if (p !== undefined) {
    throw configError(`policy "${p.name}"`, 'consistency', 'is lease, but this limiter has no Redis to lease from (the redis option; an in-memory store has no lease script)');
  }
}

function intOption(v: unknown, name: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw configError('createLimiter', name, `must be an integer in [${min}, ${max}] (got ${String(v)})`);
  }
  return v;
}

function toCompiled(p: LimiterOptions['policies']): ReadonlyMap<string, CompiledPolicy> {
  return p instanceof Map ? compiledOnly(p) : compilePolicies(p);
}

/**
 * Refuses a set whose state would be misread: a Redis-backed policy whose numbers changed under a version
 * the spec pins (its Redis keys carry the version, so the old state would be read under the new numbers),
 * and a Redis-backed policy on a limiter without Redis.
 */
function checkTransition(before: ReadonlyMap<string, CompiledPolicy>, after: ReadonlyMap<string, CompiledPolicy>, hasStore: boolean): void {
  for (const p of after.values()) {
    if (p.consistency === 'local') continue;
    if (!hasStore) throw configError(`policy "${p.name}"`, 'consistency', `is ${p.consistency}, but this limiter has no Redis: start it with the redis option (sluice serve --redis URL or --redis-cluster)`);
    const old = before.get(p.name);
    if (old && old.consistency !== 'local' && old.versionGiven && p.versionGiven && old.version === p.version && numbers(old) !== numbers(p)) {
      throw configError(`policy "${p.name}"`, 'version', `its limits changed but its version "${p.version}" did not: its Redis keys carry the version, so bump it (or leave version out to derive it from the numbers)`);
    }
  }
}

function numbers(p: CompiledPolicy): string {
  return JSON.stringify(p.limits.map(limitNumbers));
}

/** Which policies a reload adds, removes, or changes (any compiled field). */
function diff(before: ReadonlyMap<string, CompiledPolicy>, after: ReadonlyMap<string, CompiledPolicy>): Omit<ReloadResult, 'version'> {
  const added = [...after.keys()].filter((n) => !before.has(n));
  const removed = [...before.keys()].filter((n) => !after.has(n));
  const changed = [...after.keys()].filter((n) => before.has(n) && JSON.stringify(before.get(n)) !== JSON.stringify(after.get(n)));
  return { added, removed, changed };
}

/** A Map of policies is accepted only as the config loader made it: anything else has skipped validation. */
function compiledOnly(m: ReadonlyMap<string, CompiledPolicy>): ReadonlyMap<string, CompiledPolicy> {
  if (!isCompiled(m)) {
    throw configError('createLimiter', 'policies', 'a Map must come from compilePolicies or the config loader; pass a plain object of specs instead');
  }
  return m;
}
