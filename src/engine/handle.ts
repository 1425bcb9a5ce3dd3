/**
 * The engine's internal interface: what this package's transports (src/server, src/grpc) may use of a limiter
 * beyond the public {@link Limiter} interface, so that `Limiter` plus {@link EngineHandle} is the whole
 * contract between a transport and the engine. Kept off the limiter object itself (no symbol-keyed property,
 * no cast): createLimiter binds a handle to the limiter it returns, and a transport asks {@link engineOf}.
 * A limiter of another make (a wrapper, a test double) has none, and the transport then goes through the
 * `Limiter` interface alone: same decisions, only slower.
 */
import type { CheckRequest, Decision } from '../types/decision.js';
import type { Limiter } from '../types.js';
import type { CheckBatch } from './batch.js';
import type { ShardPool } from '../shard/pool.js';
import type { FrontThreadSource } from '../shard/caller.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import type { DelayPlaces } from './delay.js';

/** A limiter's fast paths and parts, for the transports and tests of this package; not a public API. */
export interface EngineHandle {
  /**
   * Decides a check synchronously when it can be (Front.checkNow): the decision, or undefined when the check
   * must be awaited through `check()` (a store-backed policy, say). Throws what `check()` would reject with.
   * The HTTP front answers inside uWS's callback with it; with shards, a local policy's check is decided on
   * its shard through the synchronous channel (src/shard/channel.ts), so pipelined requests are answered in
   * order. Null for a limiter that has no synchronous path.
   */
  readonly checkNow: ((req: CheckRequest) => Decision | undefined) | null;
  /**
   * Decides checks given as parallel arrays (Front.checkBatch, see src/engine/batch.ts): `/v1/stream`'s
   * binary frames go through it, with no promise or object per check on the common path.
   */
  readonly checkBatch: CheckBatch;
  /** The shard workers (null with shards 0): for the fault tests that kill them, not for transports. */
  readonly pool: ShardPool | null;
  /**
   * What extra HTTP front threads build on (src/server/threads.ts): the kernel module, the shards' channels,
   * the policy set in force with its limit ids, and the hooks a reload waits on. Null with shards 0.
   */
  readonly frontThreads: FrontThreadSource<CompiledPolicy> | null;
  /**
   * onLimit: delay's wait places (src/engine/delay.ts): a transport that holds a delayed answer frees its
   * place when the connection closes first (src/server/held.ts).
   */
  readonly delays: DelayPlaces;
}

const handles = new WeakMap<Limiter, EngineHandle>();

/**
 * Binds `handle` to `limiter` (createLimiter does, for the limiter it returns; a test wrapping a limiter may
 * bind the wrapper a handle of its own). Returns the limiter.
 */
export function bindEngine<L extends Limiter>(limiter: L, handle: EngineHandle): L {
  handles.set(limiter, handle);
  return limiter;
}

/** The handle bound to `limiter`, or undefined for a limiter createLimiter did not make. */
export function engineOf(limiter: Limiter): EngineHandle | undefined {
  return handles.get(limiter);
}
