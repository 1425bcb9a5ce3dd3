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
function sfString(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => '\\' + c)}"`;
}
