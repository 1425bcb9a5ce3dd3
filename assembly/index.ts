// The kernel's only exports: numbers in, numbers out. JS writes a batch into the input region, calls
// checkBatch(n, now) once, and reads the output region. No clock, no I/O, no allocation after init().
//
// This file is the module's surface: init, the batch calls and the counters. The parts behind it: the limits
// region (limits.ts, whose setLimit and setWindow are exported from here), the I/O regions and their rows
// (io.ts), deciding legs (decide.ts), idleness and eviction (eviction.ts), the table (table.ts), reading a
// batch's slots ahead (prefetch.ts), the sliding log's arena (log-arena.ts), XXH64 (hash.ts), the algorithms
// (algorithms/), and the layout and ABI constants (layout.ts).
import {
  Slot, TIME_MASK, LEG_IN_STRIDE, IN_HASH_LO, IN_HASH_HI, IN_LIMIT, LIMIT_ID_MASK, LEG_OUT_STRIDE,
  PEEK_FOUND, PEEK_W0, PEEK_W1, PEEK_LAST_SEEN, STATE_STRIDE, STATE_W0, STATE_W1, STATE_LAST_SEEN,
  HASH_IN_STRIDE, HASH_IN_LENGTH, HASH_IN_SEED_LO, HASH_IN_SEED_HI, HASH_OUT_STRIDE, HASH_OUT_HI,
  OK, INIT_AGAIN, INIT_NO_ROOM, TOO_MANY, REMOVE_TOO_MANY,
} from './layout';
import { tableInit, tableBytes as tableSize, find, removeAt, slotAt, hashAt, count, mask } from './table';
import { xxh64 } from './hash';
import { prefetchBytes, prefetchInit } from './prefetch';
import { limitsBytes, limitsInit, limitIsSet } from './limits';
import { legIn, legOut, hashIn, hashOut, keys, batchMax, ioBytes, ioInit, legWord, legHash } from './io';
import { SCRATCH_BYTES, commit, decideInit, decideLegs } from './decide';
import { evicted, idle, removeSlot } from './eviction';
import { ENTRY_SIZE, logEntries, logInit, logUsed } from './log-arena';

export { setLimit, setWindow } from './limits';

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
  const limitBytes = limitsBytes(maxLimits);
  const logBytes = <u64>logKeys * logEntriesArg * ENTRY_SIZE;
  // the stub allocator rounds each of the 10 blocks up to 16 bytes
  const end = <u64>__heap_base + tableBytes + limitBytes + ioBytes(maxBatch) + <u64>keyBytes + <u64>SCRATCH_BYTES + logBytes + <u64>prefetchBytes(maxBatch) + 10 * 16;
  if (end > 0xFFFF0000 || slotCount == 0) return INIT_NO_ROOM;
  const pages = <i32>((end + 0xFFFF) >> 16);
  const have = memory.size();
  if (pages > have && memory.grow(pages - have) < 0) return INIT_NO_ROOM;
  tableInit(heap.alloc(<usize>tableBytes), slotCount, maxKeysArg);
  limitsInit(heap.alloc(<usize>limitBytes), maxLimits);
  ioInit(maxBatch, keyBytes);
  decideInit(heap.alloc(SCRATCH_BYTES));
  logInit(heap.alloc(<usize>logBytes), logKeys, logEntriesArg);
  prefetchInit(legIn, heap.alloc(prefetchBytes(maxBatch)), maxBatch);
  return OK;
}

/**
 * Decides legs [0, n) of the input region at `nowMs` (Unix ms, integral, < 2^48), in order, writing one
 * output row per leg. Returns 0, or 1 if n exceeds the batch size.
 */
export function checkBatch(n: u32, nowMs: f64): u32 {
  if (n > batchMax) return TOO_MANY;
  decideLegs(n, <u64>nowMs);
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
    if (!limitIsSet(limitId)) continue;
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
    const limitId = <u32>legWord(i) & LIMIT_ID_MASK;
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
  LEG_IN_STRIDE, IN_HASH_LO, IN_HASH_HI, IN_LIMIT, IN_COST, LIMIT_ID_MASK, GROUP_BITS, GROUP_MASK, DELAY_BITS, MAX_DELAY_MS, MAX_GROUP,
  LEG_OUT_STRIDE, OUT_CODE, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER, OUT_DELAY, PEEK_FOUND, PEEK_W0, PEEK_W1, PEEK_LAST_SEEN,
  CODE_ALLOW, CODE_DENY, CODE_NEVER, CODE_BAD_LIMIT,
  STATE_STRIDE, STATE_W0, STATE_W1, STATE_LAST_SEEN,
  HASH_IN_STRIDE, HASH_IN_LENGTH, HASH_IN_SEED_LO, HASH_IN_SEED_HI, HASH_OUT_STRIDE, HASH_OUT_HI,
  OK, INIT_AGAIN, INIT_NO_ROOM, BAD_LIMIT, TOO_MANY, REMOVE_TOO_MANY,
} from './layout';
