import type { Decision } from '../types.js';
import type { PolicyRuntime } from './runtime.js';

/** How long a fail-closed denial asks the client to wait, in ms. */
export const CLOSED_RETRY_MS = 1000;

/**
 * The decision a store-backed check gets when the store failed and its policy fails `open` (admitted) or
 * `closed` (denied, retry after {@link CLOSED_RETRY_MS}). Marked `degraded`: nothing was counted.
 */
export function degraded(rt: PolicyRuntime, rule: 'open' | 'closed'): Decision {
  const limit = rt.legLimits[0];
  return rule === 'open'
    ? { allowed: true, limit: limit.limit, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, policy: limit.name, degraded: true }
    : { allowed: false, limit: limit.limit, remaining: 0, resetAfterMs: CLOSED_RETRY_MS, retryAfterMs: CLOSED_RETRY_MS, policy: limit.name, degraded: true };
}
