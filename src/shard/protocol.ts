/**
 * The front ↔ shard contract, in one place. A batch is struct-of-rows over a Float64Array: every value is an
 * integral f64 (hash halves as u32, costs and times below 2^53), so nothing crosses as i64 or BigInt.
 *
 * Leg input row (LEG_IN f64s):  [hashLo, hashHi, limitId | groupLength << 16, cost]
 * Leg output row (LEG_OUT f64s): [code, remaining, resetAfterMs, retryAfterMs (−1 = never)]
 *
 * A check is a group of consecutive legs (one per limit of its policy, then its guard's); the first leg
 * carries the group length and the kernel admits the group all-or-nothing.
 */
export const LEG_IN = 4;
export const LEG_OUT = 4;
export const GROUP_SHIFT = 65536;
export const MAX_GROUP = 16;

export const CODE_ALLOW = 0;
export const CODE_DENY = 1;
export const CODE_NEVER = 2;
export const CODE_BAD_LIMIT = 3;

/** One shard's work for one turn. `legs` is transferred, not copied. The reply is a Float64Array of n output rows. */
export interface ShardTask {
  kind: 'batch';
  /** Unix epoch ms, read once on the front for the whole batch. */
  now: number;
  /** Number of legs. */
  n: number;
  legs: Float64Array;
}

/** Merged states to install (sync mode): n rows of STATE_ROW f64s, see Kernel.setState. */
export interface ShardStates {
  kind: 'setState';
  now: number;
  n: number;
  rows: Float64Array;
}

/** Everything a shard is asked: a batch, states to install, its kernel's counters, or a start-up ping. */
export type ShardRequest = ShardTask | ShardStates | { kind: 'stats' } | { kind: 'ping' };

/** What a shard worker is built with (structured-cloned into each worker; the Module is not recompiled). */
export interface ShardInit {
  module: WebAssembly.Module;
  maxKeys: number;
  maxBatch: number;
  /** Kernel parameters by limit id. */
  limits: KernelLimit[];
}

/** A limit as the kernel takes it: algorithm code, L (tokens per period), P (ms), B (tokens). */
export interface KernelLimit {
  algorithmCode: number;
  limit: number;
  periodMs: number;
  burst: number;
}
