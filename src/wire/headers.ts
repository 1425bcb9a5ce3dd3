import type { Decision } from '../types/decision.js';
import { isBucket, type CompiledLimit, type CompiledPolicy } from '../config/policy-spec.js';

/**
 * Rate-limit response headers, per draft-ietf-httpapi-ratelimit-headers-10 and -11 (the fields' meanings have
 * not changed since -10):
 * - `RateLimit-Policy`, a Structured Fields List (RFC 8941 §3.1) of one item per limit of the policy, then its
 *   guard's: `"free";q=100;w=60;sluice-burst=100`. q is the quota (tokens) per window w (whole seconds, the
 *   draft has no sub-second windows: see {@link quotaWindow}); `sluice-burst` (a vendor parameter, prefixed as
 *   the draft asks of service-specific ones) is a token bucket's or GCRA's capacity, the largest cost that can
 *   ever pass.
 * - `RateLimit`, a List of one item for the binding limit: `"free";r=42;t=1`. r is the tokens left; t the
 *   seconds until more quota is made available ({@link rateLimitHeader}): for a denial, the same wait as
 *   Retry-After; absent when no wait would do (the draft makes t optional).
 * - `Retry-After` (RFC 9110 §10.2.3) in delay-seconds on a denied answer (429 or 403), rounded up from the exact
 *   wait, never 0.
 * Seconds are always rounded up: a client that waits what it was told is never refused for waiting too
 * little. Integers are clamped to the sf-integer range (at most 15 digits, RFC 8941 §3.3.1).
 */

/** The largest sf-integer (RFC 8941 §3.3.1): 15 decimal digits. */
export const SF_INTEGER_MAX = 999_999_999_999_999;

/** `n` clamped to [0, {@link SF_INTEGER_MAX}] (a larger count would make the whole field unparseable). */
export function sfInteger(n: number): number {
  return n > SF_INTEGER_MAX ? SF_INTEGER_MAX : n < 0 ? 0 : n;
}

/** ceil(ms / 1000) for a non-negative number of ms. */
export function secondsUp(ms: number): number {
  return Math.ceil(ms / 1000);
}

/** `Retry-After` seconds for a denial with a finite wait: at least 1, at most {@link SF_INTEGER_MAX}. */
export function retryAfterSeconds(retryAfterMs: number): number {
  return sfInteger(Math.max(1, secondsUp(retryAfterMs)));
}

/**
 * A limit's rate as the draft's q per w, with w a whole number of seconds: for a period of whole seconds,
 * q = limit and w = the period; otherwise the shortest whole-second window that holds a whole number of
 * periods (lcm(period, 1 s)) and the limit of that many periods: 10 per 500 ms is q=20;w=1, 3 per 1.5 s is
 * q=6;w=3. Never a different rate, as rounding w would give. Both clamped to the sf-integer range.
 */
export function quotaWindow(l: Pick<CompiledLimit, 'limit' | 'periodMs'>): { q: number; w: number } {
  const g = gcd(l.periodMs, 1000);
  return { q: sfInteger(l.limit * (1000 / g)), w: sfInteger(l.periodMs / g) };
}

/** The `RateLimit-Policy` value for a policy: each of its limits, then its guard's. Computed once per policy. */
export function rateLimitPolicyHeader(policy: CompiledPolicy, guard: CompiledPolicy | undefined): string {
  const limits = guard ? [...policy.limits, ...guard.limits] : policy.limits;
  return limits.map((l) => {
    const { q, w } = quotaWindow(l);
    const burst = isBucket(l.algorithm) ? `;sluice-burst=${sfInteger(l.burst)}` : '';
    return `${sfString(l.name)};q=${q};w=${w}${burst}`;
  }).join(', ');
}

/**
 * The `RateLimit` value for a decision: the binding limit's remaining tokens (r) and, as t, the seconds until
 * more quota is made available (draft -10 §4.1.2), rounded up:
 * - denied with a finite wait: the wait (the same number as Retry-After);
 * - denied for good (`retryAfterMs` null: limit 0, cost above capacity, deny list): no t, as no wait would do;
 * - admitted: until the next token for a token bucket or GCRA, the window's end for fixed_window; for
 *   sliding_window and sliding_log the time until every counted grant has left the window (resetAfterMs: an
 *   upper bound, as the decision does not say when the oldest grants leave); no t when the limit is full
 *   (nothing is pending) or `limit` is not given (a remote limiter's decision).
 * @param limit the binding limit ({@link bindingLimit}), which admitted checks need for t.
 */
export function rateLimitHeader(d: Decision, limit?: CompiledLimit): string {
  const item = `${sfString(d.policy)};r=${sfInteger(d.remaining)}`;
  if (!d.allowed) return d.retryAfterMs === null ? item : `${item};t=${retryAfterSeconds(d.retryAfterMs)}`;
  const next = limit === undefined ? -1 : msUntilMoreQuota(d, limit);
  return next < 0 ? item : `${item};t=${sfInteger(secondsUp(next))}`;
}

/**
 * Ms until an admitted decision's limit has more tokens than `remaining`, or -1 when none are pending.
 * Token bucket and GCRA refill one token every P/L ms; resetAfterMs (rounded up) is the time to full, so the
 * next token is due (B − remaining − 1)·P/L ms before it.
 */
export function msUntilMoreQuota(d: Decision, l: CompiledLimit): number {
  if (d.resetAfterMs <= 0 || l.limit === 0) return -1;
  switch (l.algorithm) {
    case 'token_bucket':
    case 'gcra': {
      if (d.remaining >= l.burst) return -1;
      return Math.max(0, d.resetAfterMs - ((l.burst - d.remaining - 1) * l.periodMs) / l.limit);
    }
    case 'fixed_window':
    case 'sliding_window':
    case 'sliding_log':
      return d.resetAfterMs;
    case 'concurrency': // never checked (leases), so never here
      return -1;
  }
}

/**
 * The limit a decision names (`d.policy`): one of `policy`'s limits or of its guard's. A short scan of a few
 * limits, no allocation.
 */
export function bindingLimit(policies: ReadonlyMap<string, CompiledPolicy>, policy: string, limitName: string): CompiledLimit | undefined {
  const p = policies.get(policy);
  if (p === undefined) return undefined;
  for (const l of p.limits) if (l.name === limitName) return l;
  const g = p.guard === null ? undefined : policies.get(p.guard);
  if (g !== undefined) for (const l of g.limits) if (l.name === limitName) return l;
  return undefined;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** A structured-field String (RFC 8941 §3.3.3): printable ASCII with `"` and `\` escaped. */
export function sfString(s: string): string {
  let v = SF_STRINGS.get(s);
  if (v === undefined) {
    v = `"${s.replace(/[\\"]/g, (c) => '\\' + c)}"`;
    remember(SF_STRINGS, s, v);
  }
  return v;
}

/**
 * Names are limit names from the policy set, so few: each is escaped once and kept. The cache is bounded all
 * the same (reloads may bring new names), and is simply emptied when full.
 */
const SF_STRINGS = new Map<string, string>();
const MAX_CACHED = 4096;

/** Caches `v` for `k` in a bounded map (emptied when it is full). */
export function remember(m: Map<string, string>, k: string, v: string): void {
  if (m.size >= MAX_CACHED) m.clear();
  m.set(k, v);
}
