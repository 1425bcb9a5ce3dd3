// Sliding window counter (the weighted two-window estimate popularised by Cloudflare, 2017), exact:
// estimate·P = prev·(P − e) + cur·P compared with L·P, all integers. Ranges: prev, cur ≤ L and LP < 2^63.
import { Limit } from '../layout';
import { allow, deny, never } from '../result';

export function slidingWindow(lim: Limit, exists: bool, w0: u64, w1: u64, last: u64, c: u64, t: u64): void {
  const P = lim.P, L = lim.L;
  const k = t / P;
  let prev: u64 = 0, cur: u64 = 0;
  if (exists) {
    const lk = last / P;
    if (lk == k) {
      prev = w0;
      cur = w1;
    } else if (lk + 1 == k) {
      prev = w1;
    }
  }
  const e = t - k * P;
  const weighted = prev * (P - e); // the previous window's share of the estimate, times P
  if (c > L) {
    never(remainingOf(L, P, cur, weighted), resetOf(P, k, t, prev, cur));
    return;
  }
  // estimate ≤ L holds locally; a count merged from several instances (sync mode) may pass it
  const avail = cur < L ? L - cur : 0;
  if (c == 0 || (c <= avail && weighted <= (avail - c) * P)) {
    allow(remainingOf(L, P, cur + c, weighted), resetOf(P, k, t, prev, cur + c), prev, cur + c, c);
  } else {
    deny(remainingOf(L, P, cur, weighted), resetOf(P, k, t, prev, cur), retryOf(P, L, e, prev, cur, c));
  }
}

/** floor(L − estimate) = floor(((L − cur)·P − weighted) / P). */
@inline function remainingOf(L: u64, P: u64, cur: u64, weighted: u64): u64 {
  if (cur >= L) return 0;
  const room = (L - cur) * P;
  return room > weighted ? (room - weighted) / P : 0;
}

/** Until the estimate is 0: the end of the next window if this one has grants, else of this one. */
@inline function resetOf(P: u64, k: u64, t: u64, prev: u64, cur: u64): u64 {
  if (cur > 0) return (k + 2) * P - t;
  if (prev > 0) return (k + 1) * P - t;
  return 0;
}

/**
 * The smallest whole d ≥ 1 such that the same check at t + d is admitted, nothing else arriving.
 * In this window (possible only if c ≤ L − cur) it needs prev·(P − e − d) ≤ (L − cur − c)·P; otherwise in the
 * next one, where prev' = cur and e' = d − (P − e), it needs cur·(P − e') ≤ (L − c)·P. Both forms meet at
 * the window edge, and e' = P (the window after next, all clear) always admits.
 */
function retryOf(P: u64, L: u64, e: u64, prev: u64, cur: u64, c: u64): u64 {
  const toEdge = P - e;
  if (cur < L && c <= L - cur) {
    // denied here means prev > 0 and prev·(P − e) > (L − cur − c)·P, so q < P − e and d ≥ 1
    const q = ((L - cur - c) * P) / prev;
    return toEdge - q;
  }
  // cur + c > L ≥ c, so cur > 0
  const q = ((L - c) * P) / cur;
  return toEdge + (q >= P ? 0 : P - q);
}

@inline export function slidingWindowIdle(lim: Limit, last: u64, now: u64): bool {
  return now / lim.P >= last / lim.P + 2;
}
