import type { PolicySpec } from './config/policies.js';

/**
 * The answer to "may this key spend `cost` now?".
 * All times are whole milliseconds; `remaining` and `limit` are tokens (requests, when cost is 1).
 */
export interface Decision {
  /** Whether the check was admitted (and its cost consumed). */
  allowed: boolean;
  /** The binding limit's L: tokens per period. */
  limit: number;
  /** Tokens left after this check (floor), never negative. */
  remaining: number;
  /** Ms until the binding limit is back to full (bucket refilled, window over). */
  resetAfterMs: number;
  /**
   * 0 when admitted; ms until the same check would be admitted (on a policy with `onLimit: delay`: admitted
   * with a delay of maxDelayMs); `null` when it never can (cost > capacity).
   */
  retryAfterMs: number | null;
  /**
   * onLimit: delay only, present when admitted later: ms (> 0, at most the policy's maxDelayMs) the caller
   * waits before it proceeds. The cost is already spent (the bucket is in debt until then). Absent when the
   * check proceeds at once.
   */
  delayMs?: number;
  /** Name of the binding limit (the policy's, a `limits[]` entry's, or its guard's). */
  policy: string;
  /**
   * Why: a check denied for good (`retryAfterMs: null`): `'limit is 0'`, `'cost exceeds the limit\'s capacity'`,
   * or `'denylist'` (the key is on the policy's deny list); or an admitted check that skipped the limit:
   * `'allowlist'` (the key is on the policy's allow list: `remaining` is the limit, nothing was spent).
   */
  reason?: string;
  /**
   * Present (true) when Redis did not make a strict decision: the store failed (down, frozen, circuit open)
   * and the policy's onStoreError decided instead; `degradedBy` says which rule.
   */
  degraded?: boolean;
  /**
   * With `degraded`: how the decision was made. `open`: admitted, nothing counted; `closed`: denied;
   * `local`: this instance's own kernel, from the key's state last learned from Redis.
   */
  degradedBy?: 'open' | 'closed' | 'local';
  /** Sync mode: ms since this instance last merged with Redis (how old its view of the others' spending is). */
  stalenessMs?: number;
  /**
   * Present on every decision of a shadow policy (`shadow: true`), which never denies: the decision then says
   * `allowed: true` and `retryAfterMs: 0`, with `limit`, `remaining`, `resetAfterMs` and `policy` from the
   * evaluation, and this field is the evaluation's own verdict. `allowed: false` is a would-deny (counted in
   * `sluice_shadow_decisions_total{result="would_deny"}`); its state was left untouched, as for any denial.
   */
  shadow?: ShadowEvaluation;
}

/** What a shadow policy really decided (see {@link Decision.shadow}). Times in whole ms, counts in tokens. */
export interface ShadowEvaluation {
  /** Whether the policy admitted the check (and spent its cost from the shadow policy's own state). */
  allowed: boolean;
  /** Tokens left in the binding limit after the evaluation (floor), never negative. */
  remaining: number;
  /** 0 when admitted; the wait in ms the policy would have asked for; `null` when it could never pass. */
  retryAfterMs: number | null;
  /** As {@link Decision.reason}: why it could never pass, or `'allowlist'` / `'denylist'`. */
  reason?: string;
}

/** How {@link Limiter.check} answers a check that is admitted with a delay (onLimit: delay). */
export interface CheckOptions {
  /**
   * true: resolve once the decision's `delayMs` has passed (real time: a timer), holding its wait place until
   * then. Default false: resolve at once; the caller waits `delayMs` itself (its place is held on the
   * limiter's clock until then).
   */
  wait?: boolean;
  /** With `wait`: aborting it frees the wait place (not the tokens, already spent) and rejects with its reason. */
  signal?: AbortSignal;
}

/** One check. Give `key`, or `descriptors` for a policy that declares them. */
export interface CheckRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8, well-formed; compared byte for byte (no normalisation). */
  key?: string;
  /** Descriptor values by name; joined (escaped) into the key in the policy's declared order. */
  descriptors?: Record<string, string>;
  /** Tokens to spend: a non-negative safe integer; 0 is a peek. */
  cost: number;
}

/**
 * One acquire (or release) under an `algorithm: concurrency` policy: `key`, or `descriptors` for a policy that
 * declares them, as in a check.
 */
export interface AcquireRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8, well-formed; compared byte for byte. */
  key?: string;
  /** Descriptor values by name; joined (escaped) into the key in the policy's declared order. */
  descriptors?: Record<string, string>;
}

/** Gives back a lease {@link Limiter.acquire} handed out. */
export interface ReleaseRequest extends AcquireRequest {
  /** The lease id the acquire returned: 12 lowercase hex digits. */
  leaseId: string;
}

/**
 * The answer to "may this key start one more now?" under a concurrency policy (at most `limit` leases held at
 * once per key, each released by {@link Limiter.release} or `leaseTtlMs` after it was acquired).
 */
export interface LeaseDecision {
  /** Whether a lease was taken. */
  allowed: boolean;
  /** The lease to release when done (12 hex digits); null when denied, or admitted without a lease (`degradedBy: 'open'`). */
  leaseId: string | null;
  /** N: leases a key may hold at once. */
  limit: number;
  /** Leases the key may still take after this answer (limit − held), never negative. */
  remaining: number;
  /**
   * 0 when allowed; when denied, ms until the earliest lease expires that makes room (sooner if a holder
   * releases); `null` when it never can (limit 0).
   */
  retryAfterMs: number | null;
  /** How long the lease lasts unless released, in ms (the policy's `leaseTtl`). */
  leaseTtlMs: number;
  /** The policy's name. */
  policy: string;
  /** `'limit is 0'` with `retryAfterMs: null`. */
  reason?: string;
  /** Present (true) when Redis failed and the policy's onStoreError (open or closed) answered instead. */
  degraded?: boolean;
  degradedBy?: 'open' | 'closed';
}

/** What a release did: the lease is no longer held. */
export interface ReleaseResult {
  released: true;
  /** Leases the key may take now (limit − held), never negative. */
  remaining: number;
  policy: string;
}

export interface LimiterOptions {
  /** Policy name → spec (see README "Policies"), or policies already compiled by the config loader. */
  policies: Record<string, PolicySpec> | ReadonlyMap<string, import('./config/policies.js').CompiledPolicy>;
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

/** What a reload did: the new set's version and the policy names it added, removed and changed. */
export interface ReloadResult {
  version: string;
  added: string[];
  removed: string[];
  changed: string[];
}

/** What started a reload: `file` (the watch), `signal` (SIGHUP), `api` (the admin API), `peer` (pub/sub). */
export type ReloadSource = 'file' | 'signal' | 'api' | 'peer';

/**
 * Why a policy announcement from the Redis channel was refused before it was read (src/reload/announce.ts;
 * the `reason` of `sluice_policy_announcements_refused_total`).
 */
export type RefusalReason = 'malformed' | 'unsigned' | 'bad_mac' | 'replayed';

/** Which key {@link Limiter.inspect} and {@link Limiter.reset} act on: `key`, or `descriptors`, as in a check. */
export interface KeyRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8; a descriptor policy takes the joined form (values escaped, joined by `:`). */
  key?: string;
  /** Descriptor values by name (instead of `key`). */
  descriptors?: Record<string, string>;
}

/** One limit's state for one key, now (see {@link Limiter.inspect}). Times are ms; counts are tokens. */
export interface LimitState {
  /** The limit's name, as decisions report it. */
  name: string;
  algorithm: 'token_bucket' | 'gcra' | 'fixed_window' | 'sliding_window' | 'sliding_log';
  /** L: tokens per period. */
  limit: number;
  /** B: capacity in tokens (equals `limit` for windows). */
  burst: number;
  /** P, in ms. */
  periodMs: number;
  /** Whether state is held for the key under this limit's current numbers (false: it reads as fresh). */
  held: boolean;
  /** Unix ms of the last check that changed the state (an admitted check costing > 0, or a sync merge); null when not held. */
  lastUpdateMs: number | null;
  /** token_bucket, gcra: whole tokens available now (floor), as a cost-0 check sees them. */
  tokens?: number;
  /** fixed_window, sliding_window: tokens counted in the current window; sliding_log: in the trailing period. */
  count?: number;
  /** sliding_window: tokens counted in the previous window (weighted by the part of it still in the sliding period). */
  previousCount?: number;
  /** What a cost-0 check reports now: tokens left (floor, never negative). */
  remaining: number;
  /** What a cost-0 check reports now: ms until this limit is back to full. */
  resetAfterMs: number;
  /** Lease policies: the key's leases in Redis and what this instance holds of them. */
  lease?: LeaseLimitState;
}

/** One limit of a lease policy's key (inspect): src/engine/lease/. Counts in tokens, times Unix ms. */
export interface LeaseLimitState {
  /** Tokens granted by live leases and not yet reported used or returned, over every instance. */
  outstanding: number;
  /** Each instance's lease of the key: its id, outstanding tokens, and when it expires (unless renewed). */
  leases: Array<{ id: string; count: number; expiresAt: number }>;
  /** This instance's lease id, the tokens it may still spend, and those spent and not yet reported; null: none. */
  here: { leaseId: string; held: number; unreported: number } | null;
}

/** One key's state under every limit of its policy (not its guard's), read at one instant. */
export interface KeyState {
  policy: string;
  /** The key as stored (descriptors joined). */
  key: string;
  /** The policy's version: part of every key's identity. */
  version: string;
  /** Where the state was read: this instance's kernel (`local`, `sync`), or Redis (`strict`, `lease`). */
  source: 'local' | 'redis';
  /** Sync policies: ms since this instance last merged with Redis (how old its view of the others' spending is). */
  stalenessMs?: number;
  limits: LimitState[];
}

/** Counters for observability. */
/**
 * onLimit: delay's wait places: held by delayed admissions until due (`waiting`), reserved by checks in flight
 * (`reserved`), the bound (`max`, the maxDelayed option), and checks decided without a delay because every
 * place was taken (`full`, since start).
 */
export interface DelayStats {
  waiting: number;
  reserved: number;
  max: number;
  full: number;
}

export interface LimiterStats {
  /** onLimit: delay: places held by delayed admissions, reserved by checks in flight, the bound, and checks refused a place. */
  delayed: DelayStats;
  /**
   * Lease policies (present once one was checked): counts by policy since start (leases granted and their
   * tokens, unused tokens returned, other instances' expired leases found, tokens voided here past a lease's
   * end, checks that waited on Redis), and now: legs holding tokens, tokens held; lease calls made and failed.
   */
  lease?: LeaseStats;
  shards: number;
  keys: number;
  evictions: number;
  /** Bytes of linear memory of the deciding kernels: allocated once at start, it never grows with keys. */
  memoryBytes: number;
  pending: number;
  /**
   * Per shard (empty with `shards: 0`), read without asking the workers: up or down, checks and batches sent
   * to its worker and not answered yet, times it went down and came back.
   */
  perShard: import('./shard/pool.js').ShardState[];
  /** Redis: failed calls so far, the circuit breaker's state, whether connected. Present with a store. */
  store?: {
    storeErrors: number;
    /** `storeErrors` by kind: no answer within timeoutMs; Redis answered with an error (the script failed). */
    timeouts: number;
    scriptErrors: number;
    /** Calls Redis refused because it cannot serve now (OOM, BUSY, LOADING, READONLY...); they open the breaker. */
    unavailable: number;
    /** Calls answered after they had timed out (their script ran late), and the tokens those checks spent. */
    lateCalls: number;
    lateSpentTokens: number;
    /** Strict checks answered by the over-limit cache (no Redis call); strict keys whose last answer is kept. */
    overLimitAnswers: number;
    knownKeys: number;
    /** Calls that could not be sent or lost their connection; calls not made because the breaker was open. */
    connectionErrors: number;
    breakerRejections: number;
    breaker: 'closed' | 'open' | 'halfOpen';
    connected: boolean;
    /** Script call durations: counts per bucket of `bounds` (seconds), +Inf last. */
    latency: { bounds: readonly number[]; counts: number[]; sumSeconds: number };
    /**
     * Write-behind (sync policies): merges done and failed, deltas dropped past the bound, keys waiting, and
     * the lag: ms since the last successful merge.
     */
    sync: { merges: number; failures: number; dropped: number; pendingKeys: number; lagMs: number } | null;
  };
  /**
   * Per shadow policy that has been evaluated since start (by name; counts survive reloads): checks its
   * evaluation admitted and would have denied.
   */
  shadow?: Record<string, { allow: number; wouldDeny: number }>;
  /** Per strict policy that had decisions not made by Redis since start: their count by failure rule. */
  degraded?: Record<string, { open: number; closed: number; local: number }>;
  /** Per policy whose allow or deny list has matched since start: checks admitted by the allow list, refused by the deny list. */
  lists?: Record<string, { allow: number; deny: number }>;
  /** With the region option: the region's reconciler (src/engine/regions/reconciler.ts). */
  region?: RegionStats;
}

/** Per `scope: global` policy, over the keys the region's reconciler watches (`sluice_region_*`). */
export interface RegionPolicyStats {
  policy: string;
  /** The policy's (first) limit, tokens per period: what the global usage is measured against. */
  limit: number;
  /** Keys watched. */
  keys: number;
  /** This region's share, summed over the watched keys, tokens per period. */
  share: number;
  /** This region's usage, summed over the watched keys, tokens per period. */
  usage: number;
  /** The highest global usage of one key (every region's last report), tokens per period. */
  globalUsage: number;
}

/** The region's reconciler, as this instance sees it. */
export interface RegionStats {
  region: string;
  /** This instance is the region's reconciler (elected through the region's Redis). */
  leader: boolean;
  /** Keys watched, and keys not watched because the set was full. */
  activeKeys: number;
  overflow: number;
  /** Rounds done as leader. */
  rounds: number;
  /** Failed calls to the region's Redis and to the global Redis. */
  regionErrors: number;
  globalErrors: number;
  /** ms since the last round in which every watched key reached the global Redis (-1: never). */
  lagMs: number;
  /** Tokens of limit this region took from the global pool, and gave to it (cumulative, as leader). */
  took: number;
  gave: number;
  policies: RegionPolicyStats[];
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
  readonly policies: ReadonlyMap<string, import('./config/policies.js').CompiledPolicy>;
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
  reload(policies: Record<string, import('./config/policies.js').PolicySpec> | ReadonlyMap<string, import('./config/policies.js').CompiledPolicy>): Promise<ReloadResult>;
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
  /** Redis connectivity: `none` without a store. */
  storeStatus(): 'none' | 'connected' | 'disconnected';
  /**
   * Decides what is queued, then stops the shards. Later checks reject with CLOSED. With sync policies it
   * keeps trying to merge their deltas into Redis until `drainMs` (ms, default 10,000) have passed, then
   * logs (`warn`) and drops what it could not merge: close() resolves within `drainMs` plus the wait for
   * checks in flight.
   */
  close(options?: { drainMs?: number }): Promise<void>;
}

/** Lease mode's counts since start for one policy (LimiterStats.lease, the metrics `sluice_lease_*`). */
export interface LeasePolicyCounts {
  /** Lease calls that were granted tokens, and the tokens granted. */
  acquired: number;
  acquiredTokens: number;
  /** Unused tokens given back to Redis (idle keys, close). */
  returnedTokens: number;
  /** Other instances' leases this one found expired in Redis (their tokens counted as used). */
  expired: number;
  /** Tokens this instance held past its lease's end, unspent (voided here, counted as used in Redis). */
  lapsedTokens: number;
  /** Checks that waited for a lease call (their tokens were not held here). */
  waits: number;
}

/** Lease policies on this instance: see LimiterStats.lease. */
export interface LeaseStats {
  policies: Record<string, LeasePolicyCounts>;
  /** Legs (a limit of a key) holding tokens now, and the tokens held. */
  leases: number;
  tokensHeld: number;
  /** Tokens held now, by policy. */
  heldByPolicy: Record<string, number>;
  /** Lease calls made, failed, on their way now. */
  calls: number;
  failedCalls: number;
  callsInFlight: number;
}
