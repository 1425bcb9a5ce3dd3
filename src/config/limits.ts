/**
 * A policy's limits: the inline limit or each entry of `limits`, validated and compiled to engine units
 * (algorithm code, limit, period in ms, burst, calendar period), with the bounds that keep the engine's
 * integer math exact and a sliding log's entries bounded.
 */
import { configError } from '../util/errors.js';
import { describeValue } from './duration.js';
import { CALENDAR_MAX_MS, CALENDAR_NOMINAL_MS, isTimeZone, type CalendarPeriod, type CalendarUnit } from '../util/calendar.js';
import {
  ALGORITHM_CODES, CALENDAR_WINDOW_CODE, MAX_LIMITS_PER_POLICY, SLIDING_LOG_ENTRIES_CAP, isBucket,
  type Algorithm, type CompiledLimit, type CompiledPolicy,
} from './policy-spec.js';
import { PERIOD_RULE, isPlainObject, joinPath, own, readCount, readName, readPeriod, rejectUnknownKeys, type Fail, type Obj } from './fields.js';

const ALGORITHMS = Object.keys(ALGORITHM_CODES) as Algorithm[];
export const INLINE_KEYS = ['algorithm', 'limit', 'period', 'burst', 'timeZone', 'leaseTtl'] as const;
const LIMIT_KEYS = [...INLINE_KEYS, 'name'];
const MAX_I64 = (1n << 63n) - 1n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** The inline limit (named after the policy), or each entry of `limits` (named `${policy}#${i}`). */
export function compileLimits(policy: string, raw: Obj, fail: Fail): CompiledLimit[] {
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
  const first = logEntriesProblems(policies, maxLogEntries)[0];
  if (first !== undefined) throw configError(`policy "${first.policy}"`, first.field, first.why);
}

/** Every limit {@link checkLogEntries} refuses, in order: its policy, its field within it, and why (`sluice validate` lists them all). */
export function logEntriesProblems(policies: ReadonlyMap<string, CompiledPolicy>, maxLogEntries: number): Array<{ policy: string; field: string; why: string }> {
  const out: Array<{ policy: string; field: string; why: string }> = [];
  for (const p of policies.values()) {
    const listed = p.limits.length > 1 || p.limits[0].name !== p.name;
    p.limits.forEach((l, i) => {
      if (l.algorithm !== 'sliding_log' || Math.min(l.limit, l.periodMs) <= maxLogEntries) return;
      const field = l.limit > l.periodMs ? 'period' : 'limit';
      out.push({ policy: p.name, field: listed ? joinPath(joinPath('limits', i), field) : field, why: logEntriesWhy(l.limit, l.periodMs, maxLogEntries) });
    });
  }
  return out;
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

export function calendarText(unit: CalendarUnit): string {
  return unit === 'mo' ? '1mo' : `1${unit}`;
}
