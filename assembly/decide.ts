// Deciding legs: a key's state read under its leg's limit (a carry-over bucket taking over the old one's
// consumption), the leg evaluated by its algorithm, its new state committed (inserting, and evicting when
// full), and a group's legs all admitted or none changed.
import {
  Slot, Limit, TIME_MASK, TOKEN_BUCKET, GCRA, FIXED_WINDOW, SLIDING_WINDOW, CALENDAR_WINDOW, SLIDING_LOG,
  LEG_IN_STRIDE, LEG_OUT_STRIDE, IN_COST, OUT_CODE, CODE_ALLOW, MAX_GROUP, LIMIT_ID_MASK, GROUP_BITS, GROUP_MASK, DELAY_BITS,
} from './layout';
import { find, insert, slotAt, count, maxKeys } from './table';
import { ahead, prefetchStart, slotOf } from './prefetch';
import * as R from './result';
import { ceilDiv } from './math';
import { limitAt, limitIsSet, CARRY } from './limits';
import { legIn, legOut, legWord, legHash, writeOut, badLeg } from './io';
import { evictOne } from './eviction';
import { logAlloc, logFree } from './log-arena';
import { tokenBucket, refill } from './algorithms/token-bucket';
import { gcra } from './algorithms/gcra';
import { fixedWindow } from './algorithms/fixed-window';
import { slidingWindow } from './algorithms/sliding-window';
import { calendarWindow } from './algorithms/calendar-window';
import { slidingLog, slidingLogCommit } from './algorithms/sliding-log';

/** Per leg of a group: [w0, w1, time, write] while the group is undecided. */
let scratch: usize = 0;

/** Bytes of the group scratch region. */
export const SCRATCH_BYTES: usize = <usize>MAX_GROUP * 32;

/** Takes the group scratch region at `at` ({@link SCRATCH_BYTES} bytes). */
export function decideInit(at: usize): void {
  scratch = at;
}

// A key's stored state, as stateOf read it for the leg being evaluated.
let stExists: bool = false;
let stW0: u64 = 0;
let stW1: u64 = 0;
let stLast: u64 = 0;

/**
 * Reads the state at slot `idx` (none when idx < 0) for limit `limitId` into st*. A slot written under
 * another limit id holds state made under other numbers (the policy changed on a reload): it reads as a fresh
 * key, except that a carry-over token bucket takes over the old bucket's consumed amount, rounded up to whole
 * tokens and capped by the new burst, at time max(now, last), on the key's first check under the new limit.
 */
function stateOf(lim: Limit, limitId: u32, idx: i32, now: u64): void {
  stExists = false;
  if (idx < 0) return;
  const s = slotAt(<u32>idx);
  const slotLimit = <u32>(s.meta >> 48);
  stW0 = s.w0; stW1 = s.w1; stLast = s.meta & TIME_MASK;
  if (slotLimit == limitId) { stExists = true; return; }
  if (lim.used != CARRY) return;
  const old = limitAt(slotLimit);
  if (old.algorithm != TOKEN_BUCKET || old.used == 0 || old.L == 0) return;
  const t = stLast > now ? stLast : now;
  const x = refill(old, stW0, stLast, t);
  let consumed = ceilDiv(old.BP - x, old.P); // whole tokens; BP − x is exact for x in debt too
  if (consumed > lim.B) consumed = lim.B;
  stW0 = lim.BP - consumed * lim.P;
  stW1 = 0;
  stLast = t;
  stExists = true;
  // The conversion is stored at once, whatever this check's outcome: from here the bucket refills at the new
  // rate. Converting again on every denied check would refill at the old rate behind the new cap.
  s.w0 = stW0;
  s.w1 = 0;
  s.meta = (<u64>limitId << 48) | t;
}

/**
 * Evaluates one leg of limit `limitId` into R.*: from the slot at `idx` (or a fresh key when idx < 0).
 * maxDelay: the ms a token bucket or GCRA leg may wait to be admitted (onLimit: delay; 0 for none). The
 * loader refuses onLimit: delay on the window algorithms, which ignore it.
 */
function evaluate(lim: Limit, limitId: u32, idx: i32, c: u64, now: u64, maxDelay: u64): void {
  const alg = lim.algorithm;
  if (lim.L == 0 && alg <= GCRA) {
    // a bucket that never refills: limit 0 denies everything that costs anything, for good
    if (c > 0) R.never(0, 0); else R.allow(0, 0, 0, 0, 0);
    lastT = now;
    return;
  }
  stateOf(lim, limitId, idx, now);
  const exists = stExists;
  const w0 = stW0, w1 = stW1, last = stLast;
  // time never runs backwards for a key
  const t = exists && last > now ? last : now;
  if (alg == TOKEN_BUCKET) tokenBucket(lim, exists, w0, last, c, t, maxDelay);
  else if (alg == GCRA) gcra(lim, exists, w0, w1, c, t, maxDelay);
  else if (alg == FIXED_WINDOW) fixedWindow(lim, exists, w0, last, c, t);
  else if (alg == SLIDING_WINDOW) slidingWindow(lim, exists, w0, w1, last, c, t);
  else if (alg == CALENDAR_WINDOW) calendarWindow(lim, exists, w0, w1, c, t);
  else slidingLog(lim, exists, w0, w1, c, t);
  lastT = t;
}
/** The time the last evaluated leg's state is dated: max(now, the key's last change). */
let lastT: u64 = 0;

/**
 * Stores a leg's new state (limit `limitId`, at time `t`) for hash `h` found at `idx` (−1: absent), inserting
 * (and evicting, when full) if the key is new.
 */
export function commit(h: u64, idx: i32, limitId: u32, w0: u64, w1: u64, t: u64, now: u64): void {
  if (limitAt(limitId).algorithm == SLIDING_LOG) { commitLog(h, idx, limitId, w0, t, now); return; }
  const s = slotAt(claim(h, idx, limitId, now));
  s.w0 = w0;
  s.w1 = w1;
  s.meta = (<u64>limitId << 48) | t;
}

/**
 * The slot of `h` (at `idx`, or inserted when idx < 0, evicting when full) made ready for state under
 * `limitId`: a sliding log it held under another limit id gives its block back.
 */
function claim(h: u64, idx: i32, limitId: u32, now: u64): u32 {
  if (idx < 0) {
    if (count >= maxKeys) evictOne(now, false);
    return insert(h);
  }
  release(slotAt(<u32>idx), limitId);
  return <u32>idx;
}

/** Frees the log block of a slot about to hold state under `limitId` (a sliding log under another id). */
function release(s: Slot, limitId: u32): void {
  const old = <u32>(s.meta >> 48);
  if (old != limitId && limitAt(old).algorithm == SLIDING_LOG) logFree(<u32>s.w0);
}

/**
 * Appends cost c at t to the key's sliding log, giving the key a block first if it has none under this
 * limit (evicting a sliding-log key when every block is in use; the key's slot is looked up again after,
 * since evictions shift slots).
 */
function commitLog(h: u64, idx: i32, limitId: u32, c: u64, t: u64, now: u64): void {
  const lim = limitAt(limitId);
  if (idx >= 0 && <u32>(slotAt(<u32>idx).meta >> 48) == limitId) {
    const s = slotAt(<u32>idx);
    s.w1 = slidingLogCommit(lim, <u32>s.w0, s.w1, c, t);
    s.meta = (<u64>limitId << 48) | t;
    return;
  }
  let b = logAlloc();
  if (b < 0) {
    evictOne(now, true);
    b = logAlloc();
  }
  const s = slotAt(claim(h, find(h), limitId, now));
  s.w0 = <u64>b;
  s.w1 = slidingLogCommit(lim, <u32>b, 0, c, t);
  s.meta = (<u64>limitId << 48) | t;
}

function single(leg: u32, now: u64): void {
  const p = legIn + <usize>leg * LEG_IN_STRIDE;
  const word = legWord(leg);
  const limitId = <u32>word & LIMIT_ID_MASK;
  if (!limitIsSet(limitId)) { badLeg(leg); return; }
  const lim = limitAt(limitId);
  const h = legHash(leg);
  const c = <u64>load<f64>(p, IN_COST);
  const idx = slotOf(leg, h);
  evaluate(lim, limitId, idx, c, now, word >> DELAY_BITS);
  writeOut(leg);
  if (R.write) commit(h, idx, limitId, R.nw0, R.nw1, lastT, now);
}

/** All legs of a group admit, then all commit; if any denies, none changes. */
function group(first: u32, n: u32, now: u64): void {
  let all = true;
  for (let j: u32 = 0; j < n; j++) {
    const leg = first + j;
    const p = legIn + <usize>leg * LEG_IN_STRIDE;
    const word = legWord(leg);
    const limitId = <u32>word & LIMIT_ID_MASK;
    const sc = scratch + <usize>j * 32;
    if (!limitIsSet(limitId)) { badLeg(leg); store<u64>(sc, 0, 24); all = false; continue; }
    evaluate(limitAt(limitId), limitId, slotOf(leg, legHash(leg)), <u64>load<f64>(p, IN_COST), now, word >> DELAY_BITS);
    writeOut(leg);
    store<u64>(sc, R.nw0);
    store<u64>(sc, R.nw1, 8);
    store<u64>(sc, lastT, 16);
    store<u64>(sc, R.write ? 1 : 0, 24);
    if (R.code != CODE_ALLOW) all = false;
  }
  for (let j: u32 = 0; j < n; j++) {
    const leg = first + j;
    const limitId = <u32>legWord(leg) & LIMIT_ID_MASK;
    const sc = scratch + <usize>j * 32;
    const h = legHash(leg);
    if (all) {
      // look up again: an earlier leg's insert may have moved slots
      if (load<u64>(sc, 24) != 0) commit(h, find(h), limitId, load<u64>(sc), load<u64>(sc, 8), load<u64>(sc, 16), now);
    } else if (load<f64>(legOut + <usize>leg * LEG_OUT_STRIDE, OUT_CODE) == CODE_ALLOW) {
      // this leg alone would admit, but the check is denied: report its state untouched
      evaluate(limitAt(limitId), limitId, find(h), 0, now, 0);
      writeOut(leg);
    }
  }
}

/**
 * Decides legs [0, n) of the input region at `now` (Unix ms), in order, writing one output row per leg: a
 * group's first leg carries its length, and its legs are decided together ({@link group}).
 */
export function decideLegs(n: u32, now: u64): void {
  prefetchStart(n);
  let i: u32 = 0;
  while (i < n) {
    ahead(i, n);
    let g = <u32>(legWord(i) >> GROUP_BITS) & GROUP_MASK;
    if (g <= 1) {
      single(i, now);
      i++;
    } else {
      if (g > MAX_GROUP) g = MAX_GROUP;
      if (g > n - i) g = n - i;
      group(i, g, now);
      i += g;
    }
  }
}
