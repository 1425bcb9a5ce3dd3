// Token bucket, exact: the state is x = tokens·P (an integer), so a refill of elapsed·L/P tokens is the
// integer elapsed·L. Ranges: x ≤ BP < 2^63; elapsed is clamped to the time to full before multiplying, so
// x + elapsed·L < BP + BP/L·L + L < 2^64.
// x is signed: a bucket shared through Redis in `sync` mode can be in debt (x < 0) after instances together
// over-admitted; it then repays at L per ms before it admits again. Local buckets never go below 0. Unsigned
// differences such as BP − x stay exact for negative x (two's complement), so only comparisons need care.
// onLimit: delay puts a local bucket in debt too, by at most maxDelay·L (the loader keeps B·P + maxDelay·L
// below 2^62): a check short of tokens by s·P whose refill time ceil(s·P / L) is within maxDelay is admitted
// now, x −= c·P, and waits that long. A later check sees the debt, so its wait ends no earlier (FIFO per key).
import { Limit } from '../layout';
import { ceilDiv } from '../math';
import { allow, allowLater, deny, never } from '../result';

/** Tokens·P at time t for a stored state (x at `last`). */
@inline export function refill(lim: Limit, x: u64, last: u64, t: u64): u64 {
  const elapsed = t - last;
  if (<i64>x < 0) {
    // in debt (sync mode, where B·P ≤ 2^51 keeps this small; onLimit: delay, at most maxDelay·L): climb back at L per ms
    if (elapsed >= ceilDiv(lim.BP - x, lim.L)) return lim.BP;
    return x + elapsed * lim.L;
  }
  if (elapsed >= lim.fullAfter) return lim.BP;
  const y = x + elapsed * lim.L;
  return y > lim.BP ? lim.BP : y;
}

/** floor(tokens), 0 while in debt. */
@inline function whole(x: u64, P: u64): u64 {
  return <i64>x > 0 ? x / P : 0;
}

/**
 * maxDelay: ms this check may wait to be admitted (0: never; see the note above). A check denied while
 * maxDelay > 0 reports the earliest retry that is admitted: its wait minus maxDelay (then delayed by maxDelay).
 */
export function tokenBucket(lim: Limit, exists: bool, w0: u64, last: u64, c: u64, t: u64, maxDelay: u64): void {
  const P = lim.P, L = lim.L, BP = lim.BP;
  const x = exists ? refill(lim, w0, last, t) : BP;
  if (c > lim.B) {
    never(whole(x, P), ceilDiv(BP - x, L));
    return;
  }
  const cP = c * P; // ≤ BP
  if (c == 0 || (<i64>x >= 0 && cP <= x)) {
    const after = x - cP;
    allow(whole(after, P), ceilDiv(BP - after, L), after, 0, c);
  } else {
    const wait = ceilDiv(cP - x, L); // cP − x is exact for x in debt (below 2^63 by the loader's bound)
    if (wait <= maxDelay) {
      const after = x - cP;
      allowLater(ceilDiv(BP - after, L), after, 0, wait);
    } else {
      deny(whole(x, P), ceilDiv(BP - x, L), maxDelay > 0 ? wait - maxDelay : wait);
    }
  }
}

/** True when the bucket has refilled to full by `now`: its state carries no information. */
@inline export function tokenBucketIdle(lim: Limit, x: u64, last: u64, now: u64): bool {
  return now > last ? refill(lim, x, last, now) == lim.BP : x == lim.BP;
}
