/** Counters for observability: {@link LimiterStats} and the lease, region and delay counts inside it. */

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

/** Counters for observability. */
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
  perShard: import('../shard/pool.js').ShardState[];
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
    /**
     * Key resets on the store's channel `<prefix>resets` (src/engine/reset-channel.ts): announced by this
     * instance; heard from others and applied; heard for a policy or version not in force here; messages on
     * the channel that are not a reset.
     */
    resets: { sent: number; applied: number; ignored: number; malformed: number };
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
  /**
   * Per store-backed policy (strict, lease) in force at some time since start: its decisions not made by Redis,
   * by failure rule (0s until one is).
   */
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
