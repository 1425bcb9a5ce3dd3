/**
 * The rules of where a policy's state lives and how it answers when out of tokens: consistency (Lua's exact
 * range for the Redis-backed modes, what sync and lease mode can merge or lease), the lease settings, scope,
 * carryOver, onLimit: delay, and a concurrency policy's restrictions.
 */
import { describeValue, parseDuration } from './duration.js';
import {
  DEFAULT_LEASE_IDLE_MS, DEFAULT_LEASE_MAX_SHARE, DEFAULT_LEASE_TTL_MS, isBucket,
  type CompiledDescriptor, type CompiledLimit, type Consistency, type LeaseSettings, type Scope,
} from './policy-spec.js';
import { isPlainObject, joinPath, own, readChoice, readPeriod, rejectUnknownKeys, type Fail, type Obj } from './fields.js';
import { calendarText } from './limits.js';

const SCOPES: readonly Scope[] = ['local', 'global'];

/** Redis's Lua keeps numbers as doubles: B·P (or L·P) up to 2^51 keeps every sum and product exact. */
const MAX_LUA = 2n ** 51n;

/** Largest maxDelayMs: the kernel packs it above the limit id and group length of an integral f64 (src/shard/abi.ts). */
export const MAX_DELAY_MS = 2 ** 29 - 1;

/** A local bucket's debt bound: B·P + maxDelay·L stays below 2^62, so the kernel's u64 sums never wrap. */
const MAX_DEBT_LOCAL = 2n ** 62n;

/**
 * `onLimit` and `maxDelayMs` (see PolicySpec.onLimit, policy-spec.ts). Refused where a delay cannot be exact: the
 * window algorithms (a reservation would have to live in a future window, which their state does not hold:
 * a fixed window's count is one window's, a sliding window's estimate and a sliding log's entries are the
 * past), sync mode (another instance's spending, merged later, would move a wait already promised), lease
 * mode (an instance decides from its own leased tokens: a wait promised from them ignores the other
 * instances' leases and their returns, so it would not be exact; scope global is lease mode) and
 * shadow policies (they never deny, so there is nothing to delay).
 */

/** Returns maxDelayMs, or 0 for onLimit: deny (the default). */
export function readOnLimit(v: unknown, max: unknown, limits: CompiledLimit[], descriptors: CompiledDescriptor[], consistency: Consistency, shadow: boolean, fail: Fail): number {
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
export function checkConcurrencyPolicy(raw: Obj, limits: CompiledLimit[], consistency: Consistency, fail: Fail): void {
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
export function readScope(v: unknown, consistency: Consistency, limits: CompiledLimit[], fail: Fail): Scope {
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

export function readCarryOver(v: unknown, consistency: Consistency, limits: CompiledLimit[], fail: Fail): boolean {
  if (v === undefined || v === false) return false;
  if (v !== true) fail('carryOver', `must be true or false (got ${describeValue(v)})`);
  if (consistency !== 'local') fail('carryOver', `applies to consistency local only (got consistency ${consistency}): Redis-backed state starts afresh when the numbers change`);
  if (!limits.some((l) => l.algorithm === 'token_bucket')) fail('carryOver', 'applies to token_bucket limits, and this policy has none');
  return true;
}

/** A Redis-backed limit must stay exact in Lua's doubles: B·P (buckets) or L·P (windows) at most 2^51. */
export function checkLuaExactness(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
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
export function checkSyncable(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
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
export function checkLeasable(limits: CompiledLimit[], listed: boolean, fail: Fail): void {
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

export function readLease(v: unknown, consistency: Consistency, fail: Fail): LeaseSettings | null {
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
