/**
 * The kernel's ABI on the JS side, in one place: the rows of its I/O regions, the leg result codes and what
 * its calls return. assembly/layout.ts holds the same constants (as byte offsets) and build/kernel.wasm
 * exports them as globals; test/unit/kernel/abi.test.ts compares the two, so neither side can drift.
 *
 * Leg input row (LEG_IN f64s):  [hashLo, hashHi, limitId + groupLength·GROUP_SHIFT + maxDelayMs·DELAY_SHIFT, cost]
 * Leg output row (LEG_OUT f64s): [code, remaining, resetAfterMs, retryAfterMs (−1 = never)]
 * Peek output row (LEG_OUT f64s): [found (0/1), w0 (signed), w1, lastSeen (Unix ms)]
 * State row (STATE_ROW f64s, over the leg input region): [hashLo, hashHi, limitId, w0 (signed), w1, lastSeen]
 * Hash input row (HASH_IN u32s): [byte offset in the key region, byte length, seedLo, seedHi]
 * Hash output row (HASH_OUT u32s): [hashLo, hashHi]
 *
 * Every value in an f64 row is integral (hash halves as u32, costs and times below 2^53), so nothing crosses
 * as i64 or BigInt. A check is a group of consecutive legs (one per limit of its policy, then its guard's);
 * the first leg carries the group length and the kernel admits the group all-or-nothing.
 */

/** f64s per leg input row, and the index of each field in it. */
export const LEG_IN = 4;
export const IN_HASH_LO = 0;
export const IN_HASH_HI = 1;
/** limitId, plus groupLength × GROUP_SHIFT on a group's first leg. */
export const IN_LIMIT = 2;
export const IN_COST = 3;
/** Multiplier of the group length in IN_LIMIT (limit ids are below it). */
export const GROUP_SHIFT = 65536;
/** The group length's bits in IN_LIMIT (8, above the limit id), as a modulus after dividing by GROUP_SHIFT. */
export const GROUP_SPAN = 256;
/**
 * Multiplier of a leg's maxDelayMs in IN_LIMIT (onLimit: delay): a token bucket or GCRA leg that would be
 * denied but can be admitted within that many ms is admitted now in debt, its wait in OUT_DELAY. 0: no delay.
 */
export const DELAY_SHIFT = 2 ** 24;
/** Largest maxDelayMs a leg carries (IN_LIMIT stays an integer below 2^53). */
export const MAX_DELAY_MS = 2 ** 29 - 1;
/** Most legs in one group: 8 limits of a policy + 8 of its guard. */
export const MAX_GROUP = 16;

/** f64s per leg output row, and the index of each field in it (a peek's rows reuse them, see above). */
export const LEG_OUT = 4;
export const OUT_CODE = 0;
export const OUT_REMAINING = 1;
export const OUT_RESET_AFTER = 2;
export const OUT_RETRY_AFTER = 3;
/** An admitted leg's delay (ms the caller waits before it proceeds; 0: at once), in the retry-after field. */
export const OUT_DELAY = 3;
/** A peek's output row: whether the key is held under the leg's limit id, and its stored state. */
export const PEEK_FOUND = 0;
export const PEEK_W0 = 1;
export const PEEK_W1 = 2;
export const PEEK_LAST_SEEN = 3;

/** A leg's outcome (OUT_CODE). */
export const CODE_ALLOW = 0;
export const CODE_DENY = 1;
export const CODE_NEVER = 2;
/** The leg's limit id is not one the kernel holds: a front/shard bug, never a decision. */
export const CODE_BAD_LIMIT = 3;

/** f64s per row of Kernel.setState's input, and the index of the state fields (hash and limit as a leg's). */
export const STATE_ROW = 6;
export const STATE_W0 = 3;
export const STATE_W1 = 4;
export const STATE_LAST_SEEN = 5;

/** u32s per hash input row and output row, and the index of each field. */
export const HASH_IN = 4;
export const HASH_IN_OFFSET = 0;
export const HASH_IN_LENGTH = 1;
export const HASH_IN_SEED_LO = 2;
export const HASH_IN_SEED_HI = 3;
export const HASH_OUT = 2;
export const HASH_OUT_LO = 0;
export const HASH_OUT_HI = 1;

/** What the kernel's calls return (removeBatch: the count held, or REMOVE_TOO_MANY). */
export const STATUS = {
  OK: 0,
  /** init called twice. */
  INIT_AGAIN: 1,
  /** init's regions do not fit in 4 GiB of linear memory. */
  INIT_NO_ROOM: 2,
  /** setLimit: an id past the kernel's room, or a bad algorithm code. */
  BAD_LIMIT: 1,
  /** checkBatch, peekBatch, setState: more rows than the region holds. */
  TOO_MANY: 1,
  REMOVE_TOO_MANY: -1,
} as const;
