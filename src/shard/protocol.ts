/**
 * The front ↔ shard contract, in one place: the messages a shard worker takes. A batch is struct-of-rows over
 * a Float64Array in the kernel's row layout, whose constants (LEG_IN, LEG_OUT, GROUP_SHIFT, the codes...) live
 * in ./abi.ts and are re-exported here for the modules that speak to shards.
 */
import type { CalendarPeriod } from '../util/calendar.js';
import type { ChannelMemory } from './channel.js';
export { LEG_IN, LEG_OUT, STATE_ROW, GROUP_SHIFT, GROUP_SPAN, DELAY_SHIFT, MAX_GROUP, CODE_ALLOW, CODE_DENY, CODE_NEVER, CODE_BAD_LIMIT } from './abi.js';

/** One shard's work for one turn. `legs` is transferred, not copied. The reply is a Float64Array of n output rows. */
export interface ShardTask {
  kind: 'batch';
  /** Unix epoch ms, read once on the front for the whole batch. */
  now: number;
  /** Number of legs. */
  n: number;
  legs: Float64Array;
  /**
   * Sync mode only: the batch's number on this shard, and the last one the front had settled when it sent
   * this. The worker logs what the batch admitted until the front has read it (src/shard/admissions.ts).
   */
  seq?: number;
  ack?: number;
  /**
   * Key states to set before the legs are decided (STATE_ROW f64s each, Kernel.setState at `now`): the states
   * `onStoreError: local` starts store-backed keys from, riding in the batch that decides them
   * (LocalDecider.seed), so they land just before that decision, in the queue's order, and no thread waits for
   * the shard to take them. Transferred, as `legs`.
   */
  states?: Float64Array;
}

/**
 * Merged states to install (sync mode): n rows of STATE_ROW f64s, see Kernel.setState. Sent on the worker's
 * queue, so channel calls can overtake it: safe, see LocalDecider.install. (A state that must precede a
 * decision rides in the batch that makes it: ShardTask.states.)
 */
export interface ShardStates {
  kind: 'setState';
  now: number;
  n: number;
  rows: Float64Array;
  /** 3 per row: algorithm code, L, P (ms), to spend what later batches admitted (src/shard/admissions.ts). */
  params?: Float64Array;
  /** The front had settled every batch (ShardTask.seq) up to this one when it computed the rows... */
  after?: number;
  /** ...and these after it (a synchronous call answered ahead of batches in flight: src/shard/admissions.ts). */
  settled?: number[];
}

/**
 * Keys to read (`peek`: reply n rows [found, w0, w1, lastSeen]) or forget (`remove`: reply the count held),
 * as n leg rows [hashLo, hashHi, limitId, 0]: the admin API's inspect and reset.
 */
export interface ShardKeys {
  kind: 'peek' | 'remove';
  n: number;
  legs: Float64Array;
}

/**
 * Limit ids no policy uses, to free (Kernel.purgeLimit at `now`); the reply holds, per id, how many keys
 * under it still carry information (0: freed on this shard).
 */
export interface ShardPurge {
  kind: 'purge';
  now: number;
  ids: number[];
}

/**
 * Everything a shard is asked through its worker's queue: a batch, states to install, keys to read or forget,
 * limit ids to free, its kernel's counters, or a start-up ping. Limits a reload adds go through the shard's
 * synchronous channel instead (ShardPool.installLimits), so that they are set before any check that names
 * them is sent, on either path.
 */
export type ShardRequest = ShardTask | ShardStates | ShardKeys | ShardPurge | { kind: 'stats' } | { kind: 'ping' };

/** Limits to add by id (a policy reload): ShardPool.installLimits. */
export type LimitsAdded = Array<{ id: number; limit: KernelLimit }>;

/** What a shard worker is built with (structured-cloned into each worker; the Module is not recompiled). */
export interface ShardInit {
  module: WebAssembly.Module;
  maxKeys: number;
  maxBatch: number;
  /** Kernel parameters by limit id (holes for ids not in use). */
  limits: Array<KernelLimit | null>;
  /**
   * The limits generation of {@link limits} (ShardPool.installLimits counts them): a worker started from them
   * decides no channel call while a newer generation is in force (src/shard/channel.ts). 0 at start-up.
   */
  limitsGen?: number;
  /** Room for limit ids (see Kernel's limitCapacity). */
  limitCapacity: number;
  /** Entries per sliding-log key (KernelOptions.logEntries). */
  logEntries?: number;
  /** The synchronous channels from the front threads to every shard (src/shard/channel.ts); shared, not copied. */
  channels?: ChannelMemory;
}

/** A limit as the kernel takes it: algorithm code, L (tokens per period), P (ms), B (tokens). */
export interface KernelLimit {
  algorithmCode: number;
  limit: number;
  periodMs: number;
  burst: number;
  /** A token bucket that takes over a key's consumed amount from the limit its state was made under. */
  carryOver?: boolean;
  /** A calendar window (algorithm code 4): the period whose window bounds the kernel is given. */
  calendar?: CalendarPeriod | null;
}
