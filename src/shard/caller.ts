/**
 * The shards as an extra front thread sees them (src/server/threads.ts): the limiter's pool runs on the main
 * thread; this thread reaches each shard through its own synchronous channel (src/shard/channel.ts), so its
 * checks are decided by the same kernels, in the same order as everyone else's, and decisions stay exact with
 * any number of front threads. It stands in for the ShardPool in this thread's Front: only the calls a front
 * with local policies makes are here (no Redis, no admin: those stay on the main thread).
 */
import { CHANNEL_TIMEOUT_MS, channelError, ShardLink, type ChannelMemory } from './channel.js';
import { GROUP_SHIFT, LEG_IN, LEG_OUT, type ShardTask } from './protocol.js';
import { shardFailed } from '../util/errors.js';

/**
 * Internal option of createLimiter (InternalLimiterOptions.frontThread): build the limiter of an extra front
 * thread, whose shards are reached through `channels` as thread number `thread`.
 */
export interface FrontThreadLink {
  channels: ChannelMemory;
  thread: number;
}

/**
 * Internal: what a limiter with shards hands to extra front threads (EngineHandle.frontThreads): the compiled
 * kernel, the channels, and the limit ids of the policy set in force (a front thread's must match).
 */
/** `P`: the compiled policy type (src/config: a layer above this one). */
export interface FrontThreadSource<P = unknown> {
  module: WebAssembly.Module;
  channels: ChannelMemory;
  limitIds(): ReadonlyMap<string, readonly number[]>;
  /**
   * True when the limiter reads the wall clock (`Date.now`, its default): a front thread reads it too, and
   * hands its reading to the shard with each call. A clock of the caller's (a test's manual one) cannot be
   * shared with another thread.
   */
  wallClock: boolean;
  /** The set in force with its limit ids and their limits: what a front thread starts from. */
  current(): PolicySetUpdate<P>;
  /**
   * Main thread: registers a follower that every reload awaits, after the shards know the new limit ids and
   * before the reload resolves; a follower that throws fails the reload (the previous set is put back, on
   * this thread and the followers). Returns the function that removes it.
   */
  follow(f: PolicyFollower<P>): () => void;
  /**
   * A front thread: makes `set` (the main thread's set, with its limit ids) this limiter's set in force;
   * checks issued after the call are decided under it.
   */
  adopt(set: PolicySetUpdate<P>): void;
}

/** A policy set as the main thread hands it to its front threads: the compiled set and its limit ids. */
export interface PolicySetUpdate<P = unknown> {
  policies: ReadonlyMap<string, P>;
  ids: ReadonlyMap<string, readonly number[]>;
}
export type PolicyFollower<P = unknown> = (set: PolicySetUpdate<P>) => Promise<void>;

export class ShardCaller {
  private readonly links: ShardLink[];

  /** `thread`: this front thread's number (1, 2, ...; 0 is the main thread's). */
  constructor(mem: ChannelMemory, thread: number) {
    this.links = mem.byShard.map((_, s) => new ShardLink(mem, s, thread));
  }

  get size(): number {
    return this.links.length;
  }

  legsFor(s: number): Float64Array {
    return this.links[s].legs;
  }

  get maxCallLegs(): number {
    return this.links[0].maxLegs;
  }

  /** As ShardPool.callNow (the shard's state, down or not, is only known on the main thread: a dead one times out). */
  callNow(s: number, n: number, now: number, seq: number, ack: number): Float64Array {
    const link = this.links[s];
    const r = link.call(n, now, seq, ack, CHANNEL_TIMEOUT_MS);
    if (r === 'done') return link.out;
    throw channelError(s, r, 'deciding');
  }

  /** As ShardPool.kernelGeneration: a front thread does not see its shards' workers come and go (0). */
  kernelGeneration(): number {
    return 0;
  }

  /** A batch of a later turn (check() rather than checkNow()): decided now through the channel, in calls that fit. */
  async run(s: number, task: ShardTask): Promise<Float64Array> {
    // a front thread has no store, so none of its batches carries a seed (ShardTask.states: the shard's worker
    // sets them, on the pool's path); one that did would be decided without its states
    if (task.states !== undefined) throw shardFailed(`shard ${s}: a front thread's batch cannot carry key states`);
    const out = new Float64Array(task.n * LEG_OUT);
    const room = this.maxCallLegs;
    for (let at = 0; at < task.n;) {
      // calls end on a check's boundary: a group's first leg carries its length (≤ MAX_GROUP ≤ room)
      let n = 0;
      while (at + n < task.n) {
        const g = Math.max(1, Math.floor(task.legs[(at + n) * LEG_IN + 2] / GROUP_SHIFT));
        if (n + g > room) break;
        n += g;
      }
      this.links[s].legs.set(task.legs.subarray(at * LEG_IN, (at + n) * LEG_IN));
      out.set(this.callNow(s, n, task.now, task.seq ?? 0, task.ack ?? 0).subarray(0, n * LEG_OUT), at * LEG_OUT);
      at += n;
    }
    return out;
  }

  /** The main thread's limiter sets the limits on the shards before this thread adopts a set that uses them. */
  installLimits(): void {}

  /** The main thread's limiter reports the shards; this thread holds nothing of its own. */
  shardStates(): [] {
    return [];
  }

  async stats(): Promise<[]> {
    return [];
  }

  async close(): Promise<void> {}
}
