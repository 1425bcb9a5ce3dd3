/**
 * Reading lua/check.lua's reply. The script packs a row per leg: 3 numbers (code, remaining, resetAfterMs; the
 * code + {@link RETRIED} when the leg's retryAfterMs is not 0), or 1 for a single-leg token-bucket check it
 * admitted at a cost above 0 without a delay ({@link admittedRow}); then the time it decided at, then the
 * retried legs' retryAfterMs in leg order, then (w0, w1, lastSeen) for each leg of each denied check, in leg
 * order. {@link unpackReply} gives it back as 4 per leg (code, remaining, resetAfterMs, retryAfterMs), the
 * time, then the states: the layout {@link widen}, {@link spentBy} and the MemoryStore share.
 */

/**
 * Added to a leg's code in the packed reply when its retryAfterMs (a denial's wait, an admission's delay, −1
 * for never) follows after the time: a leg whose retryAfterMs is 0 sends none (callgrind: bench/README.md).
 * Codes are below 8 (lua/lib.lua).
 */
export const RETRIED = 8;

/**
 * A row of one number below 0, ADMITTED: −1 − x, x the tokens·P left in the leg's bucket after the admission
 * (an integer from 0 to B·P ≤ 2^51). Its remaining is ⌊x / P⌋ and its resetAfterMs ⌈(B·P − x) / L⌉, as the
 * script computes them (lua/token_bucket.lua), from the leg's L, P and B that the caller sent: 2 numbers fewer
 * per admission for Redis to compute, pack and send (callgrind: bench/README.md). Codes are ≥ 0, so a row's
 * sign says which it is.
 */
export function admittedRow(x: number): number {
  return -1 - x;
}

/**
 * The numbers of lua/check.lua's packed reply for a call whose legs are `args` from `from` (6 numbers each:
 * algorithm, L, P, B, cost, group length; one bulk string of little-endian doubles: Redis sends one string
 * instead of an integer reply per number, and reading it here parses no text), as 4 per leg, the time, then
 * the denied legs' states. Every figure is an integer within ±2^53, exact in a double. Throws a
 * {@link ReplyShapeError} (counted as a script error) on a reply that is not a whole number of doubles, or
 * too short for its legs' rows, the time and the retries their codes announce.
 */
export function unpackReply(raw: unknown, args: ArrayLike<number>, from: number): number[] {
  if (!Buffer.isBuffer(raw) || raw.length % 8 !== 0) throw new ReplyShapeError(Buffer.isBuffer(raw) ? `${raw.length} bytes` : typeof raw);
  const n = (args.length - from) / 6;
  const count = raw.length / 8;
  const out = new Array<number>(count + 3 * n);
  // p: the next number to read; retried: whether some row announced a retry (read in a second pass)
  let p = 0;
  let retried = false;
  for (let j = 0; j < n; j++) {
    if (p >= count) throw new ReplyShapeError(`${count} numbers for ${n} legs`);
    const x = raw.readDoubleLE(p * 8);
    const o = j * 4;
    if (x < 0) {
      const left = -1 - x;
      const b = from + j * 6;
      const L = args[b + 1], P = args[b + 2], B = args[b + 3];
      out[o] = 0;
      // exact: for integers 0 ≤ a < 2^53 and b ≥ 1, a / b rounded to a double never crosses an integer (a
      // fraction of a / b is ≥ 1/b, more than half its ulp), and here a ≤ B·P ≤ 2^51 (the loader's bound)
      out[o + 1] = Math.floor(left / P);
      out[o + 2] = Math.ceil((B * P - left) / L);
      out[o + 3] = 0;
      p += 1;
      continue;
    }
    if (p + 3 > count) throw new ReplyShapeError(`${count} numbers for ${n} legs`);
    out[o + 1] = raw.readDoubleLE(p * 8 + 8);
    out[o + 2] = raw.readDoubleLE(p * 8 + 16);
    if (x >= RETRIED) {
      out[o] = x - RETRIED;
      // NaN until the second pass: no retryAfterMs is NaN
      out[o + 3] = NaN;
      retried = true;
    } else {
      out[o] = x;
      out[o + 3] = 0;
    }
    p += 3;
  }
  if (p >= count) throw new ReplyShapeError(`${count} numbers for ${n} legs`);
  out[n * 4] = raw.readDoubleLE(p * 8);
  p++;
  if (retried) {
    for (let j = 0; j < n; j++) {
      if (!Number.isNaN(out[j * 4 + 3])) continue;
      if (p >= count) throw new ReplyShapeError(`no retryAfterMs for leg ${j}`);
      out[j * 4 + 3] = raw.readDoubleLE(p * 8);
      p++;
    }
  }
  // the states, after the retries
  let o = n * 4 + 1;
  for (; p < count; p++) out[o++] = raw.readDoubleLE(p * 8);
  out.length = o;
  return out;
}

/** The script's 6th leg number: group length + maxDelayMs · SCRIPT_GROUP (lua/check.lua). */
const SCRIPT_GROUP = 65536;

/** Numbers per leg of a widened reply: code, remaining, resetAfterMs, retryAfterMs, t, w0, w1, lastSeen. */
export const LEG_WIDE = 8;

/** The script's codes (lua/lib.lua). */
const ALLOW = 0;
const UNREADABLE = 4;

/**
 * The reply of one script call for the legs of `args` (its ARGV: 6 numbers per leg from `from`, the group
 * length 6th) as {@link LEG_WIDE} numbers per leg: the 4 outputs, the Redis time of the call (Unix ms), and
 * for each leg of a denied check the state it was decided on (else NaN, NaN, NaN). A check is denied when
 * some leg's code is not ALLOW; a check with an UNREADABLE leg (all its legs are) carries no state.
 */
export function widen(raw: readonly number[], args: readonly number[], from: number): number[] {
  const n = (args.length - from) / 6;
  const out = new Array<number>(n * LEG_WIDE);
  const t = raw[n * 4];
  let m = n * 4 + 1;
  let i = 0;
  while (i < n) {
    let g = args[from + i * 6 + 5] % SCRIPT_GROUP; // maxDelayMs rides above it (onLimit: delay)
    if (!(g >= 1)) g = 1;
    if (i + g > n) g = n - i;
    let denied = false;
    for (let j = i; j < i + g; j++) if (raw[j * 4] !== ALLOW) denied = true;
    if (raw[i * 4] === UNREADABLE) denied = false;
    for (let j = i; j < i + g; j++) {
      const o = j * LEG_WIDE;
      out[o] = raw[j * 4];
      out[o + 1] = raw[j * 4 + 1];
      out[o + 2] = raw[j * 4 + 2];
      out[o + 3] = raw[j * 4 + 3];
      out[o + 4] = t;
      if (denied) {
        out[o + 5] = raw[m];
        out[o + 6] = raw[m + 1];
        out[o + 7] = raw[m + 2];
        m += 3;
      } else {
        out[o + 5] = out[o + 6] = out[o + 7] = NaN;
      }
    }
    i += g;
  }
  return out;
}

/**
 * Tokens the checks of one script call spent: the cost of each check (a group of legs, its length on its
 * first leg) whose every leg was admitted. `args` is the call's ARGV (6 numbers per leg from `from`: algorithm,
 * L, P, B, cost, group length); `raw` its reply.
 */
export function spentBy(raw: readonly number[], args: readonly number[], from: number): number {
  const n = (args.length - from) / 6;
  let spent = 0;
  let i = 0;
  while (i < n) {
    let g = args[from + i * 6 + 5] % SCRIPT_GROUP; // maxDelayMs rides above it (onLimit: delay)
    if (!(g >= 1)) g = 1;
    if (i + g > n) g = n - i;
    let all = true;
    for (let j = i; j < i + g; j++) if (raw[j * 4] !== ALLOW) all = false;
    if (all) spent += args[from + i * 6 + 4];
    i += g;
  }
  return spent;
}

/** A check script reply that is not packed doubles (a script of another version answering): a script error. */
export class ReplyShapeError extends Error {
  override name = 'ReplyError';
  constructor(what: string) {
    super(`the check script's reply is not packed doubles (${what})`);
  }
}
