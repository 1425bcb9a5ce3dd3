// Token bucket, exact: the state is x = tokens·P (an integer), so a refill of elapsed·L/P tokens is the
// integer elapsed·L. Ranges: x ≤ BP < 2^63; elapsed is clamped to fullAfter before multiplying, so
// x + elapsed·L < BP + BP/L·L + L < 2^64.
import { Limit } from '../layout';
import { ceilDiv } from '../math';
import { allow, deny, never } from '../result';

/** Tokens·P at time t for a stored state (x at `last`). */
@inline export function refill(lim: Limit, x: u64, last: u64, t: u64): u64 {
  const elapsed = t - last;
  if (elapsed >= lim.fullAfter) return lim.BP;
  const y = x + elapsed * lim.L;
  return y > lim.BP ? lim.BP : y;
}

export function tokenBucket(lim: Limit, exists: bool, w0: u64, last: u64, c: u64, t: u64): void {
  const P = lim.P, L = lim.L, BP = lim.BP;
  const x = exists ? refill(lim, w0, last, t) : BP;
  if (c > lim.B) {
    never(x / P, ceilDiv(BP - x, L));
    return;
  }
  const cP = c * P; // ≤ BP
  if (cP <= x) {
    const after = x - cP;
    allow(after / P, ceilDiv(BP - after, L), after, 0, c);
  } else {
    deny(x / P, ceilDiv(BP - x, L), ceilDiv(cP - x, L));
  }
}

/** True when the bucket has refilled to full by `now`: its state carries no information. */
@inline export function tokenBucketIdle(lim: Limit, x: u64, last: u64, now: u64): bool {
  return now > last ? refill(lim, x, last, now) == lim.BP : x == lim.BP;
}
