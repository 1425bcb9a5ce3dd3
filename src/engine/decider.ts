/**
 * The contract between the front (the dispatcher, src/engine/front.ts) and the deciders, one per consistency
 * mode: `local` and `sync` decisions in the kernels (src/engine/deciders/local.ts; sync adds the write-behind
 * of src/engine/deciders/write-behind.ts), `strict` ones in the store (src/engine/deciders/strict.ts). A new
 * mode (issue #14's `lease`, the regions) is one more {@link Decider}, registered with the front by its
 * consistency (`FrontOptions.deciders`), with no change to the others.
 */
import type { Decision } from '../types/decision.js';
import type { SluiceError } from '../util/errors.js';
import type { PolicyRuntime } from './runtime.js';
import type { Batch } from './queue.js';
import type { PolicyCounters } from './shadow.js';

/**
 * Decides the checks of one consistency mode.
 *
 * The front queues a turn's checks, hashes every key in one kernel call, reads the clock once, and hands each
 * decider the checks whose policy has its mode (a policy runtime whose `stored` flag is false is decided by
 * the local decider; a stored one by the decider registered for its policy's `consistency`).
 *
 * Rules every decider keeps:
 * - settle check i of `b` exactly once, through `b.resolves[i]` or `b.rejects[i]` (rejects with a
 *   SluiceError naming the failure: SHARD_FAILED, STORE_FAILED...); a shadow policy's decision goes through
 *   {@link settle}, which counts it and admits;
 * - `b`'s arrays may be the turn's reused queue: a check answered after `decide` returns is copied first
 *   (`push` of src/engine/queue.ts), and counted in flight with {@link Flight.add} / {@link Flight.landed},
 *   so that the front's close() waits for it and its queue bound counts it;
 * - when the store fails, apply the policy's `onStoreError` through `storeFailure` (src/engine/failure.ts), the
 *   one failure rule: `open` / `closed` give a degraded decision, `local` hands the check to the local
 *   decider's {@link LocalFallback} as a `fallback` batch (decided by the kernel, marked degraded);
 * - allocate nothing per check on a path that decides in-thread (the local decider's), and call no user
 *   code (the clock is read by the front).
 */
export interface Decider {
  /** The consistency mode it decides: `local`, `strict`, `sync`, `lease`... (a policy's `consistency`). */
  readonly mode: string;
  /**
   * Decides every check of `b` at `now` (Unix ms, the limiter's clock, read once for the turn), settling each
   * now or later (see the interface's rules).
   */
  decide(b: Batch, now: number): void;
  /** The policy set changed (a reload): what the decider learned of the old one may not hold. Optional. */
  setRuntimes?(runtimes: ReadonlyMap<string, PolicyRuntime>): void;
  /**
   * Sends to the store now the checks it holds back to send with later ones (the strict decider's held call),
   * so that a store command issued next (an admin reset's delete) reaches the store after them. Optional.
   */
  sendHeld?(): void;
  /**
   * Decides one validated check at `now` when it can without waiting (a lease hit: from tokens held here),
   * else returns undefined, having settled nothing (the check then takes {@link decide}). Optional. The
   * front's synchronous path (Front.checkNow) uses it, so the HTTP front answers such a check inside uWS's
   * callback with shards too (uWS closes a connection whose pipelined request finds an answer pending).
   */
  decideNow?(rt: PolicyRuntime, key: string, cost: number, now: number): Decision | undefined;
}

/** Where a store-backed decider sends checks its policy decides locally when the store failed (`local`). */
export interface LocalFallback {
  /** Decides `b` (a `fallback` batch of its own) in the kernels, marking each decision degraded. */
  decide(b: Batch, now: number): void;
  /**
   * Seeds the kernel that will decide check i of `b` with state rows learned from the store: 6 numbers per
   * leg (hashLo, hashHi, limitId, w0, w1, lastSeen), before the check reaches it: this thread's kernel at once,
   * a shard's in the next decide()'s batch for that shard (set by its worker before it decides the batch; nothing
   * waits for the shard), so the key's local decisions, which all take that shard's queue, start from them. The
   * caller calls decide() with the check right after, in the same turn.
   * `rows` is read before this returns (copied if kept): the caller reuses it.
   */
  seed(b: Batch, i: number, rows: number[], now: number): void;
  /**
   * Which kernel decides check i of `b` now: a number that changes when that kernel is replaced (a shard's
   * worker lost: its table starts empty), so a key seeded once per stall is seeded again on the new one.
   */
  kernelOf(b: Batch, i: number): number;
}

/** Checks answered after their turn (a shard's reply, the store's): the front's close() waits for them. */
export class Flight {
  private n = 0;
  private drained: (() => void) | null = null;

  /** Checks in flight now. */
  get count(): number {
    return this.n;
  }

  add(n: number): void {
    this.n += n;
  }

  landed(n: number): void {
    this.n -= n;
    if (this.n === 0 && this.drained) this.drained();
  }

  /** Resolves once nothing is in flight. */
  idle(): Promise<void> {
    if (this.n === 0) return Promise.resolve();
    return new Promise<void>((r) => (this.drained = r));
  }
}

/**
 * Store-backed checks that the kernels may still decide (their policy's `onStoreError` is `local`: a store
 * failure hands them to the {@link LocalFallback}) and are not settled yet, by the policy set they were issued
 * under (its epoch: the front counts the sets it is given). Their runtimes name the limit ids of that set, so
 * the limiter frees no id a replaced set used until they are settled ({@link settledBefore}): a freed id may be
 * set again with other numbers, and such a check would then be decided under them.
 */
export class Fallbacks {
  /** The epoch of the set checks are issued under now. */
  epoch = 0;
  private readonly open = new Map<number, number>();
  private waiters: Array<{ before: number; resolve: () => void }> = [];

  /** Counts check i of `b` (issued now) until it is settled: wraps its resolve and reject. */
  track(b: Batch, i: number): void {
    const e = this.epoch;
    this.open.set(e, (this.open.get(e) ?? 0) + 1);
    const resolve = b.resolves[i];
    const reject = b.rejects[i];
    let counted = true;
    const done = (): void => {
      if (!counted) return;
      counted = false;
      this.settled(e);
    };
    b.resolves[i] = (d) => {
      done();
      resolve(d);
    };
    b.rejects[i] = (err) => {
      done();
      reject(err);
    };
  }

  /** Resolves once every check tracked under an epoch before `epoch` is settled. */
  settledBefore(epoch: number): Promise<void> {
    if (this.oldest() >= epoch) return Promise.resolve();
    return new Promise<void>((resolve) => this.waiters.push({ before: epoch, resolve }));
  }

  /** The oldest epoch with checks open (Infinity when none). */
  private oldest(): number {
    let min = Number.POSITIVE_INFINITY;
    for (const e of this.open.keys()) if (e < min) min = e;
    return min;
  }

  private settled(e: number): void {
    const left = this.open.get(e)! - 1;
    if (left > 0) {
      this.open.set(e, left);
      return;
    }
    this.open.delete(e);
    const oldest = this.oldest();
    const ready = this.waiters.filter((w) => oldest >= w.before);
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((w) => oldest < w.before);
    for (const w of ready) w.resolve();
  }
}

/** Settles check i of `b` with `d`: a shadow policy's decision is counted and becomes an admission. */
export function settle(counters: PolicyCounters, d: Decision | SluiceError, b: Batch, i: number, now: number): void {
  const rt = b.rts[i];
  if (d instanceof Error) b.rejects[i](d);
  else b.resolves[i](rt.shadow ? counters.shadowed(rt, d, now) : d);
}

/**
 * What the local decider tells the write-behind of a `sync` policy's check it admitted, and asks of it
 * (src/engine/deciders/write-behind.ts).
 */
export interface AdmissionLog {
  /** How stale the shared view is at `now`, in ms (a sync decision's `stalenessMs`). */
  staleness(now: number): number;
  /** Records check i of `b`'s admitted cost, decided on `shard` (−1: this thread). */
  record(b: Batch, i: number, shard: number): void;
}

/** Where merged states go back: the kernels that own the keys (the local decider). */
export interface StateInstaller {
  /**
   * Installs states, per shard (−1: this thread): `rows` 6 numbers per state (hashLo, hashHi, limitId, w0, w1,
   * lastSeen), `params` 3 per state (algorithm code, L, P).
   */
  install(byShard: Map<number, number[]>, paramsOf: Map<number, number[]>, now: number): Promise<void>;
}
