/**
 * Policies: validation and compilation to the numbers the engine runs (algorithm code, limit, period in ms,
 * burst). One set of rules serves the library (`createLimiter({policies})`, see {@link compilePolicies}) and
 * the YAML policies file (`load.ts`, through {@link compilePoliciesWith}), so both reject the same inputs
 * with the same reasons; only the prefix naming the place differs.
 */
import { createHash } from 'node:crypto';
import { configError, SluiceError, configSourceError, policiesError } from '../util/errors.js';
import { describeValue, parseDuration } from './duration.js';
import { MAX_LIST_ENTRIES, parseListEntry } from './list-entry.js';
import { CALENDAR_MAX_MS, CALENDAR_NOMINAL_MS, isTimeZone, type CalendarPeriod, type CalendarUnit } from '../util/calendar.js';

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
 * naming the field, one whose worst case exceeds its own `maxLogEntries` ({@link checkLogEntries}).
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

/** Where a policy error is: `policy` null = the `policies` object itself; `field` null = the whole policy. */
export interface PolicyErrorSite {
  policy: string | null;
  /** Path inside the policy: `period`, `limits[1].period`, `descriptors[0].header`... */
  field: string | null;
}

/** Turns a failed rule into a thrown error; never returns. */
export type PolicyErrorReporter = (site: PolicyErrorSite, why: string) => never;

type Fail = (field: string | null, why: string) => never;
type Obj = Record<string, unknown>;

const ALGORITHMS = Object.keys(ALGORITHM_CODES) as Algorithm[];
const INLINE_KEYS = ['algorithm', 'limit', 'period', 'burst', 'timeZone', 'leaseTtl'] as const;
const POLICY_KEYS = [...INLINE_KEYS, 'limits', 'descriptors', 'version', 'guard', 'consistency', 'lease', 'onStoreError', 'carryOver',
  'shadow', 'shadowOf', 'allow', 'deny', 'authCost', 'rls', 'scope', 'onLimit', 'maxDelayMs'];
const SCOPES: readonly Scope[] = ['local', 'global'];
const CONSISTENCIES: readonly Consistency[] = ['local', 'strict', 'sync', 'lease'];
const STORE_ERROR_RULES: readonly StoreErrorRule[] = ['open', 'closed', 'local'];
/** Redis's Lua keeps numbers as doubles: B·P (or L·P) up to 2^51 keeps every sum and product exact. */
const MAX_LUA = 2n ** 51n;
const LIMIT_KEYS = [...INLINE_KEYS, 'name'];
const DESCRIPTOR_KEYS = ['name', 'header', 'from'];
const DESCRIPTOR_SOURCES: readonly DescriptorSource[] = ['query', 'header', 'path'];

const NAME_RULE = 'must be 1 to 64 characters of A-Z a-z 0-9 _ . -';
const COUNT_RULE = 'a non-negative safe integer';
const PERIOD_RULE = 'a positive integer of ms or a duration string such as "1m"';
/** An HTTP field name: an RFC 9110 token. */
const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const VERSION_PATTERN = /^[\x21-\x7e]{1,64}$/;
const MAX_I64 = (1n << 63n) - 1n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Validates and compiles the library's `policies` option.
 *
 * @param policies a plain object mapping policy names to {@link PolicySpec}s.
 * @returns the compiled policies by name, in the object's key order.
 * @throws SluiceError code CONFIG whose message names the policy and the field, e.g.
 *   `policy "tenantA": period: must be a positive integer of ms or a duration string such as "1m" (got -1000)`
 *   (`field` is the path inside the policy: `period`, `limits[1].burst`...). Errors about the `policies`
 *   object itself read `policies: ...`.
 */
export function compilePolicies(policies: unknown): Map<string, CompiledPolicy> {
  return compilePoliciesWith(policies, throwLibraryError);
}

function throwLibraryError(site: PolicyErrorSite, why: string): never {
  if (site.policy === null) throw policiesError(why);
  if (site.field === null) throw configSourceError(`policy "${site.policy}"`, why);
  throw configError(`policy "${site.policy}"`, site.field, why);
}

/**
 * {@link compilePolicies} with the error formatting left to `report` (the YAML loader prefixes file and
 * document path). Rules run in a fixed order, so the first error reported is deterministic.
 * @internal
 */
export function compilePoliciesWith(policies: unknown, report: PolicyErrorReporter): Map<string, CompiledPolicy> {
  const top: Fail = (_field, why) => report({ policy: null, field: null }, why);
  if (!isPlainObject(policies)) top(null, `must be an object mapping policy names to policies (got ${describeValue(policies)})`);
  const names = Object.keys(policies);
  if (names.length === 0) top(null, 'must define at least one policy (got an empty object)');
  for (const name of names) {
    if (!NAME_PATTERN.test(name)) top(null, `invalid policy name ${describeValue(name)}: ${NAME_RULE}`);
  }
  const failFor = (policy: string): Fail => (field, why) => report({ policy, field }, why);
  const compiled = new Map<string, CompiledPolicy>();
  let total = 0;
  for (const name of names) {
    const policy = compilePolicy(name, policies[name], failFor(name));
    total += policy.limits.length;
    compiled.set(name, policy);
  }
  if (total > MAX_TOTAL_LIMITS) top(null, `too many limits: ${total} in total, at most ${MAX_TOTAL_LIMITS} across all policies`);
  for (const policy of compiled.values()) checkGuard(policy, compiled, failFor(policy.name));
  for (const policy of compiled.values()) checkShadowOf(policy, compiled, failFor(policy.name));
  for (const policy of compiled.values()) deepFreeze(policy);
  COMPILED.add(compiled);
  return compiled;
}

/** Maps made by this module: createLimiter trusts a Map of policies only if it is one of these. */
const COMPILED = new WeakSet<ReadonlyMap<string, CompiledPolicy>>();

/**
 * A structured clone of a Map that compilePolicies produced in another thread of this process (an HTTP front
 * thread's policies, src/server/threads.ts): frozen again and trusted as that Map was.
 */
export function adoptCompiled(m: Map<string, CompiledPolicy>): ReadonlyMap<string, CompiledPolicy> {
  for (const policy of m.values()) deepFreeze(policy);
  COMPILED.add(m);
  return m;
}

/** True for a Map that compilePolicies (or the config loader) produced. */
export function isCompiled(m: ReadonlyMap<string, CompiledPolicy>): boolean {
  return COMPILED.has(m);
}

function compilePolicy(name: string, raw: unknown, fail: Fail): CompiledPolicy {
  if (!isPlainObject(raw)) fail(null, `must be an object (got ${describeValue(raw)})`);
  rejectUnknownKeys(raw, POLICY_KEYS, '', 'a policy', fail);
  const limits = compileLimits(name, raw, fail);
  const descriptors = compileDescriptors(own(raw, 'descriptors'), fail);
  const version = compileVersion(own(raw, 'version'), limits, descriptors, fail);
  const guard = readGuardName(own(raw, 'guard'), fail);
  const consistency = readChoice(own(raw, 'consistency'), 'consistency', CONSISTENCIES, 'local', fail);
  const leases = limits.some((l) => l.algorithm === 'concurrency');
  if (leases) checkConcurrencyPolicy(raw, limits, consistency, fail);
  const onStoreError = readChoice(own(raw, 'onStoreError'), 'onStoreError', STORE_ERROR_RULES, leases ? 'closed' : 'local', fail);
  if (consistency !== 'local') checkLuaExactness(limits, own(raw, 'limits') !== undefined, fail);
  if (consistency === 'sync') checkSyncable(limits, own(raw, 'limits') !== undefined, fail);
  if (consistency === 'sync' && limits.some((l) => l.algorithm === 'sliding_log')) {
    fail('consistency', 'sliding_log cannot be merged in consistency sync (a log is not a sum of deltas): use local or strict');
  }
  if (consistency === 'lease') checkLeasable(limits, own(raw, 'limits') !== undefined, fail);
  const lease = readLease(own(raw, 'lease'), consistency, fail);
  const carryOver = readCarryOver(own(raw, 'carryOver'), consistency, limits, fail);
  const shadow = readShadow(own(raw, 'shadow'), guard, fail);
  const shadowOf = readShadowOf(own(raw, 'shadowOf'), shadow, fail);
  const allow = readList(own(raw, 'allow'), 'allow', fail);
  const deny = readList(own(raw, 'deny'), 'deny', fail);
  const authCost = readAuthCost(own(raw, 'authCost'), fail);
  const rls = readRlsRoute(own(raw, 'rls'), descriptors, fail);
  const scope = readScope(own(raw, 'scope'), consistency, limits, fail);
  const maxDelayMs = readOnLimit(own(raw, 'onLimit'), own(raw, 'maxDelayMs'), limits, descriptors, consistency, shadow, fail);
  const compiled: CompiledPolicy = {
    name, version, limits, descriptors, guard, consistency, lease, onStoreError, versionGiven: own(raw, 'version') !== undefined, carryOver,
    shadow, shadowOf, allow, deny, authCost, rls, scope,
  };
  // only on a policy that delays, so every other compiled policy keeps its shape (and its set's version)
  if (maxDelayMs > 0) Object.assign(compiled, { onLimit: 'delay', maxDelayMs });
  return compiled;
}

/** Largest maxDelayMs: the kernel packs it above the limit id and group length of an integral f64 (src/shard/abi.ts). */
export const MAX_DELAY_MS = 2 ** 29 - 1;
/** A local bucket's debt bound: B·P + maxDelay·L stays below 2^62, so the kernel's u64 sums never wrap. */
const MAX_DEBT_LOCAL = 2n ** 62n;

/**
 * `onLimit` and `maxDelayMs` (see {@link PolicySpec.onLimit}). Refused where a delay cannot be exact: the
 * window algorithms (a reservation would have to live in a future window, which their state does not hold:
 * a fixed window's count is one window's, a sliding window's estimate and a sliding log's entries are the
 * past), sync mode (another instance's spending, merged later, would move a wait already promised), lease
 * mode (an instance decides from its own leased tokens: a wait promised from them ignores the other
 * instances' leases and their returns, so it would not be exact; scope global is lease mode) and
 * shadow policies (they never deny, so there is nothing to delay).
 */
/** Returns maxDelayMs, or 0 for onLimit: deny (the default). */
function readOnLimit(v: unknown, max: unknown, limits: CompiledLimit[], descriptors: CompiledDescriptor[], consistency: Consistency, shadow: boolean, fail: Fail): number {
  const onLimit = readChoice(v, 'onLimit', ['deny', 'delay'] as const, 'deny', fail);
  if (onLimit === 'deny') {
    if (max !== undefined) fail('maxDelayMs', 'applies with onLimit: delay only');
    return 0;
  }
  if (max === undefined) fail('maxDelayMs', 'is required with onLimit: delay (the longest wait a check is admitted with, e.g. 500 or "2s")');
  let ms: number;
  try {
    ms = parseDuration(max);
  } catch (e) {
    return fail('maxDelayMs', (e as Error).message);
  }
  if (ms > MAX_DELAY_MS) fail('maxDelayMs', `must be at most ${MAX_DELAY_MS} ms (2^29 - 1, about 6.2 days; got ${ms})`);
  const win = limits.find((l) => !isBucket(l.algorithm));
  if (win !== undefined) {
    fail('onLimit', `delay applies to token_bucket and gcra limits only (got algorithm ${win.algorithm}): ${win.algorithm === 'concurrency'
      ? 'a lease is held until released, nothing refills on a clock to wait for'
      : 'a window cannot hold a reservation in a later window exactly'}`);
  }
  if (descriptors.some((d) => d.name === 'wait')) fail('onLimit', 'delay reads the query parameter "wait" as its flag (wait=0: answer at once): rename the descriptor "wait"');
  if (consistency === 'sync') fail('onLimit', 'delay cannot be exact in consistency sync (other instances\' spending, merged later, would move a promised wait): use local or strict');
  if (consistency === 'lease') {
    fail('onLimit', 'delay cannot be exact in consistency lease (an instance decides from its leased tokens only: a wait promised from them would ignore what other instances hold and return): use local or strict');
  }
  if (shadow) fail('onLimit', 'a shadow policy never denies: there is nothing to delay');
  const bound = consistency === 'local' ? MAX_DEBT_LOCAL : MAX_LUA;
  for (const l of limits) {
    const debt = BigInt(l.burst) * BigInt(l.periodMs) + BigInt(ms) * BigInt(l.limit);
    if (debt > bound) {
      fail('maxDelayMs', `burst * period + maxDelayMs * limit must be at most ${bound === MAX_LUA ? '2^51' : '2^62'} = ${bound} (the most a bucket owes; got ${debt} for limit "${l.name}")`);
    }
  }
  return ms;
}

/**
 * A concurrency policy is one inline limit (a lease is not a leg of a check), with no guard, shadow, lists,
 * carryOver or RLS route; it is `local` or `strict` (a lease cannot be merged later: `sync` is refused), and
 * under Redis failures it answers `closed` (the default) or `open`: `local` would hand out leases Redis does
 * not know of.
 */
function checkConcurrencyPolicy(raw: Obj, limits: CompiledLimit[], consistency: Consistency, fail: Fail): void {
  if (own(raw, 'limits') !== undefined) {
    const i = limits.findIndex((l) => l.algorithm === 'concurrency');
    fail(joinPath(joinPath('limits', i), 'algorithm'), 'concurrency is a policy of its own (acquire and release leases), not one of a check\'s limits: give it inline');
  }
  for (const k of ['guard', 'shadow', 'shadowOf', 'allow', 'deny', 'carryOver', 'authCost', 'rls']) {
    if (own(raw, k) !== undefined) fail(k, 'does not apply to algorithm concurrency (leases are acquired and released, never checked)');
  }
  if (consistency === 'sync') fail('consistency', 'concurrency cannot be exact in consistency sync (a lease held on one instance would be unknown to the others until a merge): use local or strict');
  if (own(raw, 'onStoreError') === 'local') fail('onStoreError', 'concurrency takes open or closed (the default): local would hand out leases Redis does not know of');
}

/**
 * `scope: global` (one limit across regions, src/engine/regions/) needs a lease policy: each region's
 * instances lease from the share its Redis holds, and a share can be lowered and raised between two leases.
 * Windows are refused: a window's share could not move mid-window without knowing the window's count in
 * every region, so tokens moved would be spendable twice in one window.
 */
function readScope(v: unknown, consistency: Consistency, limits: CompiledLimit[], fail: Fail): Scope {
  const scope = readChoice(v, 'scope', SCOPES, 'local', fail);
  if (scope === 'local') return scope;
  if (consistency !== 'lease') {
    fail('scope', `global applies to consistency lease only (got consistency ${consistency}): a region decides from its share through leases`);
  }
  const window = limits.find((l) => l.algorithm !== 'token_bucket' && l.algorithm !== 'gcra');
  if (window !== undefined) {
    fail('scope', `global works for token_bucket and gcra only (got ${window.algorithm}): a window's share cannot move between regions mid-window`);
  }
  return scope;
}

function readAuthCost(v: unknown, fail: Fail): number | 'query' {
  if (v === undefined) return 1;
  if (v === 'query' || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)) return v === 'query' ? v : v + 0;
  return fail('authCost', `must be a non-negative safe integer of tokens or "query" (got ${describeValue(v)})`);
}

/** Most entries an RLS route matches (Envoy descriptors are short; each value is part of the key). */
const MAX_RLS_ENTRIES = 16;

function readRlsRoute(v: unknown, descriptors: CompiledDescriptor[], fail: Fail): CompiledRlsRoute | null {
  if (v === undefined) return null;
  if (!isPlainObject(v)) fail('rls', `must be an object {domain, entries} (got ${describeValue(v)})`);
  rejectUnknownKeys(v, ['domain', 'entries', 'unlimited'], 'rls', 'an rls route', fail);
  const unlimited = own(v, 'unlimited') ?? false;
  if (typeof unlimited !== 'boolean') fail('rls.unlimited', `must be true or false (got ${describeValue(unlimited)})`);
  const domain = own(v, 'domain');
  if (typeof domain !== 'string' || domain === '') fail('rls.domain', `must be a non-empty string (got ${describeValue(domain)})`);
  const entries = own(v, 'entries');
  if (!Array.isArray(entries) || entries.length === 0 || entries.length > MAX_RLS_ENTRIES) {
    fail('rls.entries', `must be an array of 1 to ${MAX_RLS_ENTRIES} {key, value?} entries (got ${Array.isArray(entries) ? `${entries.length} entries` : describeValue(entries)})`);
  }
  if (descriptors.length > 0) fail('rls', 'a policy with an rls route takes its key from the request entries: remove descriptors');
  const out = entries.map((e: unknown, i: number) => {
    const at = `rls.entries[${i}]`;
    if (!isPlainObject(e)) fail(at, `must be an object {key, value?} (got ${describeValue(e)})`);
    rejectUnknownKeys(e, ['key', 'value'], at, 'an rls entry', fail);
    const key = own(e, 'key');
    const value = own(e, 'value');
    if (typeof key !== 'string' || key === '') fail(`${at}.key`, `must be a non-empty string (got ${describeValue(key)})`);
    if (value !== undefined && (typeof value !== 'string' || value === '')) fail(`${at}.value`, `must be a non-empty string when given (got ${describeValue(value)})`);
    return { key, value: value === undefined ? null : value };
  });
  return { domain, entries: out, unlimited };
}

function readShadow(v: unknown, guard: string | null, fail: Fail): boolean {
  if (v === undefined || v === false) return false;
  if (v !== true) fail('shadow', `must be true or false (got ${describeValue(v)})`);
  if (guard !== null) fail('guard', 'a shadow policy cannot have a guard: its admitted checks would spend the live guard\'s tokens');
  return true;
}

function readShadowOf(v: unknown, shadow: boolean, fail: Fail): string | null {
  if (v === undefined) return null;
  if (typeof v !== 'string') fail('shadowOf', `must be the name of a live policy (got ${describeValue(v)})`);
  if (!shadow) fail('shadowOf', 'requires shadow: true (a candidate never denies)');
  return v;
}

/** An allow or deny list: an array of keys, IP addresses and CIDR ranges (see src/engine/lists.ts). */
function readList(v: unknown, field: 'allow' | 'deny', fail: Fail): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) fail(field, `must be an array of keys, IP addresses or CIDR ranges (got ${describeValue(v)})`);
  if (v.length > MAX_LIST_ENTRIES) fail(field, `must hold at most ${MAX_LIST_ENTRIES} entries (got ${v.length})`);
  for (let i = 0; i < v.length; i++) {
    const e = parseListEntry(v[i]);
    if (typeof e === 'string') fail(joinPath(field, i), `${e} (got ${describeValue(v[i])})`);
  }
  return [...(v as string[])];
}

function readCarryOver(v: unknown, consistency: Consistency, limits: CompiledLimit[], fail: Fail): boolean {
  if (v === undefined || v === false) return false;
  if (v !== true) fail('carryOver', `must be true or false (got ${describeValue(v)})`);
  if (consistency !== 'local') fail('carryOver', `applies to consistency local only (got consistency ${consistency}): Redis-backed state starts afresh when the numbers change`);
  if (!limits.some((l) => l.algorithm === 'token_bucket')) fail('carryOver', 'applies to token_bucket limits, and this policy has none');
  return true;
}

function readChoice<T extends string>(v: unknown, field: string, choices: readonly T[], dflt: T, fail: Fail): T {
  if (v === undefined) return dflt;
  if (typeof v !== 'string' || !choices.includes(v as T)) fail(field, `must be one of ${choices.join(', ')} (got ${describeValue(v)})`);
  return v as T;
}

/** A Redis-backed limit must stay exact in Lua's doubles: B·P (buckets) or L·P (windows) at most 2^51. */
function checkLuaExactness(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
  limits.forEach((l, i) => {
    const at = (k: string): string => (listed ? joinPath(joinPath('limits', i), k) : k);
    const n = BigInt(isBucket(l.algorithm) ? l.burst : l.limit) * BigInt(l.periodMs);
    if (n > MAX_LUA) {
      const which = isBucket(l.algorithm) ? 'burst' : 'limit';
      fail(at(which), `${which} * period must be at most 2^51 = ${MAX_LUA} for a Redis-backed policy (Lua numbers are doubles; got ${n})`);
    }
  });
}

/** Sync mode merges counts by epoch-aligned windows (lua/sync.lua): calendar windows are refused there. */
function checkSyncable(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
  limits.forEach((l, i) => {
    if (l.calendar === undefined) return;
    fail(listed ? joinPath(joinPath('limits', i), 'period') : 'period',
      `calendar period ${describeValue(calendarText(l.calendar.unit))} cannot be merged in consistency sync (its merge aligns windows to the epoch): use local or strict`);
  });
}

/**
 * Lease mode leases token buckets, GCRA, and epoch-aligned fixed and sliding windows exactly (lua/lease.lua).
 * A sliding log cannot be: a leased token would be logged when granted, so it would leave the trailing period
 * before the spend it stands for, and Redis would admit again while one exact limiter would not. Calendar
 * windows are not aligned to the epoch, which lease windows are.
 */
function checkLeasable(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
  limits.forEach((l, i) => {
    const at = (k: string): string => (listed ? joinPath(joinPath('limits', i), k) : k);
    if (l.algorithm === 'concurrency') {
      fail(at('algorithm'), 'concurrency is not a rate: its leases are acquire and release (src/engine/leases.ts), not consistency lease');
    }
    if (l.algorithm === 'sliding_log') {
      fail(at('algorithm'), 'sliding_log cannot be leased exactly (a leased token would be logged when granted and leave the trailing period before the spend it stands for): use token_bucket, gcra, fixed_window or sliding_window, or consistency strict');
    }
    if (l.calendar !== undefined) {
      fail(at('period'), `calendar period ${describeValue(calendarText(l.calendar.unit))} cannot be leased (lease windows are aligned to the epoch): use a period in ms, or consistency strict`);
    }
  });
}

function readLease(v: unknown, consistency: Consistency, fail: Fail): LeaseSettings | null {
  if (v !== undefined && consistency !== 'lease') fail('lease', `applies to consistency lease only (got consistency ${consistency})`);
  if (consistency !== 'lease') return null;
  if (v === undefined || v === null) return { ttlMs: DEFAULT_LEASE_TTL_MS, idleMs: DEFAULT_LEASE_IDLE_MS, maxShare: DEFAULT_LEASE_MAX_SHARE };
  if (!isPlainObject(v)) fail('lease', `must be an object {ttlMs, idleMs, maxShare} (got ${describeValue(v)})`);
  rejectUnknownKeys(v, ['ttlMs', 'idleMs', 'maxShare'], 'lease', 'the lease settings', fail);
  const ms = (k: 'ttlMs' | 'idleMs', dflt: number, min: number, max: number): number => {
    const raw = own(v, k);
    if (raw === undefined) return dflt;
    const n = readPeriod(raw, `lease.${k}`, fail);
    if (n < min || n > max) fail(`lease.${k}`, `must be from ${min} ms to ${max} ms (got ${describeValue(raw)})`);
    return n;
  };
  const ttlMs = ms('ttlMs', DEFAULT_LEASE_TTL_MS, 10, 600_000);
  const idleMs = ms('idleMs', Math.min(DEFAULT_LEASE_IDLE_MS, ttlMs), 1, 600_000);
  if (idleMs > ttlMs) fail('lease.idleMs', `must be at most lease.ttlMs (${ttlMs} ms; got ${idleMs} ms)`);
  const share = own(v, 'maxShare') ?? DEFAULT_LEASE_MAX_SHARE;
  if (typeof share !== 'number' || !(share > 0 && share <= 1)) fail('lease.maxShare', `must be a number in (0, 1] (got ${describeValue(share)})`);
  return { ttlMs, idleMs, maxShare: share };
}

function calendarText(unit: CalendarUnit): string {
  return unit === 'mo' ? '1mo' : `1${unit}`;
}

// ---------------------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------------------

/** The inline limit (named after the policy), or each entry of `limits` (named `${policy}#${i}`). */
function compileLimits(policy: string, raw: Obj, fail: Fail): CompiledLimit[] {
  const listed = own(raw, 'limits');
  if (listed === undefined) return [compileLimit(raw, '', policy, fail)];
  const inline = INLINE_KEYS.filter((k) => own(raw, k) !== undefined);
  if (inline.length > 0) {
    fail('limits', `cannot be combined with inline ${inline.join(', ')}: give one inline limit or a limits array, not both`);
  }
  if (!Array.isArray(listed) || listed.length === 0 || listed.length > MAX_LIMITS_PER_POLICY) {
    const got = Array.isArray(listed) ? `${listed.length} entries` : describeValue(listed);
    fail('limits', `must be an array of 1 to ${MAX_LIMITS_PER_POLICY} limits (got ${got})`);
  }
  const out: CompiledLimit[] = [];
  const seen = new Map<string, number>();
  for (let i = 0; i < listed.length; i++) {
    const at = joinPath('limits', i);
    const entry: unknown = listed[i];
    if (!isPlainObject(entry)) fail(at, `must be an object {algorithm, limit, period, burst?, timeZone?, name?} (got ${describeValue(entry)})`);
    rejectUnknownKeys(entry, LIMIT_KEYS, at, 'a limit', fail);
    const given = own(entry, 'name');
    const name = given === undefined ? `${policy}#${i}` : readName(given, joinPath(at, 'name'), fail);
    const limit = compileLimit(entry, at, name, fail);
    const previous = seen.get(name);
    if (previous !== undefined) fail(joinPath(at, 'name'), `duplicate limit name "${name}" (also limits[${previous}])`);
    seen.set(name, i);
    out.push(limit);
  }
  return out;
}

/** Validates one limit's algorithm, limit, period and burst (fields at `prefix`), then its exactness bounds. */
function compileLimit(spec: Obj, prefix: string, name: string, fail: Fail): CompiledLimit {
  const at = (key: string): string => joinPath(prefix, key);
  const algorithm = readAlgorithm(own(spec, 'algorithm'), at('algorithm'), fail);
  const limit = readCount(own(spec, 'limit'), at('limit'), fail);
  if (algorithm === 'concurrency') return compileConcurrency(spec, prefix, limit, name, fail);
  if (own(spec, 'leaseTtl') !== undefined) fail(at('leaseTtl'), `applies to algorithm concurrency only (got algorithm ${algorithm}); omit it`);
  const calendar = readCalendar(algorithm, own(spec, 'period'), own(spec, 'timeZone'), at, fail);
  const periodMs = calendar === null ? readPeriod(own(spec, 'period'), at('period'), fail) : CALENDAR_NOMINAL_MS[calendar.unit];
  const burstGiven = own(spec, 'burst') !== undefined;
  const burst = burstGiven ? readCount(own(spec, 'burst'), at('burst'), fail) : limit;
  if (!isBucket(algorithm) && burst !== limit) {
    fail(at('burst'), `burst applies to token_bucket and gcra only (got ${burst} for ${algorithm}, whose limit is ${limit}); omit it`);
  }
  // a calendar window is as long as its longest instance (a 31-day month with a DST hour) for the bounds
  const bounds: LimitNumbers = { algorithm, limit, periodMs: calendar === null ? periodMs : CALENDAR_MAX_MS[calendar.unit], burst, burstGiven };
  checkExactness(bounds, at, fail);
  if (algorithm === 'sliding_log' && Math.min(limit, periodMs) > SLIDING_LOG_ENTRIES_CAP) {
    fail(at(limit > periodMs ? 'period' : 'limit'), logEntriesWhy(limit, periodMs, SLIDING_LOG_ENTRIES_CAP));
  }
  const algorithmCode = calendar === null ? ALGORITHM_CODES[algorithm] : CALENDAR_WINDOW_CODE;
  return calendar === null ? { algorithm, algorithmCode, limit, periodMs, burst, name } : { algorithm, algorithmCode, limit, periodMs, burst, calendar, name };
}

/**
 * Most leases a concurrency key may hold at once (`limit`): the local lease table keeps one 16-byte entry
 * (expiry, lease id) per lease held, so a key takes at most 16 KiB; Redis keeps one sorted-set member each.
 */
export const CONCURRENCY_MAX_LIMIT = 1024;
/** Longest `leaseTtl`, in ms (2^31 − 1: about 24.8 days; a lease is a job's hold, renewed by acquiring again). */
export const CONCURRENCY_MAX_TTL_MS = 2 ** 31 - 1;

/**
 * A concurrency limit: at most `limit` leases held per key, each released by `release` or when `leaseTtl` has
 * passed since it was acquired (src/engine/leases.ts). `periodMs` holds the lease TTL; `burst` equals `limit`.
 */
function compileConcurrency(spec: Obj, prefix: string, limit: number, name: string, fail: Fail): CompiledLimit {
  const at = (key: string): string => joinPath(prefix, key);
  for (const k of ['period', 'burst', 'timeZone'] as const) {
    if (own(spec, k) !== undefined) fail(at(k), `does not apply to algorithm concurrency (it takes limit and leaseTtl); omit it`);
  }
  if (limit > CONCURRENCY_MAX_LIMIT) fail(at('limit'), `concurrency holds at most ${CONCURRENCY_MAX_LIMIT} leases per key (got ${limit})`);
  const ttl = own(spec, 'leaseTtl');
  if (ttl === undefined) fail(at('leaseTtl'), `is required for algorithm concurrency: ${PERIOD_RULE} (how long a lease lasts unless released)`);
  const periodMs = readPeriod(ttl, at('leaseTtl'), fail);
  if (periodMs > CONCURRENCY_MAX_TTL_MS) fail(at('leaseTtl'), `must be at most ${CONCURRENCY_MAX_TTL_MS} ms (got ${periodMs} ms)`);
  return { algorithm: 'concurrency', algorithmCode: ALGORITHM_CODES.concurrency, limit, periodMs, burst: limit, name };
}

/** True for a policy of one concurrency limit (leases: acquire and release, no check). */
export function isConcurrency(p: CompiledPolicy): boolean {
  return p.limits[0]?.algorithm === 'concurrency';
}

function logEntriesWhy(limit: number, periodMs: number, max: number): string {
  return `sliding_log keeps up to min(limit, period in ms) entries per key, at most ${max} (got min(${limit}, ${periodMs}) = ${Math.min(limit, periodMs)}); use sliding_window or a smaller limit` +
    (max < SLIDING_LOG_ENTRIES_CAP ? `, or raise maxLogEntries (up to ${SLIDING_LOG_ENTRIES_CAP})` : '');
}

/**
 * Refuses a sliding_log limit whose worst case, min(limit, period in ms) entries, exceeds `maxLogEntries`
 * (the limiter's bound on a key's log), naming the policy and the binding field (`limit`, `period`,
 * `limits[i].limit`...).
 * @throws SluiceError CONFIG.
 */
export function checkLogEntries(policies: ReadonlyMap<string, CompiledPolicy>, maxLogEntries: number): void {
  for (const p of policies.values()) {
    const listed = p.limits.length > 1 || p.limits[0].name !== p.name;
    p.limits.forEach((l, i) => {
      if (l.algorithm !== 'sliding_log' || Math.min(l.limit, l.periodMs) <= maxLogEntries) return;
      const field = l.limit > l.periodMs ? 'period' : 'limit';
      throw configError(`policy "${p.name}"`, listed ? joinPath(joinPath('limits', i), field) : field, logEntriesWhy(l.limit, l.periodMs, maxLogEntries));
    });
  }
}

/** `1mo` (and only 1 of them), the calendar-only period. */
const MONTHS_RE = /^([0-9]+)mo$/;
const CALENDAR_PERIODS: Readonly<Record<string, CalendarUnit>> = { '1d': 'd', '1w': 'w', '1mo': 'mo' };

/**
 * The calendar period of a limit, or null for a period in ms. fixed_window takes `1w` and `1mo` as calendar
 * periods (an ISO week from Monday 00:00, a month from the 1st, in `timeZone`, default UTC), and `1d` as one
 * when `timeZone` is given (without it, `1d` is the epoch-aligned 86,400,000 ms, which is the UTC day). Other
 * algorithms take `1w` as 604,800,000 ms and refuse `1mo`; `timeZone` is refused where it means nothing.
 */
function readCalendar(algorithm: Algorithm, period: unknown, timeZone: unknown, at: (key: string) => string, fail: Fail): CalendarPeriod | null {
  const months = typeof period === 'string' ? MONTHS_RE.exec(period) : null;
  if (months !== null && period !== '1mo') fail(at('period'), `months: only "1mo" (one calendar month) is accepted (got ${describeValue(period)})`);
  if (months !== null && algorithm !== 'fixed_window') {
    fail(at('period'), `"1mo" is a calendar month, for fixed_window only (a month has no fixed length in ms for ${algorithm}; got ${describeValue(period)})`);
  }
  const unit = typeof period === 'string' && Object.hasOwn(CALENDAR_PERIODS, period) ? CALENDAR_PERIODS[period] : null;
  if (timeZone !== undefined) {
    if (typeof timeZone !== 'string' || !isTimeZone(timeZone)) fail(at('timeZone'), `must be an IANA time zone name such as "Europe/Berlin" or "UTC" (got ${describeValue(timeZone)})`);
    if (algorithm !== 'fixed_window') fail(at('timeZone'), `applies to fixed_window only, whose windows start at local midnight (got algorithm ${algorithm})`);
    if (unit === null) fail(at('timeZone'), `applies to the calendar periods "1d", "1w" and "1mo" only (got period ${describeValue(period)})`);
  }
  if (algorithm !== 'fixed_window' || unit === null || (unit === 'd' && timeZone === undefined)) return null;
  return { unit, timeZone: (timeZone as string | undefined) ?? 'UTC' };
}

interface LimitNumbers {
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst: number;
  burstGiven: boolean;
}

/** True for the algorithms whose capacity is `burst` (token_bucket, gcra); the window ones' is `limit`. */
export function isBucket(algorithm: Algorithm): boolean {
  return algorithm === 'token_bucket' || algorithm === 'gcra';
}

/**
 * The engine's integer math must stay exact (computed here as BigInts):
 * - token_bucket, gcra: burst·period ≤ 2^63 − 1 (the bucket holds tokens·P) and, when limit > 0,
 *   ceil(burst·period / limit) ≤ 2^53 − 1 ms (the longest wait);
 * - fixed_window, sliding_window: limit·period ≤ 2^63 − 1; sliding_window also 2·period ≤ 2^53 − 1 ms.
 */
function checkExactness(n: LimitNumbers, at: (key: string) => string, fail: Fail): void {
  const L = BigInt(n.limit);
  const P = BigInt(n.periodMs);
  if (isBucket(n.algorithm)) {
    const B = BigInt(n.burst);
    const which = n.burstGiven ? 'burst' : 'limit';
    if (B * P > MAX_I64) fail(at(which), `${which} * period must be at most 2^63 - 1 = ${MAX_I64} for exact 64-bit math (got ${B} * ${P} ms = ${B * P})`);
    const wait = L > 0n ? (B * P + L - 1n) / L : 0n;
    if (wait > MAX_SAFE) fail(at('period'), `ceil(burst * period / limit) must be at most 2^53 - 1 = ${MAX_SAFE} ms (got ceil(${B} * ${P} / ${L}) = ${wait} ms)`);
    return;
  }
  if (L * P > MAX_I64) fail(at('limit'), `limit * period must be at most 2^63 - 1 = ${MAX_I64} for exact 64-bit math (got ${L} * ${P} ms = ${L * P})`);
  if (n.algorithm === 'sliding_window' && 2n * P > MAX_SAFE) {
    fail(at('period'), `2 * period must be at most 2^53 - 1 = ${MAX_SAFE} ms for sliding_window (got 2 * ${P} ms = ${2n * P} ms)`);
  }
}

function readAlgorithm(v: unknown, field: string, fail: Fail): Algorithm {
  const rule = `one of ${ALGORITHMS.join(', ')}`;
  if (v === undefined) fail(field, `is required: ${rule}`);
  if (typeof v !== 'string' || !Object.hasOwn(ALGORITHM_CODES, v)) fail(field, `must be ${rule} (got ${describeValue(v)})`);
  return v as Algorithm;
}

/** A non-negative safe integer (tokens); `-0` becomes 0. */
function readCount(v: unknown, field: string, fail: Fail): number {
  if (v === undefined) fail(field, `is required: ${COUNT_RULE}`);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(field, `must be ${COUNT_RULE} (got ${describeValue(v)})`);
  return v + 0;
}

/** The period in ms, via {@link parseDuration}. */
function readPeriod(v: unknown, field: string, fail: Fail): number {
  if (v === undefined) fail(field, `is required: ${PERIOD_RULE}`);
  try {
    return parseDuration(v);
  } catch (e) {
    return fail(field, (e as Error).message);
  }
}

function readName(v: unknown, field: string, fail: Fail): string {
  if (typeof v !== 'string' || !NAME_PATTERN.test(v)) fail(field, `${NAME_RULE} (got ${describeValue(v)})`);
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Descriptors, version, guard
// ---------------------------------------------------------------------------------------------------------

function compileDescriptors(v: unknown, fail: Fail): CompiledDescriptor[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) fail('descriptors', `must be an array of descriptor names or {name, header} objects (got ${describeValue(v)})`);
  const out: CompiledDescriptor[] = [];
  const seen = new Map<string, number>();
  for (let i = 0; i < v.length; i++) {
    const at = joinPath('descriptors', i);
    const entry: unknown = v[i];
    const descriptor = compileDescriptor(entry, at, fail);
    const previous = seen.get(descriptor.name);
    if (previous !== undefined) {
      const field = typeof entry === 'string' ? at : joinPath(at, 'name');
      fail(field, `duplicate descriptor "${descriptor.name}" (also descriptors[${previous}])`);
    }
    seen.set(descriptor.name, i);
    out.push(descriptor);
  }
  return out;
}

function compileDescriptor(v: unknown, at: string, fail: Fail): CompiledDescriptor {
  if (typeof v === 'string') return { name: readName(v, at, fail), header: null, from: 'query' };
  if (!isPlainObject(v)) fail(at, `must be a descriptor name or a {name, header} object (got ${describeValue(v)})`);
  rejectUnknownKeys(v, DESCRIPTOR_KEYS, at, 'a descriptor', fail);
  const name = own(v, 'name');
  if (name === undefined) fail(joinPath(at, 'name'), `is required: ${NAME_RULE.replace('must be ', '')}`);
  const header = own(v, 'header');
  if (header !== undefined && (typeof header !== 'string' || !HEADER_TOKEN.test(header))) {
    fail(joinPath(at, 'header'), `must be an HTTP header name such as "x-tenant-id" (got ${describeValue(header)})`);
  }
  const from = own(v, 'from');
  if (from !== undefined && (typeof from !== 'string' || !DESCRIPTOR_SOURCES.includes(from as DescriptorSource))) {
    fail(joinPath(at, 'from'), `must be one of ${DESCRIPTOR_SOURCES.join(', ')} (got ${describeValue(from)})`);
  }
  if (from === 'header' && header === undefined) fail(joinPath(at, 'header'), 'is required with from: header (the header to read)');
  if (from !== undefined && from !== 'header' && header !== undefined) {
    fail(joinPath(at, 'from'), `is ${from}, but header is given: a descriptor has one source`);
  }
  return {
    name: readName(name, joinPath(at, 'name'), fail), header: header === undefined ? null : header.toLowerCase(),
    from: header !== undefined ? 'header' : (from as DescriptorSource | undefined) ?? 'query',
  };
}

/** The given version as a string, or a content hash of the compiled limits and descriptors. */
function compileVersion(v: unknown, limits: CompiledLimit[], descriptors: CompiledDescriptor[], fail: Fail): string {
  if (v === undefined) return contentVersion(limits, descriptors);
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v + 0);
  if (typeof v === 'string' && VERSION_PATTERN.test(v)) return v;
  return fail('version', `must be an integer or a string of 1 to 64 visible ASCII characters (got ${describeValue(v)})`);
}

/**
 * First 8 hex chars of sha256 over the canonical JSON
 * `{"limits":[[algorithm,limit,periodMs,burst],...],"descriptors":[[name,header],...]}`.
 */
export function contentVersion(limits: readonly CompiledLimit[], descriptors: readonly CompiledDescriptor[]): string {
  const canonical = JSON.stringify({
    limits: limits.map(limitNumbers),
    descriptors: descriptors.map((d) => [d.name, d.header]),
  });
  return createHash('sha256').update(canonical).digest('hex').slice(0, 8);
}

/**
 * A policy set's version: the first 12 hex chars of sha256 over the canonical JSON of every compiled policy
 * in name order, so the same rules give the same version on every instance.
 */
export function policySetVersion(policies: ReadonlyMap<string, CompiledPolicy>): string {
  const names = [...policies.keys()].sort();
  const canonical = JSON.stringify(names.map((n) => canonicalPolicy(policies.get(n)!)));
  return createHash('sha256').update(canonical).digest('hex').slice(0, 12);
}

function canonicalPolicy(p: CompiledPolicy): unknown[] {
  const out: unknown[] = [p.name, p.version, p.versionGiven, p.limits.map((l) => [l.name, ...limitNumbers(l)]),
    p.descriptors.map((d) => [d.name, d.header]), p.guard, p.consistency, p.onStoreError, p.carryOver,
    p.shadow, p.shadowOf, p.allow, p.deny];
  // Appended only when not the defaults, so sets written before these fields keep their versions.
  if (p.descriptors.some((d) => d.from === 'path') || p.authCost !== 1 || p.rls !== null) {
    out.push(p.descriptors.map((d) => d.from), p.authCost, p.rls);
  }
  if (p.onLimit !== undefined) out.push(p.onLimit, p.maxDelayMs);
  if (p.scope !== 'local') out.push(p.scope);
  return out;
}

/** [algorithm, limit, periodMs, burst], plus the calendar unit and time zone of a calendar window. */
export function limitNumbers(l: CompiledLimit): unknown[] {
  const n: unknown[] = [l.algorithm, l.limit, l.periodMs, l.burst];
  if (l.calendar !== undefined) n.push(l.calendar.unit, l.calendar.timeZone);
  return n;
}

function readGuardName(v: unknown, fail: Fail): string | null {
  if (v === undefined) return null;
  if (typeof v !== 'string') fail('guard', `must be the name of another policy (got ${describeValue(v)})`);
  return v;
}

/** A guard names another policy of the same map that has no guard itself. */
function checkGuard(policy: CompiledPolicy, all: Map<string, CompiledPolicy>, fail: Fail): void {
  const guard = policy.guard;
  if (guard === null) return;
  if (guard === policy.name) fail('guard', 'a policy cannot guard itself');
  const target = all.get(guard);
  if (target === undefined) fail('guard', `no policy named ${describeValue(guard)} in policies`);
  if (target.guard !== null) {
    fail('guard', `policy "${guard}" has a guard of its own ("${target.guard}"); a guard cannot itself be guarded`);
  }
  if (target.consistency !== policy.consistency) {
    fail('guard', `policy "${guard}" keeps its state ${target.consistency}, this one ${policy.consistency}: a check and its guard must be decided in one place`);
  }
  if (target.shadow) fail('guard', `policy "${guard}" is a shadow policy: a guard must be live (a shadow never denies)`);
  if (isConcurrency(target)) fail('guard', `policy "${guard}" is a concurrency policy (leases, acquired and released): a guard is checked`);
}

/**
 * A candidate (`shadowOf`) names a live policy of the same map, and can derive its key from the live check's:
 * it has no descriptors (it takes the live check's whole key), or each of its descriptors is one of the live
 * policy's (its key is those values, taken from the live check's key, in the candidate's order).
 */
function checkShadowOf(policy: CompiledPolicy, all: Map<string, CompiledPolicy>, fail: Fail): void {
  const live = policy.shadowOf;
  if (live === null) return;
  if (live === policy.name) fail('shadowOf', 'a policy cannot shadow itself');
  const target = all.get(live);
  if (target === undefined) fail('shadowOf', `no policy named ${describeValue(live)} in policies`);
  if (target.shadow) fail('shadowOf', `policy "${live}" is itself a shadow policy: a candidate shadows a live policy`);
  if (isConcurrency(target)) fail('shadowOf', `policy "${live}" is a concurrency policy (leases, never checked): a candidate shadows a checked policy`);
  const liveNames = target.descriptors.map((d) => d.name);
  const missing = policy.descriptors.filter((d) => !liveNames.includes(d.name)).map((d) => d.name);
  if (missing.length > 0) {
    const has = liveNames.length === 0 ? 'has no descriptors' : `has descriptors ${liveNames.join(', ')}`;
    fail('shadowOf', `this policy's key cannot be derived from policy "${live}"'s checks: descriptor${missing.length > 1 ? 's' : ''} ${missing.join(', ')} not among the live policy's (it ${has}); use a subset of them, or none (the live check's whole key)`);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

/**
 * Appends a key or index to a field path: `limits[1]`, `limits[1].period`; keys outside
 * `[A-Za-z0-9_-]` are quoted (`["a.b"]`).
 * @internal shared with the YAML loader.
 */
export function joinPath(prefix: string, key: string | number): string {
  if (typeof key === 'number') return `${prefix}[${key}]`;
  if (/^[A-Za-z0-9_-]+$/.test(key)) return prefix === '' ? key : `${prefix}.${key}`;
  return `${prefix}[${JSON.stringify(key)}]`;
}

function isPlainObject(v: unknown): v is Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** An own property only (never an inherited one such as `constructor`); undefined counts as absent. */
function own(o: Obj, key: string): unknown {
  return Object.hasOwn(o, key) ? o[key] : undefined;
}

function rejectUnknownKeys(o: Obj, allowed: readonly string[], prefix: string, what: string, fail: Fail): void {
  for (const key of Object.keys(o)) {
    if (!allowed.includes(key)) fail(joinPath(prefix, key), `unknown key (${what} accepts ${allowed.join(', ')})`);
  }
}

function deepFreeze(policy: CompiledPolicy): void {
  for (const limit of policy.limits) {
    if (limit.calendar !== undefined) Object.freeze(limit.calendar);
    Object.freeze(limit);
  }
  for (const descriptor of policy.descriptors) Object.freeze(descriptor);
  if (policy.lease !== null) Object.freeze(policy.lease);
  if (policy.rls !== null) {
    for (const e of policy.rls.entries) Object.freeze(e);
    Object.freeze(policy.rls.entries);
    Object.freeze(policy.rls);
  }
  Object.freeze(policy.limits);
  Object.freeze(policy.descriptors);
  Object.freeze(policy.allow);
  Object.freeze(policy.deny);
  Object.freeze(policy);
}
