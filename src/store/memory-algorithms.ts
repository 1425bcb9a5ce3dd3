/**
 * The store's algorithms with their new states, line for line as lua/token_bucket.lua ... lua/sliding_log.lua
 * (joined after lua/lib.lua) compute them, for the in-memory store (src/store/memory.ts). Both run on
 * doubles, so for the same state, limit, cost and time they give the same outputs and states; a test decides
 * the same sequences on both and compares every number (test/unit/store/memory.test.ts).
 *
 * Each returns [code, remaining, resetAfterMs, retryAfterMs, new w0, new w1]; a sliding log's w0 is its
 * entries (ts1, count1, ts2, count2, ... oldest first), as in the driver.
 */

export const ALLOW = 0, DENY = 1, NEVER = 2, UNREADABLE = 4;

/** A state's w0: a number, or a sliding log's entries. */
export type W0 = number | number[];
export type Outcome = [code: number, remaining: number, reset: number, retry: number, w0: W0, w1: number];

export function fdiv(a: number, b: number): number {
  const r = a % b;
  let q = (a - r) / b;
  // Lua's % has the sign of the divisor, JS's of the dividend: (a − r) / b is exact either way, then fixed up
  if (r < 0 && b > 0) q -= 1;
  else if (r >= b) q += 1;
  return q;
}

export function cdiv(a: number, b: number): number {
  let q = fdiv(a, b);
  if (q * b < a) q += 1;
  return q;
}

function tokenBucket(L: number, P: number, B: number, exists: boolean, w0: number, w1: number, last: number, c: number, t: number, D: number): Outcome {
  const BP = B * P;
  let x = BP;
  if (exists) {
    const elapsed = t - last;
    // from a debt (w0 < 0, onLimit: delay) the bucket takes longer to fill
    if (elapsed >= cdiv(BP - w0, L)) x = BP;
    else {
      x = w0 + elapsed * L;
      if (x > BP) x = BP;
    }
  }
  const whole = x > 0 ? fdiv(x, P) : 0;
  if (c > B) return [NEVER, whole, cdiv(BP - x, L), -1, w0, w1];
  const cP = c * P;
  if (c === 0 || cP <= x) {
    const after = x - cP;
    if (after < 0) return [ALLOW, 0, cdiv(BP - after, L), 0, after, 0]; // a peek in debt
    return [ALLOW, fdiv(after, P), cdiv(BP - after, L), 0, after, 0];
  }
  let wait = cdiv(cP - x, L);
  if (wait <= D) {
    // onLimit: delay: admitted now in debt, its wait in the retryAfterMs place
    const after = x - cP;
    return [ALLOW, 0, cdiv(BP - after, L), wait, after, 0];
  }
  if (D > 0) wait -= D;
  return [DENY, whole, cdiv(BP - x, L), wait, w0, w1];
}

function gcra(L: number, P: number, B: number, exists: boolean, w0: number, w1: number, c: number, t: number, D: number): Outcome {
  const BP = B * P;
  let debt = 0;
  if (exists && w0 >= t) debt = (w0 - t) * L + w1;
  const left = debt < BP ? fdiv(BP - debt, P) : 0;
  if (c > B) return [NEVER, left, cdiv(debt, L), -1, w0, w1];
  const cP = c * P;
  if (c === 0 || debt + cP <= BP) {
    const nd = debt + cP;
    const whole = fdiv(nd, L);
    // a peek past B·P of debt (onLimit: delay) has nothing left
    return [ALLOW, nd < BP ? fdiv(BP - nd, P) : 0, cdiv(nd, L), 0, t + whole, nd - whole * L];
  }
  let wait = cdiv(debt + cP - BP, L);
  if (wait <= D) {
    const nd = debt + cP;
    const whole = fdiv(nd, L);
    return [ALLOW, 0, cdiv(nd, L), wait, t + whole, nd - whole * L];
  }
  if (D > 0) wait -= D;
  return [DENY, left, cdiv(debt, L), wait, w0, w1];
}

/** lib.lua fwRoll: t's window k and its count. */
export function fwRoll(P: number, exists: boolean, w0: number, last: number, t: number): [k: number, count: number] {
  const k = fdiv(t, P);
  if (exists && fdiv(last, P) === k) return [k, w0];
  return [k, 0];
}

/** lib.lua swRoll: t's window k, the previous window's count and the current one's. */
export function swRoll(P: number, exists: boolean, w0: number, w1: number, last: number, t: number): [k: number, prev: number, cur: number] {
  const k = fdiv(t, P);
  let prev = 0, cur = 0;
  if (exists) {
    const lk = fdiv(last, P);
    if (lk === k) {
      prev = w0;
      cur = w1;
    } else if (lk + 1 === k) prev = w1;
  }
  return [k, prev, cur];
}

function fixedWindow(L: number, P: number, exists: boolean, w0: number, w1: number, last: number, c: number, t: number): Outcome {
  const [k, count] = fwRoll(P, exists, w0, last, t);
  const untilEnd = (k + 1) * P - t;
  // a count merged from several instances (sync mode) may pass L: nothing is left, not less than nothing
  const room = L - count < 0 ? 0 : L - count;
  if (c > L) return [NEVER, room, untilEnd, -1, w0, w1];
  if (c <= room) return [ALLOW, room - c, untilEnd, 0, count + c, 0];
  return [DENY, room, untilEnd, untilEnd, w0, w1];
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

function slidingWindow(L: number, P: number, exists: boolean, w0: number, w1: number, last: number, c: number, t: number): Outcome {
  const [k, prev, cur] = swRoll(P, exists, w0, w1, last, t);
  const e = t - k * P;
  const weighted = prev * (P - e);
  if (c > L) return [NEVER, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), -1, w0, w1];
  const avail = L - cur;
  if (c <= avail && weighted <= (avail - c) * P) {
    return [ALLOW, swRemaining(L, P, cur + c, weighted), swReset(P, k, t, prev, cur + c), 0, prev, cur + c];
  }
  return [DENY, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), swRetry(P, L, e, prev, cur, c), w0, w1];
}

/** lua/calendar_window.lua: P and B carry the ends of the caller's window and the next one. */
function calendarWindow(L: number, P: number, B: number, exists: boolean, w0: number, w1: number, c: number, t: number): Outcome {
  let count = 0, stop = P;
  if (exists && t < w1) {
    count = w0;
    stop = w1;
  } else if (t >= P) {
    if (t >= B) return [UNREADABLE, 0, 0, 0, w0, w1];
    stop = B;
  }
  const untilEnd = stop - t;
  let room = L - count;
  if (room < 0) room = 0;
  if (c > L) return [NEVER, room, untilEnd, -1, w0, w1];
  if (c <= room) return [ALLOW, room - c, untilEnd, 0, count + c, stop];
  return [DENY, room, untilEnd, untilEnd, w0, w1];
}

/** lua/sliding_log.lua: w0 is the log's entries. */
function slidingLog(L: number, P: number, exists: boolean, w0: W0, w1: number, c: number, t: number): Outcome {
  const e = exists ? (w0 as number[]) : [];
  let sum = 0, newest = 0, first = -1;
  for (let k = 0; k < e.length; k += 2) {
    if (e[k] + P > t) {
      if (first < 0) first = k;
      sum += e[k + 1];
      newest = e[k];
    }
  }
  let room = L - sum;
  if (room < 0) room = 0;
  let reset = 0;
  if (first >= 0) reset = newest + P - t;
  if (c > L) return [NEVER, room, reset, -1, w0, w1];
  if (c <= room) {
    if (c === 0) return [ALLOW, room, reset, 0, w0, w1];
    const out: number[] = first >= 0 ? e.slice(first) : [];
    if (out.length > 0 && out[out.length - 2] === t) out[out.length - 1] += c;
    else out.push(t, c);
    return [ALLOW, room - c, P, 0, out, 0];
  }
  let stay = sum;
  for (let k = first; k < e.length; k += 2) {
    stay -= e[k + 1];
    if (stay + c <= L) return [DENY, room, reset, e[k] + P - t, w0, w1];
  }
  return [UNREADABLE, 0, 0, 0, w0, w1]; // unreachable: an empty log admits any c ≤ L
}

/** One leg by its algorithm code (0 token bucket, 1 GCRA, 2 fixed window, 3 sliding window, 4 calendar, 5 log). */
export function evaluate(alg: number, L: number, P: number, B: number, exists: boolean, w0: W0, w1: number, last: number, c: number, t: number, D = 0): Outcome {
  switch (alg) {
    case 0: return tokenBucket(L, P, B, exists, w0 as number, w1, last, c, t, D);
    case 1: return gcra(L, P, B, exists, w0 as number, w1, c, t, D);
    case 2: return fixedWindow(L, P, exists, w0 as number, w1, last, c, t);
    case 3: return slidingWindow(L, P, exists, w0 as number, w1, last, c, t);
    case 4: return calendarWindow(L, P, B, exists, w0 as number, w1, c, t);
    default: return slidingLog(L, P, exists, w0, w1, c, t);
  }
}

/**
 * lua/sync.lua merge(): the state after adding `d` consumed tokens to a key's shared state, and the PX of its
 * write. Returns [w0, w1, ttl].
 */
export function mergeState(alg: number, L: number, P: number, B: number, d: number, exists: boolean, w0: number, w1: number, last: number, t: number): [number, number, number] {
  if (alg === 0) {
    const BP = B * P;
    let x = BP;
    if (exists) {
      const need = BP - w0;
      if (t - last >= cdiv(need, L)) x = BP;
      else {
        x = w0 + (t - last) * L;
        if (x > BP) x = BP;
      }
    }
    x -= d * P;
    return [x, 0, cdiv(BP - x, L)];
  }
  if (alg === 1) {
    let debt = 0;
    if (exists && w0 >= t) debt = (w0 - t) * L + w1;
    const nd = debt + d * P;
    const whole = fdiv(nd, L);
    return [t + whole, nd - whole * L, cdiv(nd, L)];
  }
  if (alg === 2) {
    const [k, count] = fwRoll(P, exists, w0, last, t);
    return [count + d, 0, (k + 1) * P - t];
  }
  const [k, prev, c0] = swRoll(P, exists, w0, w1, last, t);
  const cur = c0 + d;
  if (cur > 0) return [prev, cur, (k + 2) * P - t];
  return [prev, cur, (k + 1) * P - t];
}
