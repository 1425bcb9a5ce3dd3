/**
 * Reading lua/check.lua's reply: one string of little-endian doubles ({@link unpackReply}), 4 per leg (code, remaining, resetAfterMs, retryAfterMs), then the
 * time the script decided at, then (w0, w1, lastSeen) for each leg of each denied check, in leg order.
 */

/**
 * The numbers of lua/check.lua's packed reply (one bulk string of little-endian doubles: Redis sends one
 * string instead of an integer reply per number, and reading it here parses no text). Every figure is an
 * integer within ±2^53, exact in a double. Throws a {@link ReplyShapeError} (counted as a script error) on a
 * reply that is not a whole number of doubles.
 */
export function unpackReply(raw: unknown): number[] {
  if (!Buffer.isBuffer(raw) || raw.length % 8 !== 0) throw new ReplyShapeError(Buffer.isBuffer(raw) ? `${raw.length} bytes` : typeof raw);
  const n = raw.length / 8;
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = raw.readDoubleLE(i * 8);
  return out;
}

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
    let g = args[from + i * 6 + 5];
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
    let g = args[from + i * 6 + 5];
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
