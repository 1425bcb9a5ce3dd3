/**
 * The Lua algorithms of lua/lib.lua (token bucket, GCRA, fixed window, sliding window) and
 * lua/calendar_window.lua, line for line in TypeScript: both run on doubles, so for the same state, limit,
 * cost and time they give the same outputs. The over-limit cache (src/engine/strict/over-limit.ts) uses them to
 * answer, without Redis, a check Redis is known to deny, with the numbers Redis would give. The sliding log
 * (lua/sliding_log.lua) has no twin: its state is the log's entries, which a reply does not carry.
 *
 * {@link evaluateLeg} writes code, remaining, resetAfterMs, retryAfterMs (−1 = never) into `out` at `at`.
 */

/** Outcome codes, as lib.lua's: UNREADABLE is a leg the script cannot place (it changes nothing). */
const ALLOW = 0, DENY = 1, NEVER = 2, UNREADABLE = 4;

function fdiv(a: number, b: number): number {
  const r = a % b;
  let q = (a - r) / b;
  if (r < 0) q -= 1;
  else if (r >= b) q += 1;
  return q;
}

function cdiv(a: number, b: number): number {
  let q = fdiv(a, b);
  if (q * b < a) q += 1;
  return q;
}

function put(out: Float64Array, at: number, code: number, rem: number, reset: number, retry: number): void {
  out[at] = code;
  out[at + 1] = rem;
  out[at + 2] = reset;
  out[at + 3] = retry;
}

function tokenBucket(L: number, P: number, B: number, exists: boolean, w0: number, last: number, c: number, t: number, out: Float64Array, at: number): void {
  const BP = B * P;
  let x = BP;
  if (exists) {
    // from a debt (w0 < 0: a delayed admission, a sync merge) the bucket takes longer to fill: no shortcut on
    // the elapsed time alone. Exact in doubles as the script's (lua/token_bucket.lua says why)
    x = w0 + (t - last) * L;
    if (x > BP) x = BP;
  }
  const whole = x > 0 ? fdiv(x, P) : 0;
  if (c > B) return put(out, at, NEVER, whole, cdiv(BP - x, L), -1);
  const cP = c * P;
  if (c === 0 || cP <= x) {
    const after = x - cP;
    return put(out, at, ALLOW, after < 0 ? 0 : fdiv(after, P), cdiv(BP - after, L), 0);
  }
  put(out, at, DENY, whole, cdiv(BP - x, L), cdiv(cP - x, L));
}

function gcra(L: number, P: number, B: number, exists: boolean, w0: number, w1: number, t: number, c: number, out: Float64Array, at: number): void {
  const BP = B * P;
  let debt = 0;
  if (exists && w0 >= t) debt = (w0 - t) * L + w1;
  // past B·P of debt (a delayed admission, a sync merge) nothing is left, not less than nothing
  const left = debt < BP ? fdiv(BP - debt, P) : 0;
  if (c > B) return put(out, at, NEVER, left, cdiv(debt, L), -1);
  const cP = c * P;
  if (c === 0 || debt + cP <= BP) {
    const nd = debt + cP;
    return put(out, at, ALLOW, nd < BP ? fdiv(BP - nd, P) : 0, cdiv(nd, L), 0);
  }
  put(out, at, DENY, left, cdiv(debt, L), cdiv(debt + cP - BP, L));
}

function fixedWindow(L: number, P: number, exists: boolean, w0: number, last: number, c: number, t: number, out: Float64Array, at: number): void {
  const k = fdiv(t, P);
  let count = 0;
  if (exists && fdiv(last, P) === k) count = w0;
  const untilEnd = (k + 1) * P - t;
  const room = count < L ? L - count : 0;
  if (c > L) return put(out, at, NEVER, room, untilEnd, -1);
  if (c <= room) return put(out, at, ALLOW, room - c, untilEnd, 0);
  put(out, at, DENY, room, untilEnd, untilEnd);
}

function swRemaining(L: number, P: number, cur: number, weighted: number): number {
  const room = (L - cur) * P;
  return room > weighted ? fdiv(room - weighted, P) : 0;
}

function swReset(P: number, k: number, t: number, prev: number, cur: number): number {
  if (cur > 0) return (k + 2) * P - t;
  if (prev > 0) return (k + 1) * P - t;
  return 0;
}

function swRetry(P: number, L: number, e: number, prev: number, cur: number, c: number): number {
  const toEdge = P - e;
  if (c <= L - cur) return toEdge - fdiv((L - cur - c) * P, prev);
  const q = fdiv((L - c) * P, cur);
  if (q >= P) return toEdge;
  return toEdge + P - q;
}

function slidingWindow(L: number, P: number, exists: boolean, w0: number, w1: number, last: number, c: number, t: number, out: Float64Array, at: number): void {
  const k = fdiv(t, P);
  let prev = 0, cur = 0;
  if (exists) {
    const lk = fdiv(last, P);
    if (lk === k) {
      prev = w0;
      cur = w1;
    } else if (lk + 1 === k) prev = w1;
  }
  const e = t - k * P;
  const weighted = prev * (P - e);
  if (c > L) return put(out, at, NEVER, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), -1);
  const avail = L - cur;
  if (c <= avail && weighted <= (avail - c) * P) {
    return put(out, at, ALLOW, swRemaining(L, P, cur + c, weighted), swReset(P, k, t, prev, cur + c), 0);
  }
  put(out, at, DENY, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), swRetry(P, L, e, prev, cur, c));
}

/**
 * lua/calendar_window.lua (ALG[4]): w0 = the count, w1 = the end (Unix ms) of the window it belongs to; P =
 * the end of the window holding the caller's time, B = the end of the next one (src/engine/calendar-args.ts).
 * A stored count holds while t < w1; else the window is the caller's (t < P) or the next (t < B); a t past
 * both cannot be placed (UNREADABLE).
 */
function calendarWindow(L: number, P: number, B: number, exists: boolean, w0: number, w1: number, c: number, t: number, out: Float64Array, at: number): void {
  let count = 0, stop = P;
  if (exists && t < w1) {
    count = w0;
    stop = w1;
  } else if (t >= P) {
    if (t >= B) return put(out, at, UNREADABLE, 0, 0, 0);
    stop = B;
  }
  const untilEnd = stop - t;
  let room = L - count;
  if (room < 0) room = 0;
  if (c > L) return put(out, at, NEVER, room, untilEnd, -1);
  if (c <= room) return put(out, at, ALLOW, room - c, untilEnd, 0);
  put(out, at, DENY, room, untilEnd, untilEnd);
}

/**
 * One leg as lua/check.lua's evaluate() decides it at time `now` (Unix ms) from the state (w0, w1, last;
 * last < 0: no state), without changing anything: algorithm code 0 token bucket, 1 GCRA, 2 fixed window,
 * 3 sliding window, 4 calendar window; L tokens per P ms, burst B (a calendar window: P and B are the ends
 * of the caller's window and of the next one, as the script is passed them); cost c. Code 4 in `out`:
 * UNREADABLE (a calendar time past both ends). Code 5 (the sliding log) has no twin: callers never pass it.
 */
export function evaluateLeg(alg: number, L: number, P: number, B: number, w0: number, w1: number, last: number,
  c: number, now: number, out: Float64Array, at: number): void {
  if (L === 0 && alg <= 1) return c > 0 ? put(out, at, NEVER, 0, 0, -1) : put(out, at, ALLOW, 0, 0, 0);
  const exists = last >= 0;
  const t = exists && last > now ? last : now;
  if (alg === 0) tokenBucket(L, P, B, exists, w0, last, c, t, out, at);
  else if (alg === 1) gcra(L, P, B, exists, w0, w1, t, c, out, at);
  else if (alg === 2) fixedWindow(L, P, exists, w0, last, c, t, out, at);
  else if (alg === 4) calendarWindow(L, P, B, exists, w0, w1, c, t, out, at);
  else slidingWindow(L, P, exists, w0, w1, last, c, t, out, at);
}
