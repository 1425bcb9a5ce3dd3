// Memory layout of the kernel. Every record is @unmanaged (plain bytes in linear memory, no GC header).
//
// Slot: one key's state, 32 bytes of the table: its 8-byte hash and a 24-byte record.
//
//   hash  64-bit hash of (policy seed, limit, key); 0 marks an empty slot
//
//   record (Slot):
//   0        8        16       24
//   +--------+--------+--------+
//   | w0     | w1     | meta   |
//   +--------+--------+--------+
//   w0    token_bucket: x = tokens·P        gcra: TAT, whole ms
//         fixed_window: count               sliding_window: prev (count of the previous window)
//         calendar_window: count
//   w1    gcra: TAT fraction numerator (< L), TAT = w0 + w1/L    sliding_window: cur
//         calendar_window: end of the window the count belongs to (Unix ms)
//   sliding_log: w0 = its arena block (assembly/log-arena.ts), w1 = ring head | length << 32
//   meta  (limitId << 48) | lastSeen (Unix ms < 2^48: the time of the last check that changed the state)
//
// The table stores slots in blocks of SLOT_BLOCK (8): the block's 8 hashes (one 64-byte cache line), then
// its 8 records (192 bytes), 256 bytes in all (assembly/table.ts). A probe walks hashes only, 8 to a line,
// and a slot's record sits in the same 4 KiB page as its hash: one TLB entry per lookup.
@unmanaged export class Slot {
  w0: u64;
  w1: u64;
  meta: u64;
}
/** Table bytes per slot: its hash and its record. */
export const SLOT_SIZE: usize = 8 + offsetof<Slot>();
export const RECORD_SIZE: usize = offsetof<Slot>();
/** Slots per block: a block is SLOT_BLOCK hashes, then SLOT_BLOCK records. */
export const SLOT_BLOCK: u32 = 8;
export const BLOCK_SIZE: usize = <usize>SLOT_BLOCK * SLOT_SIZE;
export const TIME_MASK: u64 = (<u64>1 << 48) - 1;

// Limit: one limit's parameters, 64 bytes, indexed by limit id.
//
//   algorithm u32 | used u32 | L | P | B | BP = B·P | LP = L·P | fullAfter = ceil(B·P / L) | winEnd
//   winEnd: calendar_window only, the end (Unix ms) of the window holding the batch's time (setWindow)
@unmanaged export class Limit {
  algorithm: u32;
  used: u32;
  L: u64;
  P: u64;
  B: u64;
  BP: u64;
  LP: u64;
  fullAfter: u64;
  winEnd: u64;
}
export const LIMIT_SIZE: usize = offsetof<Limit>();

export const TOKEN_BUCKET: u32 = 0;
export const GCRA: u32 = 1;
export const FIXED_WINDOW: u32 = 2;
export const SLIDING_WINDOW: u32 = 3;
/** fixed_window over calendar windows whose bounds JS computes (assembly/algorithms/calendar-window.ts). */
export const CALENDAR_WINDOW: u32 = 4;
/** Sliding log: w0 = the key's arena block, w1 = ring head | length << 32 (assembly/algorithms/sliding-log.ts). */
export const SLIDING_LOG: u32 = 5;

// The I/O rows below are the kernel's ABI: src/shard/abi.ts mirrors every constant (in f64 or u32 indices
// where these are byte offsets), and test/unit/kernel/abi.test.ts reads them from the module's exports
// (assembly/index.ts re-exports them as globals) and compares.

// Batch input, one leg per row, 4 × f64 (integral values only; no i64 crosses the boundary):
//   [hashLo (u32), hashHi (u32), limitId | groupLength << 16, cost]
// A check is a group of consecutive legs (its limits, plus a guard's); its first leg carries the group length.
export const LEG_IN_STRIDE: usize = 32;
export const IN_HASH_LO: usize = 0;
export const IN_HASH_HI: usize = 8;
export const IN_LIMIT: usize = 16;
export const IN_COST: usize = 24;
/** IN_LIMIT holds limitId in its low bits and, on a group's first leg, the group length above them. */
export const LIMIT_ID_MASK: u32 = 0xffff;
export const GROUP_BITS: u32 = 16;

// Batch output, one row per leg, 4 × f64: [code, remaining, resetAfterMs, retryAfterMs (−1 = never)].
// peekBatch writes the same rows as [found (0/1), w0 (signed), w1, lastSeen].
export const LEG_OUT_STRIDE: usize = 32;
export const OUT_CODE: usize = 0;
export const OUT_REMAINING: usize = 8;
export const OUT_RESET_AFTER: usize = 16;
export const OUT_RETRY_AFTER: usize = 24;
export const PEEK_FOUND: usize = 0;
export const PEEK_W0: usize = 8;
export const PEEK_W1: usize = 16;
export const PEEK_LAST_SEEN: usize = 24;
export const CODE_ALLOW: f64 = 0;
export const CODE_DENY: f64 = 1;
export const CODE_NEVER: f64 = 2;
export const CODE_BAD_LIMIT: f64 = 3;

// setState's input, one state per row over the leg input region, 6 × f64:
//   [hashLo, hashHi, limitId, w0 (signed), w1, lastSeen]
export const STATE_STRIDE: usize = 48;
export const STATE_W0: usize = 24;
export const STATE_W1: usize = 32;
export const STATE_LAST_SEEN: usize = 40;

// Hash input, one row per key, 4 × u32: [byte offset in the key region, byte length, seedLo, seedHi]
// Hash output, one row per key, 2 × u32: [hashLo, hashHi]
export const HASH_IN_STRIDE: usize = 16;
export const HASH_IN_LENGTH: usize = 4;
export const HASH_IN_SEED_LO: usize = 8;
export const HASH_IN_SEED_HI: usize = 12;
export const HASH_OUT_STRIDE: usize = 8;
export const HASH_OUT_HI: usize = 4;

// What the exported calls return. init: OK, INIT_AGAIN (called twice), INIT_NO_ROOM (the regions do not fit
// in 4 GiB); setLimit: OK or BAD_LIMIT; checkBatch, peekBatch, setState: OK or TOO_MANY (more rows than the
// region holds); removeBatch: the count held, or REMOVE_TOO_MANY.
export const OK: u32 = 0;
export const INIT_AGAIN: u32 = 1;
export const INIT_NO_ROOM: u32 = 2;
export const BAD_LIMIT: u32 = 1;
export const TOO_MANY: u32 = 1;
export const REMOVE_TOO_MANY: i32 = -1;

/** Most legs in one group: 8 limits of a policy + 8 of its guard. */
export const MAX_GROUP: u32 = 16;
