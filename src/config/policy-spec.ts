/**
 * The policy model: a policy as written (the spec: {@link PolicySpec}, {@link LimitSpec}) and as compiled (the
 * numbers the engine runs: {@link CompiledPolicy}, {@link CompiledLimit}), with the constants and predicates
 * both sides share. Pure types and constants; the rules that turn one into the other are policies.ts and the
 * files it calls (limits.ts, modes.ts, descriptors.ts, links.ts, policy-version.ts, list-entry.ts).
 */
import type { CalendarPeriod } from '../util/calendar.js';

export type Algorithm = 'token_bucket' | 'gcra' | 'fixed_window' | 'sliding_window' | 'sliding_log' | 'concurrency';

/** The kernel's numeric code for each algorithm (`setPolicy(id, algorithm, ...)`). */
export const ALGORITHM_CODES: Record<Algorithm, number> = {
  token_bucket: 0,
  gcra: 1,
  fixed_window: 2,
  sliding_window: 3,
  sliding_log: 5,
  // never given to the kernel: leases live in src/engine/leases.ts (LimitTable and the runtimes skip it)
  concurrency: 6,
};

/**
 * Most entries a sliding_log key may need: it holds min(limit, period in ms) entries at worst (one per ms,
 * counts ≥ 1 summing to ≤ limit), 16 bytes each, in a block of this many (src/shard/kernel.ts LOG_ENTRIES).
 */
export const SLIDING_LOG_MAX_ENTRIES = 64;

/**
 * The largest `maxLogEntries` (createLimiter option, `engine.maxLogEntries` in a policies file) may raise that
 * bound to: 1,024 entries, 16 KiB a key. The loader admits a sliding_log up to this; the limiter then refuses,
 * naming the field, one whose worst case exceeds its own `maxLogEntries` (checkLogEntries in limits.ts).
 */
export const SLIDING_LOG_ENTRIES_CAP = 1024;

/**
 * The kernel's code for a fixed_window limit over a calendar period (`1d` in a time zone, `1w`, `1mo`): its
 * windows are bounded by explicit Unix-ms bounds (src/config/calendar.ts) instead of k·P.
 */
export const CALENDAR_WINDOW_CODE = 4;

/** One limit as written by the user. */
export interface LimitSpec {
  algorithm: Algorithm;
  /** Tokens (requests, cost units) admitted per period: a non-negative safe integer; 0 denies everything. */
  limit: number;
  /** A positive integer of ms, or a duration string such as `"1m"` (see `parseDuration`). */
  period: number | string;
  /** Bucket capacity in tokens (token_bucket, gcra); defaults to `limit`. */
  burst?: number;
  /**
   * fixed_window with period `1d`, `1w` (ISO week, from Monday) or `1mo` only: the IANA time zone whose local
   * midnight starts each window (default UTC). See src/config/calendar.ts.
   */
  timeZone?: string;
  /** concurrency only (instead of `period`): how long a lease is held unless released, ms or a duration. */
  leaseTtl?: number | string;
  /** A name for this limit in decisions and metrics; defaults to `${policy}#${index}`. */
  name?: string;
}

/** A policy is one limit inline ({algorithm, limit, period, burst}) or `limits: LimitSpec[]` (all must admit). */
export interface PolicySpec {
  algorithm?: Algorithm;
  limit?: number;
  period?: number | string;
  burst?: number;
  timeZone?: string;
  leaseTtl?: number | string;
  limits?: LimitSpec[];
  descriptors?: DescriptorSpec[];
  version?: string | number;
  guard?: string;
  /**
   * Where the state lives: `local` (this instance; the default), `strict` (Redis, one atomic script per
   * decision), `sync` (decided locally, consumed deltas merged into Redis every syncIntervalMs) or `lease`
   * (decided locally from tokens leased from Redis in atomic steps: never over the limit; see {@link LeaseSpec}).
   */
  consistency?: Consistency;
  /** Lease settings of a `consistency: lease` policy (see {@link LeaseSpec}); refused with any other consistency. */
  lease?: LeaseSpec;
  /** What a Redis-backed policy does when Redis fails or times out: `open`, `closed` or `local` (the default). */
  onStoreError?: StoreErrorRule;
  /**
   * On a reload that changes this policy's numbers, its token buckets keep each key's consumed amount (rounded
   * up to whole tokens, capped by the new burst) instead of starting full. Default false. Local policies only.
   */
  carryOver?: boolean;
  /**
   * What a check that would be denied does: `deny` (the default: denied at once, with `retryAfterMs`) or
   * `delay`: when its tokens refill within `maxDelayMs`, it is admitted now with `delayMs` > 0, its cost
   * reserved at decision time (the bucket goes into debt, exactly), and the caller waits that long; checks on
   * one key are served in order (FIFO). Token bucket and GCRA limits only; not in consistency sync, nor on a
   * shadow policy. See the README's "Delay instead of 429".
   */
  onLimit?: OnLimit;
  /** With `onLimit: delay`: the longest wait a check is admitted with, ms (or a duration such as `"2s"`), at most 2^29 − 1 ms. */
  maxDelayMs?: number | string;
  /**
   * Shadow mode: the policy is evaluated on every check that names it (its admitted checks spend its own
   * state, exactly as a live policy's would), counted in `sluice_shadow_decisions_total` and logged when it
   * would deny, but it never denies: the decision says `allowed: true` and carries the real evaluation in
   * `shadow`. Default false. A shadow policy cannot have a guard, nor be one.
   */
  shadow?: boolean;
  /**
   * Makes this shadow policy (requires `shadow: true`) a candidate for a live policy: every check of the live
   * policy is also evaluated against this one, on the same key and cost, for metrics and logs only. The live
   * policy must exist and not be a shadow; this policy's descriptors must be among the live one's (its key is
   * derived from the live check's), or it has none (it takes the live check's whole key).
   */
  shadowOf?: string;
  /**
   * Keys, IP addresses and CIDR ranges that skip the limit (admitted, `reason: 'allowlist'`, nothing spent;
   * the guard is skipped too). See src/engine/lists.ts for what is matched.
   */
  allow?: string[];
  /** Keys, IP addresses and CIDR ranges that are refused (`retryAfterMs: null`, `reason: 'denylist'`). Wins over allow. */
  deny?: string[];
  /**
   * What one `/v1/auth` request costs: a non-negative integer of tokens (default 1), or `'query'`: the auth
   * URL's `cost=` parameter (1 when absent). With a number, a `cost=` parameter is refused: a client whose
   * query string reaches the auth URL must not choose its own cost.
   */
  authCost?: number | 'query';
  /**
   * The Envoy rate limit service route this policy answers over gRPC (src/grpc/): a request descriptor in
   * `domain` whose entries match `entries` in order (an entry without `value` matches any value, and each
   * value counts on its own) is decided by this policy, keyed by the entries' values. Written by the
   * envoyproxy/ratelimit config translator (src/config/envoy-ratelimit.ts); policies without it are reached
   * over gRPC by domain = policy name, entries = its descriptors.
   */
  rls?: RlsRouteSpec;
  /**
   * `global`: one limit for all regions (consistency lease, token_bucket / gcra only): each region holds a
   * share of it in its own Redis, moved between regions by the reconciler (src/engine/regions/). Needs the
   * limiter's `region` option with a global Redis. Default `local`: the limit is per region.
   */
  scope?: Scope;
}

/** See {@link PolicySpec.rls}. */
export interface RlsRouteSpec {
  domain: string;
  entries: Array<{ key: string; value?: string }>;
  /** The route is answered OK without a check (envoyproxy/ratelimit's `unlimited: true`). Default false. */
  unlimited?: boolean;
}

/** A validated {@link RlsRouteSpec}; `value` null is a key-only (any value) entry. */
export interface CompiledRlsRoute {
  domain: string;
  entries: Array<{ key: string; value: string | null }>;
  unlimited: boolean;
}

export type Consistency = 'local' | 'strict' | 'sync' | 'lease';

/** See {@link PolicySpec.onLimit}. */
export type OnLimit = 'deny' | 'delay';

/** `local`: one limit per region (each region's Redis on its own); `global`: one limit across regions (a share each). */
export type Scope = 'local' | 'global';

/** A `consistency: lease` policy's settings (`lease:` in a policy). Durations: integer ms or strings such as "2s". */
export interface LeaseSpec {
  /**
   * How long a lease lives without a renewal, in ms (default {@link DEFAULT_LEASE_TTL_MS}): what an instance that
   * dies strands (its leases count as all used until they expire), and the longest an instance decides from
   * tokens Redis last saw it take. 10 ms to 10 min.
   */
  ttlMs?: number | string;
  /** A key unchecked for this long (ms) gives its unused tokens back (default {@link DEFAULT_LEASE_IDLE_MS}); at most ttlMs. */
  idleMs?: number | string;
  /**
   * The largest lease one instance asks for, as a fraction of the limit's capacity (burst for buckets, limit for
   * windows), in (0, 1] (default {@link DEFAULT_LEASE_MAX_SHARE}). While other instances hold leases of the key,
   * Redis grants at most half of what is left to any one.
   */
  maxShare?: number;
}

/** Default lease time to live, in ms. */
export const DEFAULT_LEASE_TTL_MS = 2000;

/** Default idle time after which a key's unused leased tokens go back, in ms. */
export const DEFAULT_LEASE_IDLE_MS = 1000;

/** Default largest lease, as a fraction of the capacity. */
export const DEFAULT_LEASE_MAX_SHARE = 0.25;

/** A compiled {@link LeaseSpec}: every value set. */
export interface LeaseSettings {
  ttlMs: number;
  idleMs: number;
  maxShare: number;
}

export type StoreErrorRule = 'open' | 'closed' | 'local';

/**
 * A descriptor is a name, or `{name, header?, from?}`: where `/v1/auth` reads its value. `from: query` (the
 * default without `header`) reads the auth URL's query parameter of that name; `from: header` (the default
 * with `header`, which names it) reads only that request header, never the query; `from: path` reads the
 * path after `/v1/auth/<policy>` (what Envoy's ext_authz appends: the original request's path).
 */
export type DescriptorSpec = string | { name: string; header?: string; from?: DescriptorSource };

/** Where `/v1/auth` takes a descriptor's value from (see {@link DescriptorSpec}). */
export type DescriptorSource = 'query' | 'header' | 'path';

/** One validated limit, in engine units. */
export interface CompiledLimit {
  algorithm: Algorithm;
  /** {@link ALGORITHM_CODES}[algorithm]. */
  algorithmCode: number;
  /** Tokens per period (a non-negative safe integer). */
  limit: number;
  /** Period in ms (a positive safe integer). */
  periodMs: number;
  /** Capacity in tokens; equals `limit` for the window algorithms. */
  burst: number;
  /**
   * A fixed_window over calendar windows (local days, ISO weeks, months in a time zone); absent otherwise.
   * periodMs is then the unit's nominal length (1 d, 7 d, 30 d), for display only.
   */
  calendar?: CalendarPeriod;
  /** The spec's `name`, else the policy name (inline policy), else `${policy}#${index}`. */
  name: string;
}

export interface CompiledDescriptor {
  name: string;
  /** Lower-cased request header /v1/auth reads the value from; null when the descriptor has none. */
  header: string | null;
  /** Where /v1/auth reads the value: `header` exactly when `header` is set. */
  from: DescriptorSource;
}

/** One validated policy. Compiled objects are frozen. */
export interface CompiledPolicy {
  name: string;
  /** The spec's `version` as a string, else the first 8 hex chars of a sha256 over limits and descriptors. */
  version: string;
  /** One or more limits; a check is admitted only if every limit admits. */
  limits: CompiledLimit[];
  descriptors: CompiledDescriptor[];
  /** Name of the policy every check of this one is also charged to (the aggregate guard), or null. */
  guard: string | null;
  consistency: Consistency;
  /** Lease settings, for `consistency: lease` (else null). */
  lease: LeaseSettings | null;
  onStoreError: StoreErrorRule;
  /** True when the spec gave `version`; false when it is the content hash. */
  versionGiven: boolean;
  /** See {@link PolicySpec.carryOver}. */
  carryOver: boolean;
  /** See {@link PolicySpec.onLimit}: present (`delay`) only on a policy that delays; absent means deny. */
  onLimit?: 'delay';
  /** With onLimit: the longest delay a check is admitted with, ms. */
  maxDelayMs?: number;
  /** Never denies; evaluated and counted only. See {@link PolicySpec.shadow}. */
  shadow: boolean;
  /** The live policy this shadow policy is a candidate for, or null. See {@link PolicySpec.shadowOf}. */
  shadowOf: string | null;
  /** Allow-list entries as given (validated: keys, IP addresses, CIDR ranges); empty when none. */
  allow: string[];
  /** Deny-list entries as given (validated); empty when none. Deny wins over allow. */
  deny: string[];
  /** What one /v1/auth request costs (tokens), or `'query'` (see {@link PolicySpec.authCost}). */
  authCost: number | 'query';
  /** The Envoy RLS route this policy answers, or null (see {@link PolicySpec.rls}). */
  rls: CompiledRlsRoute | null;
  /** See {@link PolicySpec.scope}; `local` unless the spec says `global`. */
  scope: Scope;
}

/** Policy, limit and descriptor names: 1 to 64 of `A-Z a-z 0-9 _ . -`. */
export const NAME_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/** Most limits one policy may list in `limits`. */
export const MAX_LIMITS_PER_POLICY = 8;

/** Most compiled limits across all policies (the kernel's policy table holds 2^16 − 1). */
export const MAX_TOTAL_LIMITS = 65_535;

/** True for the algorithms whose capacity is `burst` (token_bucket, gcra); the window ones' is `limit`. */
export function isBucket(algorithm: Algorithm): boolean {
  return algorithm === 'token_bucket' || algorithm === 'gcra';
}

/** The most tokens a limit can ever hold (a cost above it is never admitted): burst for buckets, else limit. */
export function capacityOf(l: { algorithm: Algorithm; limit: number; burst: number }): number {
  return isBucket(l.algorithm) ? l.burst : l.limit;
}

/** True for a policy of one concurrency limit (leases: acquire and release, no check). */
export function isConcurrency(p: CompiledPolicy): boolean {
  return p.limits[0]?.algorithm === 'concurrency';
}
