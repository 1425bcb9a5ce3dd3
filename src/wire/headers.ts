import type { Decision } from '../types.js';
import type { CompiledPolicy } from '../config/policies.js';

/**
 * Rate-limit response headers.
 * - `RateLimit-Policy` and `RateLimit` as structured-field Lists, draft-ietf-httpapi-ratelimit-headers-11
 *   (`"free";q=100;w=60` and `"free";r=42;t=17`): q is the quota per window, w the window and t the time to
 *   reset, both in whole seconds; r is what is left.
 * - `Retry-After` (RFC 9110 §10.2.3) in delay-seconds, rounded up from the exact wait, never 0 on a denial.
 * Seconds are always rounded up: a client that waits what it was told is never refused for waiting too little.
 */

/** ceil(ms / 1000) for a non-negative number of ms. */
export function secondsUp(ms: number): number {
  return Math.ceil(ms / 1000);
}

/** `Retry-After` seconds for a denial with a finite wait: at least 1. */
export function retryAfterSeconds(retryAfterMs: number): number {
  return Math.max(1, secondsUp(retryAfterMs));
}

/** The `RateLimit-Policy` value for a policy: each of its limits, then its guard's. Computed once per policy. */
export function rateLimitPolicyHeader(policy: CompiledPolicy, guard: CompiledPolicy | undefined): string {
  const limits = guard ? [...policy.limits, ...guard.limits] : policy.limits;
  return limits.map((l) => `${sfString(l.name)};q=${l.limit};w=${secondsUp(l.periodMs)}`).join(', ');
}

/** The `RateLimit` value for a decision: the binding limit's remaining tokens and seconds to reset. */
export function rateLimitHeader(d: Decision): string {
  return `${sfString(d.policy)};r=${d.remaining};t=${secondsUp(d.resetAfterMs)}`;
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
