// Which keys to forget: how long a slot's state still carries information, the sampled eviction that frees a
// slot (or a sliding-log block) when the table is full, and a slot's removal.
import { Slot, TIME_MASK, TOKEN_BUCKET, GCRA, FIXED_WINDOW, CALENDAR_WINDOW, SLIDING_LOG } from './layout';
import { slotAt, hashAt, removeAt, mask } from './table';
import { limitAt } from './limits';
import { logFree } from './log-arena';
import { ceilDiv } from './math';
import { tokenBucketIdle } from './algorithms/token-bucket';
import { gcraIdle } from './algorithms/gcra';
import { fixedWindowIdle } from './algorithms/fixed-window';
import { slidingWindowIdle } from './algorithms/sliding-window';
import { calendarWindowIdle } from './algorithms/calendar-window';
import { slidingLogIdle } from './algorithms/sliding-log';

/** Keys evicted since init. */
export let evicted: u64 = 0;
/** xorshift32 state: draws where each eviction's sample starts. */
let sampleAt: u32 = 0x9e3779b9;
/** Occupied slots examined per eviction (sampled LRU, as Redis's maxmemory-samples). */
const EVICTION_SAMPLE: u32 = 32;

/** Removes the slot at `i`, freeing its log block if it holds a sliding log. */
export function removeSlot(i: u32): void {
  const s = slotAt(i);
  if (limitAt(<u32>(s.meta >> 48)).algorithm == SLIDING_LOG) logFree(<u32>s.w0);
  removeAt(i);
}

/** True when the slot's state carries no information at `now` (full bucket, ended window). */
export function idle(s: Slot, now: u64): bool {
  const lim = limitAt(<u32>(s.meta >> 48));
  const last = s.meta & TIME_MASK;
  const alg = lim.algorithm;
  if (lim.L == 0) return true;
  if (alg == TOKEN_BUCKET) return tokenBucketIdle(lim, s.w0, last, now);
  if (alg == GCRA) return gcraIdle(lim, s.w0, s.w1, last, now);
  if (alg == FIXED_WINDOW) return fixedWindowIdle(lim, last, now);
  if (alg == CALENDAR_WINDOW) return calendarWindowIdle(s.w1, now);
  if (alg == SLIDING_LOG) return slidingLogIdle(lim, last, now);
  return slidingWindowIdle(lim, last, now);
}

/**
 * The time (Unix ms) from which the slot's state carries no information: its bucket full, its TAT passed,
 * its window (both windows, sliding) over. The later it is, the more the state says about the key.
 */
function idleAt(s: Slot): u64 {
  const lim = limitAt(<u32>(s.meta >> 48));
  const last = s.meta & TIME_MASK;
  if (lim.L == 0) return 0;
  const alg = lim.algorithm;
  if (alg == TOKEN_BUCKET) {
    const x = s.w0; // signed: a sync-mode debt is negative, and BP − x stays exact
    if (<i64>x >= <i64>lim.BP) return last;
    return last + ceilDiv(lim.BP - x, lim.L);
  }
  if (alg == GCRA) {
    const at = s.w0 + (s.w1 > 0 ? 1 : 0);
    return at > last ? at : last;
  }
  if (alg == FIXED_WINDOW) return (last / lim.P + 1) * lim.P;
  if (alg == CALENDAR_WINDOW) return s.w1; // the end of the key's calendar window
  if (alg == SLIDING_LOG) return last + lim.P;
  return (last / lim.P + 2) * lim.P;
}

/**
 * Frees one slot: among up to EVICTION_SAMPLE occupied slots from a randomly drawn occupied slot, the first
 * whose state carries no information, else the one whose state stops carrying information soonest
 * ({@link idleAt}: the bucket closest to full, the window nearest its end), the least recently changed on a
 * tie. So the key that says least is forgotten: an over-limit key (a bucket far from full, a window at its
 * limit) outlives every key of the sample that is closer to full, and a flood of fresh keys, each one check
 * old, evicts its own kind first. O(EVICTION_SAMPLE) per eviction. `logOnly`: a sliding-log block is needed,
 * so only a sliding-log key is taken (one exists: every block is in use).
 *
 * The start is drawn uniformly among the keys (xorshift32, redrawn on an empty slot), so evictions fall on
 * keys the way inserts do and the table keeps the cluster lengths of a freshly filled one (max ~190 slots at
 * 100,000 keys, after 3 M evictions). Choosing by position instead skews evictions toward the heads of
 * clusters, and long clusters only grow: a hand rotating past the last victim built one Robin Hood cluster
 * of 46,000 slots under a flood of new keys, and a start drawn among slots (empty or not) clusters of
 * 5,000, making inserts, lookups and removals there walk them (up to 50x slower decisions).
 */
export function evictOne(now: u64, logOnly: bool): void {
  let i: u32;
  do {
    sampleAt ^= sampleAt << 13;
    sampleAt ^= sampleAt >> 17;
    sampleAt ^= sampleAt << 5;
    i = sampleAt & mask;
  } while (hashAt(i) == 0); // count >= maxKeys >= 1 here: some slot is occupied
  let seen: u32 = 0;
  let victim: i32 = -1;
  let soonest: u64 = U64.MAX_VALUE;
  let oldest: u64 = U64.MAX_VALUE;
  for (let step: u32 = 0; step <= mask && seen < EVICTION_SAMPLE; step++) {
    const s = slotAt(i);
    // logOnly: a log block is needed, so only a sliding-log key's eviction helps (one exists: all blocks are in use)
    if (hashAt(i) != 0 && (!logOnly || limitAt(<u32>(s.meta >> 48)).algorithm == SLIDING_LOG)) {
      seen++;
      const at = idleAt(s);
      if (at <= now) { victim = <i32>i; break; }
      const last = s.meta & TIME_MASK;
      if (at < soonest || (at == soonest && last < oldest)) { soonest = at; oldest = last; victim = <i32>i; }
    }
    i = (i + 1) & mask;
  }
  if (victim < 0) return;
  removeSlot(<u32>victim);
  evicted++;
}
