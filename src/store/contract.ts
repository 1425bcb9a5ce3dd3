/**
 * The store contract: what the engine, the key admin (inspect and reset) and the reloader may ask of shared
 * state. The Redis store (src/store/redis.ts: one server, Sentinel or Cluster) and the in-memory store
 * (src/store/memory.ts: the same scripts' arithmetic, in this process) implement it; only the
 * composition root (createLimiter in src/limiter.ts, `sluice serve` in src/cli/serve.ts) builds one, and
 * nothing outside src/store sees the Redis client.
 *
 * Units: times are Unix-epoch ms; `args` rows are the numbers lua/check.lua and lua/sync.lua read (see each
 * method). Every call that reaches Redis counts in {@link Store.stats} and rejects when Redis fails, times out
 * or the circuit breaker is open; the caller applies the policy's `onStoreError` (src/engine/failure.ts).
 */
import type { BreakerState } from './breaker.js';

/** Failed store calls by kind; they add up to `storeErrors`. */
export interface StoreFailures {
  /** Calls that got no answer within `timeoutMs` (a frozen or overloaded Redis, a lost network). */
  timeouts: number;
  /** Calls Redis answered with an error about the call: the script failed (WRONGTYPE on a key it reads, a script error). */
  scriptErrors: number;
  /**
   * Calls Redis answered with an error about itself: it cannot serve now (OOM, BUSY, LOADING, READONLY,
   * MASTERDOWN, CLUSTERDOWN, TRYAGAIN, MISCONF, NOREPLICAS). They count toward opening the circuit breaker.
   */
  unavailable: number;
  /** Calls that could not be sent or lost their connection (Redis down, restarting, not yet connected). */
  connectionErrors: number;
  /** Calls not made because the circuit breaker was open. */
  breakerRejections: number;
}

/** Script call durations (decisions and merges, failed ones included): counts per bucket, +Inf last. */
export interface StoreLatency {
  /** Upper bounds of the buckets, in seconds. */
  bounds: readonly number[];
  counts: number[];
  sumSeconds: number;
}

/** A store's counters (the limiter's `stats().store`, without the engine's parts). */
export type StoreStats = {
  storeErrors: number;
  breaker: BreakerState;
  connected: boolean;
  latency: StoreLatency;
  /** Calls answered after they had timed out (their script ran late), and the tokens they spent. */
  lateCalls: number;
  lateSpentTokens: number;
} & StoreFailures;

/** A sync merge's options: the ids it was split from (lua/sync.lua), and a cap on its deadline in ms. */
export interface MergeOptions {
  parents?: readonly string[];
  maxMs?: number;
}

/**
 * One pub/sub channel opened on a store ({@link Store.channel}). Messages published while the store is
 * away fail (no offline queue); {@link onReady} tells when publishing works again. The subscription is
 * made again after every reconnect.
 */
export interface StoreChannel {
  /** Resolves once subscribed; rejects if the subscription failed (it is still retried on reconnect). */
  readonly subscribed: Promise<void>;
  /**
   * Publishes `message`; resolves to the number of subscribers that received it, rejects when the store is away.
   * With `keep`, the message is also kept as the channel's latest for `keep.ms` (ms), for
   * {@link onResubscribed}, written in the same atomic step just before the publish, unless the message kept
   * already comes later by (`order`, then `tie` compared byte by byte; the caller's measure): then that one stays.
   */
  publish(message: string, keep?: { ms: number; order: number; tie: string }): Promise<number>;
  /** Calls `fn` each time publishing becomes possible again (a (re)connection). */
  onReady(fn: () => void): void;
  /**
   * Calls `fn` each time the subscription is made again after the subscriber lost its connection (not on the
   * first subscription), with the message kept on the channel (`publish` with `keep`: the highest `order`
   * published within its `ms`; null: none or expired). The kept message is read after the new subscription is confirmed, so a message published while
   * the subscriber was away is either that one (or older than it) or reaches `onMessage`: none is missed.
   */
  onResubscribed(fn: (kept: string | null) => void): void;
  /** Unsubscribes and closes the channel's connections, within a bounded wait even if the store is frozen. */
  close(): Promise<void>;
}

/**
 * What the reloader needs to announce policy sets and hear those of other instances (src/reload/), and the
 * engine to tell other instances of key resets (src/engine/reset-channel.ts): one channel each.
 */
export interface PubSub {
  /**
   * Opens `name` for publishing and subscribes to it; `onMessage` receives each message published on it (by
   * any instance, this one included).
   */
  channel(name: string, onMessage: (message: string) => void): StoreChannel;
}

/** A key's raw values, for inspect: each key's stored bytes (null: absent), in the order asked. */
export type StoredValues = Array<Buffer | null>;

/**
 * Added to a leg's algorithm code (Store.decideWide `args`) by a caller that knows the leg is a check of one
 * leg and that no other leg of the batch names its key (src/engine/deciders/strict.ts). lua/check.lua (UNIQUE)
 * then decides it without the bookkeeping that lets later legs of the call see a key's new state and queues
 * its write as it goes: ~2.8 k of ~31 k Redis instructions per decision (callgrind: README, Redis section). An
 * unmarked leg is decided the same, through that bookkeeping. Algorithm codes are below it.
 */
export const UNIQUE_KEY = 16;

/** lua/concurrency.lua's ops (Store.concurrency `args[0]`): acquire a lease, release one. */
export const CONCURRENCY_ACQUIRE = 1;
export const CONCURRENCY_RELEASE = 2;

/**
 * Shared state of the limiter's `strict` and `sync` policies.
 *
 * Keys are full store keys (src/keys/store-key.ts). `guardKey`: the key of a guarded policy's guard leg (the
 * last of its group) when the keys belong to a guarded policy, else null: a Redis Cluster stores such keys in
 * the guard's hash slot (src/store/slots.ts), so a plain read or delete must look there too.
 */
export interface Store extends PubSub {
  /** Prefix of every key the store writes (`sluice:` by default). */
  readonly prefix: string;
  /** True when decisions use the store's clock (Redis TIME), false when the limiter's. */
  readonly useRedisTime: boolean;
  /**
   * Whether every key is decided on one server's clock: true for a single Redis (or Sentinel's master), false
   * for a Redis Cluster, whose masters' clocks may differ. The over-limit cache (src/engine/strict/redis-clock.ts)
   * follows the store's clock as every call lately measured it only when it is one.
   */
  readonly oneClock: boolean;
  /** Whether the engine may answer checks the store is known to deny without calling it (src/engine/strict/over-limit.ts). */
  readonly overLimitCache: boolean;
  /** True once connected. */
  readonly ready: boolean;
  /** Connected and not failing: its circuit breaker is closed (calls are made, not skipped). */
  readonly available: boolean;
  /**
   * Store-backed checks per call when more are queued: the engine flushes a turn's checks in calls of this
   * many, so the store can run one while the next is built (a pipeline, not client and store taking turns).
   */
  readonly checksPerCall: number;
  /**
   * Script calls the engine keeps in flight by splitting a turn's strict checks (into calls of at least 16)
   * while fewer are out: 1 sends a turn as one call.
   */
  readonly pipelineCalls: number;
  /**
   * Strict calls of fewer checks than this, made while another call is in flight, wait until a call answers
   * (or until they have this many) and go out as one: Nagle's rule, for a store whose every call has a fixed
   * price on both sides (a socket write and read, waking the other). 0: each call goes out at once.
   */
  readonly holdUnder: number;
  /**
   * The fewest strict checks a turn must bring for its small call to be held ({@link holdUnder}): a front with
   * fewer checks at a time sends each call at once.
   */
  readonly holdTurn: number;

  /**
   * Strict mode: decides a batch of legs atomically (lua/check.lua). `args` holds 6 numbers per leg (algorithm
   * code, L, P, B, cost, group length on a group's first leg else 0); the algorithm code + {@link UNIQUE_KEY}
   * on a check of one leg says no other leg of the batch names its key. Resolves to {@link LEG_WIDE} numbers
   * per leg (src/store/reply.ts): code, remaining, resetAfterMs, retryAfterMs, the store time of the
   * decision, and for a denied check's legs the state it was decided on. Legs of a Cluster slot whose call
   * failed while others answered, or whose state is unreadable, come back as NaN rows (the failure rule).
   * `wire`, when given, holds the same keys as RESP bytes (src/store/key-wire.ts), in order, any number of
   * keys per element: a store that writes the request itself may copy them instead of encoding `keys`.
   * `heldSince`, for a call that was held ({@link holdUnder}): performance.now() when its first check was held.
   * The call's deadline counts from then, not from when it is sent: a check held while the connection was
   * already silent is answered within the timeout of that silence, as it would have been if sent at once.
   */
  decideWide(keys: string[], args: number[], nowMs: number, wire?: readonly Uint8Array[], heldSince?: number): Promise<number[]>;

  /** {@link decideWide} with only the first 4 numbers per leg (code, remaining, resetAfterMs, retryAfterMs). */
  decide(keys: string[], args: number[], nowMs: number): Promise<number[]>;

  /**
   * Sync mode (write-behind): adds each key's delta (`args`: 5 numbers per key: algorithm, L, P, B, delta)
   * to the shared state and resolves to the merged states, 3 numbers per key (w0, w1, lastSeen). Idempotent
   * by `batchId` (and its parents'): a retry of a merge that ran late adds nothing.
   */
  merge(keys: string[], args: number[], nowMs: number, batchId: string, o?: MergeOptions): Promise<number[]>;

  /** A merge call's deadline for `n` keys, in ms. */
  readonly mergeDeadlineMs: (n: number) => number;

  /** Inspect: the raw stored values of `keys` (no decision, nothing changed). */
  read(keys: readonly string[], guardKey: string | null): Promise<StoredValues>;

  /** Reset: deletes `keys` (and, in a Cluster, their guard-slot copies); resolves to how many existed. */
  remove(keys: readonly string[], guardKey: string | null): Promise<number>;

  /** The store's clock now (Redis TIME), in Unix-epoch ms. */
  clock(): Promise<number>;

  /**
   * Calls `fn` each time the connection (re)opens, and on a Redis Cluster each time a master's connection is
   * lost (the Cluster as a whole stays up meanwhile): what was learned from the store may no longer hold.
   */
  onConnect(fn: () => void): void;

  /** Waits until connected, at most `ms`; resolves whether or not it connected. */
  connected(ms: number): Promise<boolean>;

  stats(): StoreStats;

  /** Closes the store's connections (the channels opened on it close on their own {@link StoreChannel.close}). */
  close(): Promise<void>;

  /**
   * Concurrency policies (`algorithm: concurrency`, strict; src/engine/leases.ts): runs lua/concurrency.lua on
   * one key, a sorted set of lease ids scored by expiry. `args` = op ({@link CONCURRENCY_ACQUIRE} or
   * {@link CONCURRENCY_RELEASE}), lease id (12 hex
   * digits), limit, TTL ms. Resolves to acquire: code (0 allowed, 1 denied, 2 never), remaining,
   * retryAfterMs, time; release: 1 held (removed) / 0 not, remaining, time. Optional: a store without it
   * answers every strict acquire by the policy's onStoreError, and every release with STORE_FAILED.
   */
  concurrency?(key: string, args: Array<string | number>, nowMs: number): Promise<number[]>;

  // ------------------------------------------------------------------------------------------------------
  // Lease mode (issue #14): the calls of the lease decider go here, beside decide and merge:
  //   acquire(keys, args, nowMs): a share of each key's budget, reserved in the store for a lease period;
  //   settle(keys, args, nowMs): returns what a lease did not spend and renews or ends it.
  // They are optional until a store implements them; the lease decider checks for them at start.
  // ------------------------------------------------------------------------------------------------------
}
