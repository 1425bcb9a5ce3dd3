// The outcome of evaluating one leg, held in globals so the algorithms allocate nothing.
// An algorithm sets every field; `write` says whether the new state (w0, w1) must be stored.
import { CODE_ALLOW, CODE_DENY, CODE_NEVER } from './layout';

export let code: f64 = 0;
export let remaining: u64 = 0;
export let resetAfter: u64 = 0;
/** Wait in ms when code is CODE_DENY; when CODE_ALLOW, the delay before the caller may proceed (0: now). */
export let retryAfter: u64 = 0;
export let write: bool = false;
export let nw0: u64 = 0;
export let nw1: u64 = 0;

@inline export function allow(rem: u64, reset: u64, w0: u64, w1: u64, cost: u64): void {
  code = CODE_ALLOW;
  remaining = rem;
  resetAfter = reset;
  retryAfter = 0;
  nw0 = w0;
  nw1 = w1;
  // A peek (cost 0) reports the state and changes nothing, not even the last-seen time.
  write = cost > 0;
}

/**
 * Admitted now in debt (onLimit: delay): the cost is reserved at decision time and the caller waits `delay`
 * ms (> 0), the time the shortfall takes to refill. Nothing is left (remaining 0).
 */
@inline export function allowLater(reset: u64, w0: u64, w1: u64, delay: u64): void {
  code = CODE_ALLOW;
  remaining = 0;
  resetAfter = reset;
  retryAfter = delay;
  nw0 = w0;
  nw1 = w1;
  write = true;
}

@inline export function deny(rem: u64, reset: u64, retry: u64): void {
  code = CODE_DENY;
  remaining = rem;
  resetAfter = reset;
  retryAfter = retry;
  write = false;
}

/** Denied for good: the cost exceeds what the limit can ever hold. */
@inline export function never(rem: u64, reset: u64): void {
  code = CODE_NEVER;
  remaining = rem;
  resetAfter = reset;
  retryAfter = 0;
  write = false;
}
