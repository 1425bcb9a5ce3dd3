// The limits region: one Limit record (assembly/layout.ts) per limit id, allocated by init, set by setLimit,
// and for a calendar limit the end of its current window, set by setWindow.
import { Limit, LIMIT_SIZE, TOKEN_BUCKET, GCRA, CALENDAR_WINDOW, SLIDING_LOG, OK, BAD_LIMIT } from './layout';
import { logBlocks, logEntries } from './log-arena';

let limits: usize = 0;
/** Limit ids the region has room for. */
export let limitCount: u32 = 0;

/** Limit.used: 0 = no limit with this id; USED; CARRY = used, and a token bucket that carries state over. */
const USED: u32 = 1;
export const CARRY: u32 = 2;

/** Bytes of a region of `maxLimits` limits. */
export function limitsBytes(maxLimits: u32): u64 {
  return <u64>maxLimits * LIMIT_SIZE;
}

/** Takes the region of `maxLimits` limits at `at` ({@link limitsBytes} bytes), every id unset. */
export function limitsInit(at: usize, maxLimits: u32): void {
  limits = at;
  memory.fill(limits, 0, <usize>limitsBytes(maxLimits));
  limitCount = maxLimits;
}

@inline export function limitAt(id: u32): Limit {
  return changetype<Limit>(limits + <usize>id * LIMIT_SIZE);
}

/** True when `id` names a limit setLimit has set. */
@inline export function limitIsSet(id: u32): bool {
  return id < limitCount && limitAt(id).used != 0;
}

/**
 * Sets limit `id`: algorithm code (0 token_bucket, 1 gcra, 2 fixed_window, 3 sliding_window, 4 calendar_window), limit L
 * (tokens per period), period P (ms), burst B (tokens), carry (1: a token bucket that takes over the consumed
 * amount of a key's state under another limit id, see `stateOf` in assembly/decide.ts). The loader has checked
 * B·P and L·P < 2^63. An id keeps its meaning while any slot refers to it: a reload adds ids, and one is set
 * again with other numbers only after purgeLimit removed every key under it, so a slot's id always names the
 * numbers its state was made under. Returns 0, or 1 for a bad id or algorithm.
 */
export function setLimit(id: u32, algorithm: u32, limit: f64, period: f64, burst: f64, carry: u32): u32 {
  if (id >= limitCount || algorithm > SLIDING_LOG || period < 1) return BAD_LIMIT;
  // a sliding log holds up to min(L, P) entries per key: they must fit in a block
  if (algorithm == SLIDING_LOG && (logBlocks == 0 || (limit < period ? limit : period) > <f64>logEntries)) return BAD_LIMIT;
  const lim = limitAt(id);
  lim.algorithm = algorithm;
  lim.used = carry != 0 && algorithm == TOKEN_BUCKET ? CARRY : USED;
  lim.L = <u64>limit;
  lim.P = <u64>period;
  lim.B = algorithm <= GCRA ? <u64>burst : <u64>limit;
  lim.BP = lim.B * lim.P;
  lim.LP = lim.L * lim.P;
  lim.fullAfter = lim.L > 0 ? (lim.BP + lim.L - 1) / lim.L : 0;
  lim.winEnd = 0;
  return OK;
}

/**
 * Sets the end (Unix ms) of calendar limit `id`'s current window: JS calls it before a batch whose time is
 * not below the end it set last (src/shard/kernel.ts). Returns OK, or BAD_LIMIT for an id that is not a
 * calendar limit.
 */
export function setWindow(id: u32, endMs: f64): u32 {
  if (!limitIsSet(id) || limitAt(id).algorithm != CALENDAR_WINDOW) return BAD_LIMIT;
  limitAt(id).winEnd = <u64>endMs;
  return OK;
}
