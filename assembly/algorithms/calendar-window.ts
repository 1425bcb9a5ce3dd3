// Fixed window over calendar windows (a local day, an ISO week, a month in a time zone): the windows differ
// in length, so they are not k·P. Their bounds come from JS (src/config/calendar.ts, exact with Intl): the
// kernel holds the current window's end for each calendar limit (Limit.winEnd, set by setWindow before a
// batch whose time passed it), and each key stores the end of the window its count belongs to:
//   w0 = count, w1 = that window's end (Unix ms).
// A stored count is in force while t < w1; otherwise the key starts the current window, [.., winEnd).
import { Limit } from '../layout';
import { allow, deny, never } from '../result';

export function calendarWindow(lim: Limit, exists: bool, w0: u64, w1: u64, c: u64, t: u64): void {
  const L = lim.L;
  let count: u64 = 0;
  let end = lim.winEnd;
  if (exists && t < w1) {
    count = w0;
    end = w1;
  } else if (end <= t) {
    // JS sets winEnd past the batch's time before deciding, and t > now only for a key whose stored window
    // still holds t (the branch above): unreachable, but never a wrapped wait
    deny(0, 1, 1);
    return;
  }
  const untilEnd = end - t;
  const room = count < L ? L - count : 0;
  if (c > L) {
    never(room, untilEnd);
  } else if (c <= room) {
    allow(room - c, untilEnd, count + c, end, c);
  } else {
    deny(room, untilEnd, untilEnd);
  }
}

@inline export function calendarWindowIdle(w1: u64, now: u64): bool {
  return now >= w1;
}
