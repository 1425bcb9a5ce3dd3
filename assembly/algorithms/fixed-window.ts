// Fixed window: windows [k·P, (k+1)·P) aligned to the Unix epoch; w0 is the count of the window that holds
// `last`. Worst case by design: L at the end of one window and L at the start of the next (2·L in 1 ms).
import { Limit } from '../layout';
import { allow, deny, never } from '../result';

export function fixedWindow(lim: Limit, exists: bool, w0: u64, last: u64, c: u64, t: u64): void {
  const P = lim.P, L = lim.L;
  const k = t / P;
  const count = exists && last / P == k ? w0 : 0;
  const untilEnd = (k + 1) * P - t;
  // a count merged from several instances (sync mode) may pass L
  const room = count < L ? L - count : 0;
  if (c > L) {
    never(room, untilEnd);
  } else if (c <= room) {
    allow(room - c, untilEnd, count + c, 0, c);
  } else {
    deny(room, untilEnd, untilEnd);
  }
}

@inline export function fixedWindowIdle(lim: Limit, last: u64, now: u64): bool {
  return now / lim.P > last / lim.P;
}
