import type { CheckRequest, Decision } from '../types/decision.js';
import type { Kernel } from '../shard/kernel.js';
import type { ShardPool } from '../shard/pool.js';
import type { PolicyRuntime } from './runtime.js';
import type { Hasher } from '../keys/hasher.js';
import { keyOf } from '../keys/derive.js';
import { readClock } from './clock.js';
import { MAX_GROUP } from '../shard/protocol.js';
import { isSluiceError, closed, overloaded, shardFailed } from '../util/errors.js';
import type { Store } from '../store/contract.js';
import type { SyncUnmerged, SyncWriter } from '../store/sync.js';
import { PolicyCounters, type ShadowLogger } from './shadow.js';
import { ListStep } from './list-step.js';
import { ShadowStep } from './shadow-step.js';
import { BatchWait, DirectBatch, isDirect, keyLengthOk, type BatchInput, type BatchOutcomes } from './batch.js';
import { StrictCache } from './strict/cache.js';
import { DegradedCounts } from './degraded.js';
import { emptyBatch, push, TurnQueue, type Batch, type Reject, type Resolve } from './queue.js';
import { checkCost, policyOf, runtimeNamed } from './validate.js';
import { Fallbacks, Flight, type Decider, type LocalFallback } from './decider.js';
import { LocalDecider } from './deciders/local.js';
import { StrictDecider } from './deciders/strict.js';
import { WriteBehind } from './deciders/write-behind.js';
import { DEFAULT_MAX_DELAYED, DelayPlaces } from './delay.js';

const RESOLVED = Promise.resolve();

export interface FrontOptions {
  runtimes: Map<string, PolicyRuntime>;
  hasher: Hasher;
  /** The calling thread's kernel: it hashes keys, and with no pool, decides. */
  kernel: Kernel;
  pool: ShardPool | null;
  /** Where `strict` policies are decided and `sync` ones merged; null when no Redis is configured. */
  store: Store | null;
  /** Sync mode's merge interval, in ms. */
  syncIntervalMs?: number;
  clock: () => number;
  maxBatch: number;
  maxPending: number;
  /** Where shadow policies' would-deny lines go; none by default. */
  logger?: ShadowLogger | null;
  /** Strict keys whose last answer this instance keeps (over-limit cache, `local` seeding). Default 100,000. */
  strictCacheKeys?: number;
  /** onLimit: delay: most checks waiting (or in flight with a place) at once. Default {@link DEFAULT_MAX_DELAYED}. */
  maxDelayed?: number;
  /**
   * Deciders of more store-backed modes, by the `consistency` of the policies they decide (issue #14's
   * `lease`, say): a check whose runtime is `stored` goes to the one registered for its policy's consistency.
   * `strict` is registered by the front itself when there is a store.
   */
  deciders?: ReadonlyMap<string, Decider>;
}

/**
 * The front, a dispatcher: it takes checks (validate.ts), has allow and deny lists answer (list-step.ts),
 * queues the rest for this event-loop turn (queue.ts) with their shadow candidates (shadow-step.ts), and at
 * the turn's end hashes every key in one kernel call, reads the clock once, and hands each check to its
 * consistency mode's {@link Decider}: the local decider (deciders/local.ts, with the write-behind of
 * deciders/write-behind.ts for `sync`), the strict decider (deciders/strict.ts), or one registered in
 * {@link FrontOptions.deciders}. A batch also goes out early when it reaches the kernel's batch size (or the
 * store's checksPerCall store-backed checks).
 */
export class Front {
  private readonly o: FrontOptions;
  /** This turn's checks. */
  private readonly q: TurnQueue;
  private scheduled = false;
  private closed = false;
  private readonly flushNow = (): void => this.flush();
  /** Checks answered after their turn (shards, the store). */
  private readonly flight = new Flight();
  /** Store-backed checks the kernels may yet decide, by the set they were issued under (see {@link settledBefore}). */
  private readonly fallbacks = new Fallbacks();
  /** Decides `local` and `sync` checks, and store-backed ones that fall back under `local`. */
  private readonly local: LocalDecider;
  /** The deciders of store-backed modes, by consistency (`strict`, and those given in FrontOptions.deciders). */
  private readonly routed = new Map<string, Decider>();
  /** Whether some store-backed mode's decider can decide a check now (Decider.decideNow): else checkNow skips them at once. */
  private readonly decidesStoredNow: boolean;
  /** Store-backed checks that fill one store call (Store.checksPerCall); a batch that has them is flushed. */
  private readonly checksPerCall: number;
  /** Write-behind for `sync` policies; null until a policy set has one. */
  private sync: WriteBehind | null = null;
  /** The policies checks are decided under; replaced whole by {@link setRuntimes}. */
  private runtimes: Map<string, PolicyRuntime>;
  /** Shadow evaluations and list matches, by policy name. */
  readonly counters: PolicyCounters;
  /** Answers checks on an allow or deny list (list-step.ts). */
  private readonly lists: ListStep;
  /** Queues the shadow candidates of a live policy's check (shadow-step.ts). */
  private readonly shadows: ShadowStep;
  /** What this instance knows of strict keys from Redis's answers; null without a store. */
  readonly strict: StrictCache | null;
  /** Decisions not made by Redis, by policy and rule. */
  readonly degraded = new DegradedCounts();
  /** onLimit: delay's wait places (src/engine/delay.ts). */
  readonly delays: DelayPlaces;

  constructor(o: FrontOptions) {
    this.o = o;
    this.delays = new DelayPlaces(o.maxDelayed ?? DEFAULT_MAX_DELAYED, o.clock);
    this.checksPerCall = o.store?.checksPerCall ?? Number.POSITIVE_INFINITY;
    this.counters = new PolicyCounters(o.logger ?? null);
    this.q = new TurnQueue(o.hasher);
    this.shadows = new ShadowStep({ queue: this.q, hasher: o.hasher, maxBatch: o.maxBatch, counters: this.counters, clock: o.clock, flush: this.flushNow });
    this.lists = new ListStep({ counters: this.counters, clock: o.clock, shadows: this.shadows, schedule: () => this.schedule() });
    this.local = new LocalDecider({ kernel: o.kernel, pool: o.pool, counters: this.counters, flight: this.flight, degraded: this.degraded });
    // on the wall clock, a monotonic one tells the cache the wall clock's steps (a clock of the caller's is as given)
    this.strict = o.store === null ? null : new StrictCache(o.strictCacheKeys ?? 100_000, o.store.useRedisTime, o.store.overLimitCache,
      o.store.oneClock, o.clock === Date.now ? () => performance.now() : null);
    if (o.store !== null) {
      // a new connection may be to a Redis that restarted without its data, or to another server (a failover):
      // its denials no longer hold, nor the clock offsets measured
      o.store.onConnect(() => this.strict!.reconnected());
      this.routed.set('strict', new StrictDecider({
        store: o.store, cache: this.strict!, clock: o.clock, counters: this.counters, degraded: this.degraded, flight: this.flight, local: this.local,
      }));
    }
    for (const [mode, d] of o.deciders ?? []) this.routed.set(mode, d);
    this.decidesStoredNow = [...this.routed.values()].some((d) => d.decideNow !== undefined);
    this.runtimes = o.runtimes;
    this.declareDegraded();
    this.startSync();
  }

  /** Store-backed policies' degraded counts exist from the start, at 0 (DegradedCounts.declare). */
  private declareDegraded(): void {
    if (this.o.store === null) return;
    for (const rt of this.runtimes.values()) if (rt.stored) this.degraded.declare(rt.policy.name);
  }

  /** Where a store-backed mode's checks go when the store failed and their policy says `local` (the kernels). */
  get localFallback(): LocalFallback {
    return this.local;
  }

  /**
   * Decides checks issued from now on under `runtimes` (a policy reload). A check is bound to its policy's
   * runtime when it is issued, so each check runs whole under the old set or whole under the new one; checks
   * already queued keep the old runtime, whose limit ids stay valid on every kernel.
   */
  setRuntimes(runtimes: Map<string, PolicyRuntime>): void {
    this.runtimes = runtimes;
    this.fallbacks.epoch++;
    for (const d of this.routed.values()) d.setRuntimes?.(runtimes);
    this.declareDegraded();
    this.startSync();
  }

  private startSync(): void {
    if (this.sync !== null || this.o.store === null || ![...this.runtimes.values()].some((rt) => rt.synced)) return;
    const log = this.o.logger as { warn?: (obj: object, msg: string) => void; info(obj: object, msg: string): void } | null | undefined;
    const warn = log ? (obj: object, msg: string): void => (log.warn ?? log.info).call(log, obj, msg) : undefined;
    this.sync = new WriteBehind({ store: this.o.store, clock: this.o.clock, intervalMs: this.o.syncIntervalMs, strict: this.strict, warn }, this.local);
    this.local.writeBehind = this.sync;
  }

  /** Write-behind counters, when there are sync policies. */
  syncStats(): ReturnType<SyncWriter['stats']> | null {
    return this.sync?.writer.stats() ?? null;
  }

  /**
   * Sends the store-backed checks a decider holds back (Decider.sendHeld): an admin reset calls it before its
   * delete, so that a check made before the reset is counted before the delete, not after it; an inspect before
   * its reads, so that it sees such a check.
   */
  sendHeld(): void {
    for (const d of this.routed.values()) d.sendHeld?.();
  }

  /** Policy sets given so far ({@link setRuntimes} counts them): the epoch of the set in force. */
  get epoch(): number {
    return this.fallbacks.epoch;
  }

  /**
   * Resolves once every store-backed check issued under a set before epoch `epoch` that the kernels could still
   * decide (onStoreError `local`) is settled: until then, the limit ids of those sets stay in use.
   */
  settledBefore(epoch: number): Promise<void> {
    return this.fallbacks.settledBefore(epoch);
  }

  /** The policies checks are decided under now (inspect and reset find keys as checks do: src/engine/inspect.ts). */
  get policyRuntimes(): ReadonlyMap<string, PolicyRuntime> {
    return this.runtimes;
  }

  /** The write-behind of sync policies, or null (inspect reports its staleness, reset drops a key's deltas). */
  get syncWriter(): SyncWriter | null {
    return this.sync?.writer ?? null;
  }

  /**
   * Has the next sync merge read `key`'s state of sync policy `rt` from Redis and install it here (another
   * instance reset it: WriteBehind.refresh); nothing without sync policies.
   */
  refreshSync(rt: PolicyRuntime, key: string, lo: number, hi: number, shard: number): void {
    this.sync?.refresh(rt, key, lo, hi, shard);
  }

  get pending(): number {
    return this.q.length + this.flight.count;
  }

  /** Queues one check; validation errors reject at once and name the field. */
  check(req: CheckRequest): Promise<Decision> {
    return this.submit(req, false) as Promise<Decision>;
  }

  /**
   * Decides one check at once when it can be decided now (a policy not decided in Redis: on this thread's
   * kernel, or with shards on the owning shard through its synchronous channel, LocalDecider.dispatchNow;
   * a store-backed one whose decider can without waiting, Decider.decideNow: a lease hit), together with
   * whatever this turn has queued, in order, in one batch. Returns undefined when it cannot;
   * use check(). The HTTP front answers a request this way inside uWS's callback: no promise, no microtask,
   * no abort handler (and uWS, which drops a connection whose pipelined request arrives while an answer is
   * pending, sees every answer in time).
   * @throws SluiceError what check() would reject with.
   */
  checkNow(req: CheckRequest): Decision | undefined {
    return this.submit(req, true) as Decision | undefined;
  }

  /** The chunk checkBatch() decides on this thread's kernel (made on first use; no shard pool only). */
  private direct: DirectBatch | null = null;

  /**
   * Decides checks [from, to) of `src` in order, writing check i's outcome into `out` at i − from: the batch
   * path of a binary `/v1/stream` frame (the limiter's EngineHandle.checkBatch, src/engine/handle.ts). With no shard pool, a check on a local
   * policy with no shadows and no sync bookkeeping goes to the kernel in a chunk, from the arrays to the
   * kernel's input and from its output rows to `out`, with no promise, object or closure per check. Every
   * other check is queued as check() queues it (one closure for its outcome) and decided with the turn's
   * batch: before this returns when nothing of it leaves the thread. Checks queued before the call are decided
   * before its checks. Errors (validation, overload, the clock, a failed kernel, shard or store) go to `out`
   * per check, as check() would reject them.
   * @returns null when every outcome is written, else one promise for the call, resolved once they all are.
   */
  checkBatch(src: BatchInput, from: number, to: number, out: BatchOutcomes): Promise<void> | null {
    const here = this.o.pool === null;
    const chunk = here ? (this.direct ??= new DirectBatch(this.o.kernel, this.o.hasher, this.o.maxBatch)) : null;
    let wait: BatchWait | null = null;
    if (here && this.q.length > 0) this.flush();
    const { policies, costs, keyBytes, keyAt, keyLen } = src;
    let lastName: unknown;
    let lastRt: PolicyRuntime | undefined;
    for (let i = from; i < to; i++) {
      const at = i - from;
      const name = policies[i];
      if (name !== lastName) {
        lastName = name;
        lastRt = typeof name === 'string' ? this.runtimes.get(name) : undefined;
      }
      let rt = lastRt;
      /** The key as a string, when the check needs one (else the kernel takes its bytes). */
      let key: string | null = null;
      let cost: number;
      let direct: boolean;
      try {
        if (this.closed) throw closed();
        if (rt === undefined) rt = runtimeNamed(this.runtimes, name); // throws the field's error
        direct = chunk !== null && isDirect(rt);
        // the open chunk holds the hasher: decide it before anything else may queue a check
        if (!direct && chunk !== null && chunk.n > 0) chunk.decide(out);
        cost = checkCost(costs[i]);
        if (!direct || rt.lists !== null || !keyLengthOk(keyLen[i])) key = keyOf(rt.policy, src.key(i), undefined);
        if (rt.lists !== null) {
          const d = this.lists.answer(rt, key!, cost);
          if (d !== null) {
            out.put(at, d);
            continue;
          }
        }
        if (this.pending + (chunk === null ? 0 : chunk.n) >= this.o.maxPending) {
          throw overloaded(`more than ${this.o.maxPending} checks pending`);
        }
        if (direct && chunk!.n === 0) {
          // checks queued so far go first; then the chunk's clock, read once before its first key
          if (this.q.length > 0) this.flush();
          chunk!.now = readClock(this.o.clock);
          if (this.q.length > 0) this.flush();
        }
      } catch (e) {
        out.fail(at, e as Error);
        continue;
      }
      if (direct) {
        const full = key === null ? chunk!.addBytes(rt!, keyBytes, keyAt[i], keyLen[i], cost, at, MAX_GROUP)
          : chunk!.add(rt!, key, cost, at, MAX_GROUP);
        if (full) chunk!.decide(out);
        continue;
      }
      const w = (wait ??= new BatchWait());
      w.left++;
      const settle = (x: Decision | Error): void => {
        out.settle(at, x);
        w.settled();
      };
      const use = this.delays.reserve(rt!);
      this.q.add(use, key!, cost);
      this.q.resolves.push(settle);
      this.q.rejects.push(settle);
      if (use !== rt) this.delays.track(this.q.resolves, this.q.rejects);
      if (rt!.shadows !== null) this.shadows.add(rt!, key!, cost);
      this.schedule();
    }
    if (chunk !== null && chunk.n > 0) chunk.decide(out);
    if (here && this.q.length > 0) this.flush();
    if (wait === null || wait.left === 0) return null;
    const w = wait;
    return new Promise<void>((resolve) => (w.done = resolve));
  }

  /** check() (`now` false) or checkNow(). */
  private submit(req: CheckRequest, now: boolean): Promise<Decision> | Decision | undefined {
    let rt: PolicyRuntime;
    let key: string;
    let cost: number;
    try {
      if (this.closed) throw closed();
      rt = policyOf(this.runtimes, req, 'check');
      // a store-backed check is decided now only by a decider that can without waiting (lease hits)
      if (now && rt.stored && (!this.decidesStoredNow || rt.delayed !== null || this.routed.get(rt.policy.consistency)!.decideNow === undefined)) return undefined;
      // read once: a getter must not hand the kernel a value other than the one validated
      cost = checkCost((req as { cost?: unknown }).cost);
      key = keyOf(rt.policy, req.key, req.descriptors);
      // lists answer before any kernel or store work (and before the queue bound: they cost nothing)
      if (rt.lists !== null) {
        const d = this.lists.answer(rt, key, cost);
        if (d !== null) return now ? d : Promise.resolve(d);
      }
      if (this.pending >= this.o.maxPending) {
        throw overloaded(`more than ${this.o.maxPending} checks pending`);
      }
    } catch (e) {
      if (now) throw e;
      return Promise.reject(e);
    }
    if (now && rt.stored) return this.storedNow(rt, key, cost);
    const use = this.delays.reserve(rt);
    this.q.add(use, key, cost);
    if (now) {
      this.q.resolves.push(this.tookNow);
      this.q.rejects.push(this.failedNow);
      if (use !== rt) this.delays.track(this.q.resolves, this.q.rejects);
      if (rt.shadows !== null) this.shadows.add(rt, key, cost);
      this.local.now = true;
      try {
        this.flush();
      } finally {
        this.local.now = false;
      }
      const d = this.nowDecision;
      const e = this.nowError;
      this.nowDecision = null;
      this.nowError = null;
      if (e !== null) throw e;
      return d!;
    }
    const decision = new Promise<Decision>(this.enqueue);
    if (use !== rt) this.delays.track(this.q.resolves, this.q.rejects);
    if (rt.shadows !== null) this.shadows.add(rt, key, cost);
    this.schedule();
    return decision;
  }

  /**
   * checkNow() of a store-backed check (see {@link Decider.decideNow}): after this turn's queued checks (so a
   * key's checks keep their order), decided by its mode's decider if it can without waiting; undefined if not.
   */
  private storedNow(rt: PolicyRuntime, key: string, cost: number): Decision | undefined {
    if (this.q.length > 0) this.flush();
    const d = this.routed.get(rt.policy.consistency)!.decideNow!(rt, key, cost, readClock(this.o.clock));
    if (d !== undefined && rt.shadows !== null) {
      this.shadows.add(rt, key, cost);
      this.schedule();
    }
    return d;
  }

  /** Where the flush inside checkNow() leaves its check's outcome (settling it runs no other code). */
  private nowDecision: Decision | null = null;
  private nowError: Error | null = null;
  private readonly tookNow = (d: Decision): void => {
    this.nowDecision = d;
  };
  private readonly failedNow = (e: Error): void => {
    this.nowError = e;
  };

  /** Flushes now when the batch is full, else makes sure a flush is scheduled. */
  private schedule(): void {
    if (this.o.hasher.full || this.q.legs + MAX_GROUP > this.o.maxBatch || this.q.routed >= this.checksPerCall) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      // In-thread decisions are answered before this turn ends: a caller's synchronous burst still forms
      // one batch, and uWS, which drops a connection whose pipelined request arrives while an earlier
      // response is pending, sees every answer in time. Shards batch a whole event-loop turn instead.
      // (A resolved promise's then(): queueMicrotask costs twice as much, an AsyncResource per call.)
      if (this.o.pool === null) void RESOLVED.then(this.flushNow);
      else setImmediate(this.flushNow);
    }
  }

  /** The promise executor of every check: one shared function, so a check allocates no closure of its own. */
  private readonly enqueue = (resolve: Resolve, reject: Reject): void => {
    this.q.resolves.push(resolve);
    this.q.rejects.push(reject);
  };

  /** Decides everything queued. Safe to call at any time; a no-op when nothing is queued. */
  flush(): void {
    this.scheduled = false;
    const q = this.q;
    if (q.length === 0) return;
    try {
      // the clock is the caller's code: read it before counting, so a check it issues joins this batch
      const now = readClock(this.o.clock);
      this.o.hasher.run();
      const all = q.batch(this.o.kernel.hashOut);
      if (q.routed === 0) this.local.decide(all, now);
      else this.split(all, now);
    } catch (e) {
      const err = isSluiceError(e) ? e : shardFailed((e as Error).message);
      for (const r of q.rejects) r(err);
    } finally {
      // The queues are reused: nothing above keeps them, and settling a promise runs no code synchronously.
      q.clear();
    }
  }

  /** Hands each store-backed check of the turn to its mode's decider, and decides the rest locally. */
  private split(all: Batch, now: number): void {
    // a check whose store may fail it over to the kernels names this set's limit ids until it is settled
    for (let i = 0; i < all.n; i++) if (all.rts[i].stored && all.rts[i].onStoreError === 'local') this.fallbacks.track(all, i);
    // a turn of strict checks only: the strict decider takes the turn's batch uncopied (it copies what it keeps)
    if (all.n === this.q.routed) {
      let i = 0;
      while (i < all.n && all.rts[i].policy.consistency === 'strict') i++;
      if (i === all.n) return this.routed.get('strict')!.decide(all, now);
    }
    const local = emptyBatch();
    const parts = new Map<Decider, Batch>();
    for (let i = 0; i < all.n; i++) {
      const rt = all.rts[i];
      if (!rt.stored) {
        push(local, all, i);
        continue;
      }
      const d = this.routed.get(rt.policy.consistency)!;
      let part = parts.get(d);
      if (part === undefined) parts.set(d, (part = emptyBatch()));
      push(part, all, i);
    }
    if (local.n > 0) this.local.decide(local, now);
    for (const [d, part] of parts) d.decide(part, now);
  }

  /**
   * Decides what is queued, waits for batches in flight, and refuses checks from then on; then merges the
   * sync deltas, retrying until `drainMs` (ms) have passed since the call (SyncWriter.close).
   * @returns what could not be merged (zeros without sync policies)
   */
  async close(drainMs?: number): Promise<SyncUnmerged> {
    const start = Date.now();
    this.flush();
    this.closed = true;
    await this.flight.idle();
    if (this.sync === null) return { keys: 0, tokens: 0 };
    return this.sync.close(drainMs === undefined ? undefined : Math.max(0, drainMs - (Date.now() - start)));
  }
}
