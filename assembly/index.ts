// The kernel's only exports: numbers in, numbers out. JS writes a batch into the input region, calls
// checkBatch(n, now) once, and reads the output region. No clock, no I/O, no allocation after init().
import {
  Slot, Limit, LIMIT_SIZE, TIME_MASK, TOKEN_BUCKET, GCRA, FIXED_WINDOW, SLIDING_WINDOW, CALENDAR_WINDOW, SLIDING_LOG,
  LEG_IN_STRIDE, LEG_OUT_STRIDE, HASH_IN_STRIDE, HASH_OUT_STRIDE, CODE_ALLOW, CODE_NEVER, CODE_BAD_LIMIT, MAX_GROUP,
  IN_HASH_LO, IN_HASH_HI, IN_LIMIT, IN_COST, LIMIT_ID_MASK, GROUP_BITS,
  OUT_CODE, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER, PEEK_FOUND, PEEK_W0, PEEK_W1, PEEK_LAST_SEEN, STATE_STRIDE, STATE_W0, STATE_W1, STATE_LAST_SEEN,
  HASH_IN_LENGTH, HASH_IN_SEED_LO, HASH_IN_SEED_HI, HASH_OUT_HI,
  OK, INIT_AGAIN, INIT_NO_ROOM, BAD_LIMIT, TOO_MANY, REMOVE_TOO_MANY,
} from './layout';
import { tableInit, tableBytes as tableSize, find, insert, removeAt, slotAt, hashAt, touchHome, count, mask, maxKeys } from './table';
import { xxh64 } from './hash';
import { ahead, prefetchBytes, prefetchInit, prefetchStart, slotOf } from './prefetch';
import * as R from './result';
import { tokenBucket, tokenBucketIdle, refill } from './algorithms/token-bucket';
import { ceilDiv } from './math';
import { gcra, gcraIdle } from './algorithms/gcra';
import { fixedWindow, fixedWindowIdle } from './algorithms/fixed-window';
import { slidingWindow, slidingWindowIdle } from './algorithms/sliding-window';
import { calendarWindow, calendarWindowIdle } from './algorithms/calendar-window';
import { slidingLog, slidingLogCommit, slidingLogIdle } from './algorithms/sliding-log';
import { ENTRY_SIZE, logAlloc, logBlocks, logEntries, logFree, logInit, logUsed } from './log-arena';

let limits: usize = 0;
let limitCount: u32 = 0;
let legIn: usize = 0;
let legOut: usize = 0;
let hashIn: usize = 0;
let hashOut: usize = 0;
let keys: usize = 0;
let scratch: usize = 0; // per leg of a group: [index, w0, w1, write] while the group is undecided
let batchMax: u32 = 0;
let evicted: u64 = 0;
/** xorshift32 state: draws where each eviction's sample starts. */
let sampleAt: u32 = 0x9e3779b9;
/** Occupied slots examined per eviction (sampled LRU, as Redis's maxmemory-samples). */
const EVICTION_SAMPLE: u32 = 32;

function nextPow2(x: u32): u32 {
  return x <= 1 ? 1 : <u32>1 << (32 - clz<u32>(x - 1));
}

/**
 * Allocates every region once, growing memory in one step to exactly what they need. maxKeys bounds the
 * table; slots = the power of two ≥ maxKeys + 1, doubled if the load would pass 96%. keyBytes sizes the
 * region keys are hashed from (0 for a kernel that only decides). logKeys × logEntries sizes the sliding
 * log's arena (keys with a log at once, entries per key; 16 bytes an entry). Returns 0; 1 if called twice;
 * 2 if the regions do not fit in 4 GiB of linear memory.
 */
export function init(maxKeysArg: u32, maxBatch: u32, maxLimits: u32, keyBytes: u32, logKeys: u32, logEntriesArg: u32): u32 {
  if (legIn != 0) return INIT_AGAIN;
  let slotCount = nextPow2(maxKeysArg + 1);
  if (<u64>maxKeysArg * 100 > <u64>slotCount * 96) slotCount <<= 1;
  const tableBytes = tableSize(slotCount);
  const limitBytes = <u64>maxLimits * LIMIT_SIZE;
  const ioBytes = <u64>maxBatch * (LEG_IN_STRIDE + LEG_OUT_STRIDE + HASH_IN_STRIDE + HASH_OUT_STRIDE);
  const logBytes = <u64>logKeys * logEntriesArg * ENTRY_SIZE;
  // the stub allocator rounds each of the 10 blocks up to 16 bytes
  const end = <u64>__heap_base + tableBytes + limitBytes + ioBytes + <u64>keyBytes + <u64>MAX_GROUP * 32 + logBytes + <u64>prefetchBytes(maxBatch) + 10 * 16;
  if (end > 0xFFFF0000 || slotCount == 0) return INIT_NO_ROOM;
  const pages = <i32>((end + 0xFFFF) >> 16);
  const have = memory.size();
  if (pages > have && memory.grow(pages - have) < 0) return INIT_NO_ROOM;
  tableInit(heap.alloc(<usize>tableBytes), slotCount, maxKeysArg);
  limits = heap.alloc(<usize>limitBytes);
  memory.fill(limits, 0, <usize>limitBytes);
  limitCount = maxLimits;
  batchMax = maxBatch;
  legIn = heap.alloc(<usize>maxBatch * LEG_IN_STRIDE);
  legOut = heap.alloc(<usize>maxBatch * LEG_OUT_STRIDE);
  hashIn = heap.alloc(<usize>maxBatch * HASH_IN_STRIDE);
  hashOut = heap.alloc(<usize>maxBatch * HASH_OUT_STRIDE);
  keys = heap.alloc(<usize>keyBytes);
  scratch = heap.alloc(<usize>MAX_GROUP * 32);
  logInit(heap.alloc(<usize>logBytes), logKeys, logEntriesArg);
  prefetchInit(legIn, heap.alloc(prefetchBytes(maxBatch)), maxBatch);
  return OK;
}

/** Limit.used: 0 = no limit with this id; USED; CARRY = used, and a token bucket that carries state over. */
const USED: u32 = 1;
const CARRY: u32 = 2;

/**
 * Sets limit `id`: algorithm code (0 token_bucket, 1 gcra, 2 fixed_window, 3 sliding_window, 4 calendar_window), limit L
 * (tokens per period), period P (ms), burst B (tokens), carry (1: a token bucket that takes over the consumed
 * amount of a key's state under another limit id, see `stateOf`). The loader has checked B·P and L·P < 2^63.
 * An id keeps its meaning while any slot refers to it: a reload adds ids, and one is set again with other
 * numbers only after purgeLimit removed every key under it, so a slot's id always names the numbers its
 * state was made under. Returns 0, or 1 for a bad id or algorithm.
 */
export function setLimit(id: u32, algorithm: u32, limit: f64, period: f64, burst: f64, carry: u32): u32 {
  if (id >= limitCount || algorithm > SLIDING_LOG || period < 1) return BAD_LIMIT;
  // a sliding log holds up to min(L, P) entries per key: they must fit in a block
  if (algorithm == SLIDING_LOG && (logBlocks == 0 || (limit < period ? limit : period) > <f64>logEntries)) return BAD_LIMIT;
  const lim = changetype<Limit>(limits + <usize>id * LIMIT_SIZE);
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
  if (id >= limitCount || limitAt(id).used == 0 || limitAt(id).algorithm != CALENDAR_WINDOW) return BAD_LIMIT;
  limitAt(id).winEnd = <u64>endMs;
  return OK;
}

@inline function limitAt(id: u32): Limit {
  return changetype<Limit>(limits + <usize>id * LIMIT_SIZE);
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

/** Evaluates one leg of limit `limitId` into R.*: from the slot at `idx` (or a fresh key when idx < 0). */
function evaluate(lim: Limit, limitId: u32, idx: i32, c: u64, now: u64): void {
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
  if (alg == TOKEN_BUCKET) tokenBucket(lim, exists, w0, last, c, t);
  else if (alg == GCRA) gcra(lim, exists, w0, w1, c, t);
  else if (alg == FIXED_WINDOW) fixedWindow(lim, exists, w0, last, c, t);
  else if (alg == SLIDING_WINDOW) slidingWindow(lim, exists, w0, w1, last, c, t);
  else if (alg == CALENDAR_WINDOW) calendarWindow(lim, exists, w0, w1, c, t);
  else slidingLog(lim, exists, w0, w1, c, t);
  lastT = t;
}
let lastT: u64 = 0;

@inline function writeOut(leg: u32): void {
  const o = legOut + <usize>leg * LEG_OUT_STRIDE;
  store<f64>(o, R.code, OUT_CODE);
  store<f64>(o, <f64>R.remaining, OUT_REMAINING);
  store<f64>(o, <f64>R.resetAfter, OUT_RESET_AFTER);
  store<f64>(o, R.code == CODE_NEVER ? -1 : <f64>R.retryAfter, OUT_RETRY_AFTER);
}

@inline function legHash(leg: u32): u64 {
  const p = legIn + <usize>leg * LEG_IN_STRIDE;
  return (<u64><u32>load<f64>(p, IN_HASH_HI) << 32) | <u64><u32>load<f64>(p, IN_HASH_LO);
}

/** Stores a leg's new state, inserting (and evicting, when full) if the key is new. */
function commit(h: u64, idx: i32, limitId: u32, w0: u64, w1: u64, t: u64, now: u64): void {
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

/** Removes the slot at `i`, freeing its log block if it holds a sliding log. */
function removeSlot(i: u32): void {
  const s = slotAt(i);
  if (limitAt(<u32>(s.meta >> 48)).algorithm == SLIDING_LOG) logFree(<u32>s.w0);
  removeAt(i);
}

function badLeg(leg: u32): void {
  const o = legOut + <usize>leg * LEG_OUT_STRIDE;
  store<f64>(o, CODE_BAD_LIMIT, OUT_CODE);
  store<f64>(o, 0, OUT_REMAINING);
  store<f64>(o, 0, OUT_RESET_AFTER);
  store<f64>(o, -1, OUT_RETRY_AFTER);
}

function single(leg: u32, now: u64): void {
  const p = legIn + <usize>leg * LEG_IN_STRIDE;
  const limitId = (<u32>load<f64>(p, IN_LIMIT)) & LIMIT_ID_MASK;
  if (limitId >= limitCount || limitAt(limitId).used == 0) { badLeg(leg); return; }
  const lim = limitAt(limitId);
  const h = legHash(leg);
  const c = <u64>load<f64>(p, IN_COST);
  const idx = slotOf(leg, h);
  evaluate(lim, limitId, idx, c, now);
  writeOut(leg);
  if (R.write) commit(h, idx, limitId, R.nw0, R.nw1, lastT, now);
}

/** All legs of a group admit, then all commit; if any denies, none changes. */
function group(first: u32, n: u32, now: u64): void {
  let all = true;
  for (let j: u32 = 0; j < n; j++) {
    const leg = first + j;
    const p = legIn + <usize>leg * LEG_IN_STRIDE;
    const limitId = (<u32>load<f64>(p, IN_LIMIT)) & LIMIT_ID_MASK;
    const sc = scratch + <usize>j * 32;
    if (limitId >= limitCount || limitAt(limitId).used == 0) { badLeg(leg); store<u64>(sc, 0, 24); all = false; continue; }
    evaluate(limitAt(limitId), limitId, slotOf(leg, legHash(leg)), <u64>load<f64>(p, IN_COST), now);
    writeOut(leg);
    store<u64>(sc, R.nw0);
    store<u64>(sc, R.nw1, 8);
    store<u64>(sc, lastT, 16);
    store<u64>(sc, R.write ? 1 : 0, 24);
    if (R.code != CODE_ALLOW) all = false;
  }
  for (let j: u32 = 0; j < n; j++) {
    const leg = first + j;
    const p = legIn + <usize>leg * LEG_IN_STRIDE;
    const limitId = (<u32>load<f64>(p, IN_LIMIT)) & LIMIT_ID_MASK;
    const sc = scratch + <usize>j * 32;
    const h = legHash(leg);
    if (all) {
      // look up again: an earlier leg's insert may have moved slots
      if (load<u64>(sc, 24) != 0) commit(h, find(h), limitId, load<u64>(sc), load<u64>(sc, 8), load<u64>(sc, 16), now);
    } else if (load<f64>(legOut + <usize>leg * LEG_OUT_STRIDE, OUT_CODE) == CODE_ALLOW) {
      // this leg alone would admit, but the check is denied: report its state untouched
      evaluate(limitAt(limitId), limitId, find(h), 0, now);
      writeOut(leg);
    }
  }
}

/**
 * Decides legs [0, n) of the input region at `nowMs` (Unix ms, integral, < 2^48), in order, writing one
 * output row per leg. Returns 0, or 1 if n exceeds the batch size.
 */
export function checkBatch(n: u32, nowMs: f64): u32 {
  if (n > batchMax) return TOO_MANY;
  const now = <u64>nowMs;
  prefetchStart(n);
  let i: u32 = 0;
  while (i < n) {
    ahead(i, n);
    let g = (<u32>load<f64>(legIn + <usize>i * LEG_IN_STRIDE, IN_LIMIT)) >>> GROUP_BITS;
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
  return OK;
}

/**
 * Installs state for rows [0, n) of the leg input region, read as STATE_ROW rows: the merged state sync mode
 * receives from Redis replaces this kernel's. A key that is absent is inserted (evicting when full). Returns
 * 0, or 1 if n rows do not fit in the region.
 */
export function setState(n: u32, nowMs: f64): u32 {
  if (<u64>n * STATE_STRIDE > <u64>batchMax * LEG_IN_STRIDE) return TOO_MANY;
  const now = <u64>nowMs;
  for (let i: u32 = 0; i < n; i++) {
    const p = legIn + <usize>i * STATE_STRIDE;
    const h = (<u64><u32>load<f64>(p, IN_HASH_HI) << 32) | <u64><u32>load<f64>(p, IN_HASH_LO);
    const limitId = <u32>load<f64>(p, IN_LIMIT);
    if (limitId >= limitCount || limitAt(limitId).used == 0) continue;
    commit(h, find(h), limitId, <u64><i64>load<f64>(p, STATE_W0), <u64>load<f64>(p, STATE_W1), <u64>load<f64>(p, STATE_LAST_SEEN), now);
  }
  return OK;
}

/**
 * Reads the stored state of legs [0, n) of the leg input region (their hash and limit id; cost ignored)
 * into output rows [found (1, or 0 for none or a slot under another limit id), w0 (signed), w1, lastSeen].
 * Changes nothing. The admin API's inspect. Returns 0, or 1 if n exceeds the batch size.
 */
export function peekBatch(n: u32): u32 {
  if (n > batchMax) return TOO_MANY;
  for (let i: u32 = 0; i < n; i++) {
    const limitId = (<u32>load<f64>(legIn + <usize>i * LEG_IN_STRIDE, IN_LIMIT)) & LIMIT_ID_MASK;
    const idx = find(legHash(i));
    const o = legOut + <usize>i * LEG_OUT_STRIDE;
    const s = idx >= 0 ? slotAt(<u32>idx) : changetype<Slot>(0);
    const found = idx >= 0 && <u32>(s.meta >> 48) == limitId;
    store<f64>(o, found ? 1 : 0, PEEK_FOUND);
    store<f64>(o, found ? <f64><i64>s.w0 : 0, PEEK_W0);
    store<f64>(o, found ? <f64>s.w1 : 0, PEEK_W1);
    store<f64>(o, found ? <f64>(s.meta & TIME_MASK) : 0, PEEK_LAST_SEEN);
  }
  return OK;
}

/**
 * Forgets the keys of legs [0, n) of the leg input region (by hash, whatever their limit id): the admin
 * API's reset. Returns how many were held, or −1 if n exceeds the batch size.
 */
export function removeBatch(n: u32): i32 {
  if (n > batchMax) return REMOVE_TOO_MANY;
  let removed: i32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const idx = find(legHash(i));
    if (idx >= 0) { removeSlot(<u32>idx); removed++; }
  }
  return removed;
}

/**
 * Frees limit id `id` for reuse if no key's state under it carries information at `nowMs`: then every slot
 * under it (all idle) is removed and 0 is returned. Otherwise nothing changes and the number of slots whose
 * state under `id` still carries information is returned. A full scan of the table: a reload's reclaim of
 * limit ids no policy uses, never a decision's work.
 */
export function purgeLimit(id: u32, nowMs: f64): i32 {
  const now = <u64>nowMs;
  let live: i32 = 0;
  for (let i: u32 = 0; i <= mask; i++) {
    const s = slotAt(i);
    if (hashAt(i) != 0 && <u32>(s.meta >> 48) == id && !idle(s, now)) live++;
  }
  if (live > 0) return live;
  // backward-shift deletion moves the next entry into i: look at i again before moving on
  for (let i: u32 = 0; i <= mask;) {
    const s = slotAt(i);
    if (hashAt(i) != 0 && <u32>(s.meta >> 48) == id) removeAt(i);
    else i++;
  }
  return 0;
}

/** True when the slot's state carries no information at `now` (full bucket, ended window). */
function idle(s: Slot, now: u64): bool {
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
 * old, evicts its own kind first. O(EVICTION_SAMPLE) per eviction.
 *
 * The start is drawn uniformly among the keys (xorshift32, redrawn on an empty slot), so evictions fall on
 * keys the way inserts do and the table keeps the cluster lengths of a freshly filled one (max ~190 slots at
 * 100,000 keys, after 3 M evictions). Choosing by position instead skews evictions toward the heads of
 * clusters, and long clusters only grow: a hand rotating past the last victim built one Robin Hood cluster
 * of 46,000 slots under a flood of new keys, and a start drawn among slots (empty or not) clusters of
 * 5,000, making inserts, lookups and removals there walk them (up to 50x slower decisions).
 */
function evictOne(now: u64, logOnly: bool): void {
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

/** Hashes keys [0, n) of the hash input region (XXH64 with each row's seed); 0 is remapped to 1. */
export function hashBatch(n: u32): void {
  for (let i: u32 = 0; i < n; i++) {
    const p = hashIn + <usize>i * HASH_IN_STRIDE;
    const seed = (<u64>load<u32>(p, HASH_IN_SEED_HI) << 32) | <u64>load<u32>(p, HASH_IN_SEED_LO);
    let h = xxh64(keys + <usize>load<u32>(p), <usize>load<u32>(p, HASH_IN_LENGTH), seed);
    if (h == 0) h = 1;
    const o = hashOut + <usize>i * HASH_OUT_STRIDE;
    store<u32>(o, <u32>h);
    store<u32>(o, <u32>(h >> 32), HASH_OUT_HI);
  }
}

export function legInPtr(): usize { return legIn; }
export function legOutPtr(): usize { return legOut; }
export function hashInPtr(): usize { return hashIn; }
export function hashOutPtr(): usize { return hashOut; }
export function keyPtr(): usize { return keys; }
/** Sliding-log blocks in use, and their entries per block. */
export function logBlocksUsed(): u32 { return logUsed; }
export function logBlockEntries(): u32 { return logEntries; }
/** Keys held now. */
export function size(): u32 { return count; }
/** Slots in the table (a power of two). */
export function slotCount(): u32 { return mask + 1; }
/** Keys evicted since init, as f64 (exact below 2^53). */
export function evictions(): f64 { return <f64>evicted; }
/** Bytes of linear memory in use. */
export function memoryBytes(): f64 { return <f64>(memory.size() << 16); }

// The ABI constants, exported as globals so that test/unit/kernel/abi.test.ts pins src/shard/abi.ts to them.
export {
  LEG_IN_STRIDE, IN_HASH_LO, IN_HASH_HI, IN_LIMIT, IN_COST, LIMIT_ID_MASK, GROUP_BITS, MAX_GROUP,
  LEG_OUT_STRIDE, OUT_CODE, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER, PEEK_FOUND, PEEK_W0, PEEK_W1, PEEK_LAST_SEEN,
  CODE_ALLOW, CODE_DENY, CODE_NEVER, CODE_BAD_LIMIT,
  STATE_STRIDE, STATE_W0, STATE_W1, STATE_LAST_SEEN,
  HASH_IN_STRIDE, HASH_IN_LENGTH, HASH_IN_SEED_LO, HASH_IN_SEED_HI, HASH_OUT_STRIDE, HASH_OUT_HI,
  OK, INIT_AGAIN, INIT_NO_ROOM, BAD_LIMIT, TOO_MANY, REMOVE_TOO_MANY,
} from './layout';
