// Memory layout of the kernel. Every record is @unmanaged (plain bytes in linear memory, no GC header).
//
// Slot: one key's state, 32 bytes; the table is an array of these.
//
//   0        8        16       24       32
//   +--------+--------+--------+--------+
//   | hash   | w0     | w1     | meta   |
//   +--------+--------+--------+--------+
//   hash  64-bit hash of (policy seed, limit, key); 0 marks an empty slot
//   w0    token_bucket: x = tokens·P        gcra: TAT, whole ms
//         fixed_window: count               sliding_window: prev (count of the previous window)
//         calendar_window: count
//   w1    gcra: TAT fraction numerator (< L), TAT = w0 + w1/L    sliding_window: cur
//         calendar_window: end of the window the count belongs to (Unix ms)
//   sliding_log: w0 = its arena block (assembly/log-arena.ts), w1 = ring head | length << 32
//   meta  (limitId << 48) | lastSeen (Unix ms < 2^48: the time of the last check that changed the state)
@unmanaged export class Slot {
  hash: u64;
  w0: u64;
  w1: u64;
  meta: u64;
}
export const SLOT_SIZE: usize = offsetof<Slot>();
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

// Batch input, one leg per row, 4 × f64 (integral values only; no i64 crosses the boundary):
//   [hashLo (u32), hashHi (u32), limitId | groupLength << 16, cost]
// A check is a group of consecutive legs (its limits, plus a guard's); its first leg carries the group length.
export const LEG_IN_STRIDE: usize = 32;

// Batch output, one row per leg, 4 × f64: [code, remaining, resetAfterMs, retryAfterMs (−1 = never)]
export const LEG_OUT_STRIDE: usize = 32;
export const CODE_ALLOW: f64 = 0;
export const CODE_DENY: f64 = 1;
export const CODE_NEVER: f64 = 2;
export const CODE_BAD_LIMIT: f64 = 3;

// Hash input, one row per key, 4 × u32: [byte offset in the key region, byte length, seedLo, seedHi]
// Hash output, one row per key, 2 × u32: [hashLo, hashHi]
export const HASH_IN_STRIDE: usize = 16;
export const HASH_OUT_STRIDE: usize = 8;

/** Most legs in one group: 8 limits of a policy + 8 of its guard. */
export const MAX_GROUP: u32 = 16;
