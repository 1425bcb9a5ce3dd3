/**
 * The public contract: the {@link Limiter} and its {@link LimiterOptions}. The types it speaks are grouped by
 * job in types/, and every room imports them from there: checks and decisions (decision.ts), concurrency
 * leases (leases.ts), one key's state for inspect and reset (keys.ts), counters (stats.ts), reloads
 * (reload.ts). The package's entry (src/index.ts) exports the public ones.
 */
import type { CompiledPolicy, PolicySpec } from './config/policy-spec.js';
import type { CheckOptions, CheckRequest, Decision } from './types/decision.js';
import type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from './types/leases.js';
import type { KeyRequest, KeyState } from './types/keys.js';
import type { LimiterStats } from './types/stats.js';
import type { ReloadResult } from './types/reload.js';

export interface LimiterOptions {
  /** Policy name → spec (see README "Policies"), or policies already compiled by the config loader. */
  policies: Record<string, PolicySpec> | ReadonlyMap<string, CompiledPolicy>;
  /** Worker threads owning the keys; 0 decides on the calling thread. Default 0. */
  shards?: number;
  /** The time source: Unix epoch ms, an integer. Read once per batch on the calling thread. Default Date.now. */
  clock?: () => number;
  /** Most keys held in memory (all shards together); past it the least informative are evicted. Default 1,000,000. */
  maxKeys?: number;
  /**
   * Most entries one sliding_log key may hold (16 bytes each, in a block of this many per key): a policy whose
   * worst case, min(limit, period in ms), exceeds it is refused naming the field. 1 to 1,024; default 64. Each
   * kernel's log arena is 4,096 such blocks (4 MiB at 64, 64 MiB at 1,024).
   */
  maxLogEntries?: number;
  /** Most checks queued or in flight before new ones are refused with OVERLOADED. Default 100,000. */
  maxPending?: number;
  /**
   * onLimit: delay: most checks waiting at once in this limiter (each delayed admission holds a place until
   * its delay has passed on the limiter's clock, or until released early by a transport whose connection
   * closed; a check in flight holds one until decided). Past it, a check short of tokens is denied as with
   * onLimit: deny. Default 10,000.
   */
  maxDelayed?: number;
  /** Redis, for policies with `consistency: strict`. */
  redis?: import('./store/redis.js').RedisOptions;
  /**
   * The store itself, when the caller (a composition root such as `sluice serve`, which shares it with the
   * policy reloader) built it from `redis`: createLimiter then builds none, takes `redis` only for the
   * write-behind's `syncIntervalMs`, and closes this store when the limiter closes.
   */
  store?: import('./store/contract.js').Store;
  /**
   * Longest a shard worker may take to start, in ms: past it `createLimiter` rejects with SHARD_FAILED (and a
   * replacement worker that takes longer leaves its shard down). Default 5,000.
   */
  startTimeoutMs?: number;
  /**
   * Restarting a shard that is down (its worker could not be replaced): the first attempt after `minDelayMs`
   * (default 1,000), each failed one doubling the wait up to `maxDelayMs` (default 30,000), ±25% jitter.
   */
  shardRecovery?: { minDelayMs?: number; maxDelayMs?: number };
  /**
   * Where shadow policies' would-deny lines go (a pino logger fits): at most one `info` line per shadow policy
   * per second of the limiter's clock, `{policy, wouldDeny}` with the count since the previous line. Default:
   * none (the counts are still in `stats()` and the metrics).
   */
  logger?: { info(obj: object, msg: string): void };
  /**
   * This instance's region, the region list and share mode, and the global Redis its reconciler reports to
   * (src/config/regions.ts, src/engine/regions/): needed by `scope: global` policies; needs `redis` (the
   * region's own Redis, for every decision).
   */
  region?: import('./config/regions.js').RegionSpec;
}

export interface Limiter {
  /** This instance's region (the region option), absent without one. */
  readonly region?: string;
  /**
   * Decides one check. Rejects with a SluiceError: INVALID_ARGUMENT / UNKNOWN_POLICY naming the field,
   * OVERLOADED when queues are full, SHARD_FAILED if the owning worker died, CLOSED after close(),
   * CLOCK if the clock misbehaves.
   */
  check(req: CheckRequest, options?: CheckOptions): Promise<Decision>;
  /**
   * Decides one check at the call and returns its decision: check() as a function call, for a limiter with
   * `shards: 0` and a policy decided in this process (`consistency` local or sync). The same validation, the
   * same errors (thrown instead of rejected), the same exact decision as check() would give at that point:
   * checks queued by earlier check() calls are decided first, in order. The clock is read once per call.
   * @throws SluiceError INVALID_ARGUMENT / UNKNOWN_POLICY naming the field, CLOSED after close(), CLOCK if the
   *   clock misbehaves, SHARD_FAILED if the kernel fails; NOT_SYNCHRONOUS (field `shards` or `policy`) when the
   *   check cannot be decided on the calling thread: a limiter with shards, a `strict` policy (decided in
   *   Redis). A request that is invalid gets its INVALID_ARGUMENT first.
   * Under `onLimit: delay` a delayed admission comes back as check() without `wait` gives it: with `delayMs`,
   * its tokens spent and its wait place held on the limiter's clock until due; the caller waits `delayMs`.
   * @example
   * const d = limiter.checkSync({ policy: 'free', key: 'tenant-42', cost: 1 });
   * if (!d.allowed) respond429(d.retryAfterMs);
   */
  checkSync(req: CheckRequest): Decision;
  /** Several checks in one call, one result (decision or error) per item, in order. */
  checkMany(reqs: readonly CheckRequest[]): Promise<Array<Decision | Error>>;
  /**
   * Counters for observability. Without options it waits for every shard worker's kernel counters; with
   * `waitMs` (ms), a shard that has not answered by then (stalled in a batch) reports its last ones.
   * @throws SluiceError CLOSED after close().
   */
  stats(options?: { waitMs?: number }): Promise<LimiterStats>;
  /** Policy names and their compiled form: the set in force (replaced whole by {@link reload}). */
  readonly policies: ReadonlyMap<string, CompiledPolicy>;
  /** The version of the policy set in force: 12 hex chars of a sha256 over every compiled policy. */
  readonly version: string;
  /**
   * Replaces the policy set, atomically: a check issued before the call is decided whole under the old set,
   * one issued after it whole under the new one. Policies whose numbers did not change keep every key's
   * state; a policy whose limit, period, burst or algorithm changed starts its keys afresh, unless it says
   * `carryOver: true` (token buckets keep each key's consumed amount, capped by the new burst). The new set
   * is in force when the call returns (before the promise settles, which waits for every shard to hold it).
   * @throws SluiceError CONFIG naming the policy and field (the old set stays in force), CLOSED after close().
   */
  reload(policies: Record<string, PolicySpec> | ReadonlyMap<string, CompiledPolicy>): Promise<ReloadResult>;
  /**
   * One key's state under each limit of its policy, now: whether it is held, its last update, tokens (buckets)
   * or counts (windows), and what a cost-0 check reports (remaining, resetAfterMs). It changes nothing. The key
   * is found as a check finds it (same hash, same shard); a `strict` policy's state is read from Redis (with
   * Redis's clock), a `sync` policy's from this instance, with its staleness.
   * @throws SluiceError INVALID_ARGUMENT naming the field (`key`, `descriptors.<name>`, `policy`), UNKNOWN_POLICY
   *   (`policy`), SHARD_FAILED if the owning shard is down, STORE_FAILED if Redis fails (strict), CLOSED, CLOCK.
   */
  inspect(req: KeyRequest): Promise<KeyState>;
  /**
   * Forgets one key under its policy's own limits (not its guard's), so its next check starts fresh: in the
   * owning kernel, and in Redis for `strict` and `sync` policies (a sync key's deltas not merged yet are
   * dropped first). `removed` counts the states forgotten, each limit once per place it was held (kernel,
   * Redis); 0 when the key was not held.
   * @throws SluiceError INVALID_ARGUMENT / UNKNOWN_POLICY naming the field, SHARD_FAILED, STORE_FAILED, CLOSED.
   */
  reset(req: KeyRequest): Promise<{ removed: number }>;
  /**
   * Takes a lease under an `algorithm: concurrency` policy if the key holds fewer than `limit` (README
   * "Concurrency limits"). Local policies decide on the calling thread (whatever `shards` says); strict ones
   * in one atomic Redis script. A denied acquire changes nothing.
   * @throws SluiceError INVALID_ARGUMENT naming the field (`policy` when it is not a concurrency policy, `key`,
   *   `descriptors.<name>`), UNKNOWN_POLICY, OVERLOADED (the local lease table holds `maxKeys` keys with live
   *   leases), CLOSED, CLOCK.
   */
  acquire(req: AcquireRequest): Promise<LeaseDecision>;
  /**
   * Gives back a lease: the key may take one more at once.
   * @throws SluiceError UNKNOWN_LEASE (field `leaseId`) when the key does not hold it (never acquired, released
   *   before, or expired): nothing changed; INVALID_ARGUMENT naming the field (`leaseId` malformed, `policy`,
   *   `key`...); UNKNOWN_POLICY; STORE_FAILED (strict: Redis failed; the lease then expires by its TTL); CLOSED.
   */
  release(req: ReleaseRequest): Promise<ReleaseResult>;
  /**
   * Redis as decisions find it: `none` without a store; `disconnected` (down, or not reached yet);
   * `unavailable` (connected, but calls fail: frozen, out of memory, busy; the circuit breaker is open until a
   * probe answers); `connected`.
   */
  storeStatus(): 'none' | 'connected' | 'disconnected' | 'unavailable';
  /**
   * Decides what is queued, then stops the shards. Later checks reject with CLOSED. With sync policies it
   * keeps trying to merge their deltas into Redis until `drainMs` (ms, default 10,000) have passed, then
   * logs (`warn`) and drops what it could not merge: close() resolves within `drainMs` plus the wait for
   * checks in flight.
   */
  close(options?: { drainMs?: number }): Promise<void>;
}
