// Fixed window: windows [k·P, (k+1)·P) aligned to the Unix epoch; w0 is the count of the window that holds
// `last`. Worst case by design: L at the end of one window and L at the start of the next (2·L in 1 ms).
import { Limit } from '../layout';
import { allow, deny, never } from '../result';

export function fixedWindow(lim: Limit, exists: bool, w0: u64, last: u64, c: u64, t: u64): void {
  const P = lim.P, L = lim.L;
  const k = t / P;
  const count = exists && last / P == k ? w0 : 0;
  const untilEnd = (k + 1) * P - t;
  if (c > L) {
    never(L - count, untilEnd);
  } else if (c <= L - count) {
    allow(L - count - c, untilEnd, count + c, 0, c);
  } else {
    deny(L - count, untilEnd, untilEnd);
  }
}

@inline export function fixedWindowIdle(lim: Limit, last: u64, now: u64): bool {
  return now / lim.P > last / lim.P;
}
