import type { CheckRequest, Decision } from '../types.js';
import type { Kernel } from '../shard/kernel.js';
import type { ShardPool } from '../shard/pool.js';
import { GUARD_KEY, writeLegHash, type PolicyRuntime } from './runtime.js';
import type { Hasher } from '../keys/hasher.js';
import { compose } from './decision.js';
import { keyOf, describe } from '../keys/derive.js';
import { readClock } from './clock.js';
import { shardOf } from '../shard/router.js';
import { GROUP_SHIFT, LEG_IN, MAX_GROUP, type ShardTask } from '../shard/protocol.js';
import { SluiceError, invalidArgument, isSluiceError, closed, overloaded, shardFailed, unknownPolicy } from '../util/errors.js';
import type { RedisStore } from '../store/redis.js';
import { storeKey } from '../keys/store-key.js';
import { degraded } from './degraded.js';
import { SyncWriter, type SyncLeg, type SyncUnmerged } from '../store/sync.js';
import { STATE_ROW } from '../shard/kernel.js';
import { listed } from './lists.js';
import { allowlisted, denylisted, PolicyCounters, type ShadowLogger } from './shadow.js';
import { BatchWait, DirectBatch, isDirect, keyLengthOk, type BatchInput, type BatchOutcomes } from './batch.js';
import { scriptBurst, scriptPeriod } from './calendar-args.js';
import { StrictCache, type Known } from './strict-cache.js';
import { LEG_WIDE } from '../store/reply.js';
import { DegradedCounts, markLocal } from './degraded.js';

const RESOLVED = Promise.resolve();

/**
 * Strict checks per script call when more are queued: the turn's checks go out in calls of this many, each
 * written to the socket as soon as it is full (the client does not auto-pipeline), so Redis runs one while
 * this thread still issues the next, and answers come back staggered (a pipeline, not client and Redis taking
 * turns). Each key's checks still reach Redis in order: one connection, answered in order. 64: smaller calls
 * cost Redis more per decision (measured: 16 a call, +25 % script time), larger ones pipeline less.
 */
const STORE_CHUNK = 64;

/**
 * The key of a limiter's `checkNow(req)` (internal, not part of the Limiter interface): {@link Front.checkNow}
 * for callers that can answer synchronously (the HTTP front).
 */
export const CHECK_NOW = Symbol.for('sluice.checkNow');

type Resolve = (d: Decision) => void;
type Reject = (e: Error) => void;

/** The resolve and reject of a candidate's internal check (shadowOf): its outcome is only counted. */
const IGNORE = (): void => {};

/**
 * Checks decided together, as parallel arrays; `hashes` holds each key's hash as (lo, hi) pairs: the
 * kernel's hash output for a fresh batch, a copy for checks that fall back from the store.
 */
interface Batch {
  n: number;
  rts: PolicyRuntime[];
  costs: number[];
  keys: string[];
  hashes: ArrayLike<number>;
  resolves: Resolve[];
  rejects: Reject[];
  /** Strict checks decided locally because Redis failed (the `local` rule): marked degraded. */
  fallback?: boolean;
}

export interface FrontOptions {
  runtimes: Map<string, PolicyRuntime>;
  hasher: Hasher;
  /** The calling thread's kernel: it hashes keys, and with no pool, decides. */
  kernel: Kernel;
  pool: ShardPool | null;
  /** Where `strict` policies are decided and `sync` ones merged; null when no Redis is configured. */
  store: RedisStore | null;
  /** Sync mode's merge interval, in ms. */
  syncIntervalMs?: number;
  clock: () => number;
  maxBatch: number;
  maxPending: number;
  /** Where shadow policies' would-deny lines go; none by default. */
  logger?: ShadowLogger | null;
  /** Strict keys whose last answer this instance keeps (over-limit cache, `local` seeding). Default 100,000. */
  strictCacheKeys?: number;
}

/**
 * The front: validates checks, queues them for this event-loop turn, and at the turn's end hashes every key
 * in one kernel call, reads the clock once, and sends one batch per shard (or decides in-thread with no
 * pool). A batch also goes out early when it reaches the kernel's batch size.
 */
export class Front {
  private readonly o: FrontOptions;
  private rts: PolicyRuntime[] = [];
  private costs: number[] = [];
  private keys: string[] = [];
  /** Checks queued for the store this turn. */
  private stored = 0;
  private resolves: Resolve[] = [];
  private rejects: Reject[] = [];
  private legs = 0;
  private scheduled = false;
  private inFlight = 0;
  private closed = false;
  private drained: (() => void) | null = null;
  private readonly flushNow = (): void => this.flush();

  /** Write-behind for `sync` policies; null until a policy set has one. */
  private sync: SyncWriter | null = null;
  /** A leg's hash, for the write-behind (reused: see record()). */
  private readonly legHash = new Float64Array(2);
  /** Numbers for the (policy, version) parts of Redis keys, and each runtime's per leg (see namespaces()). */
  private readonly nsIds = new Map<string, number>();
  private readonly legNs = new WeakMap<PolicyRuntime, Int32Array>();
  private nsRt: PolicyRuntime | null = null;
  private nsOfRt: Int32Array = new Int32Array(0);
  /** The policies checks are decided under; replaced whole by {@link setRuntimes}. */
  private runtimes: Map<string, PolicyRuntime>;
  /** Shadow evaluations and list matches, by policy name. */
  readonly counters: PolicyCounters;
  /** What this instance knows of strict keys from Redis's answers; null without a store. */
  readonly strict: StrictCache | null;
  /** Decisions not made by Redis, by policy and rule. */
  readonly degraded = new DegradedCounts();

  constructor(o: FrontOptions) {
    this.o = o;
    this.counters = new PolicyCounters(o.logger ?? null);
    this.strict = o.store === null ? null : new StrictCache(o.strictCacheKeys ?? 100_000, o.store.useRedisTime, o.store.overLimitCache);
    // a new connection may be to a Redis that restarted without its data: its denials no longer hold
    o.store?.onConnect(() => this.strict!.clearDenials());
    this.runtimes = o.runtimes;
    this.startSync();
  }

  /**
   * Decides checks issued from now on under `runtimes` (a policy reload). A check is bound to its policy's
   * runtime when it is issued, so each check runs whole under the old set or whole under the new one; checks
   * already queued keep the old runtime, whose limit ids stay valid on every kernel.
   */
  setRuntimes(runtimes: Map<string, PolicyRuntime>): void {
    this.runtimes = runtimes;
    this.strict?.clearDenials();
    this.startSync();
  }

  private startSync(): void {
    if (this.sync !== null || this.o.store === null || ![...this.runtimes.values()].some((rt) => rt.synced)) return;
    const log = this.o.logger as { warn?: (obj: object, msg: string) => void; info(obj: object, msg: string): void } | null | undefined;
    const warn = log ? (obj: object, msg: string): void => (log.warn ?? log.info).call(log, obj, msg) : undefined;
    this.sync = new SyncWriter(this.o.store, this.o.clock, (e, st, now) => this.install(e, st, now), { intervalMs: this.o.syncIntervalMs, warn });
  }

  /** Write-behind counters, when there are sync policies. */
  syncStats(): ReturnType<SyncWriter['stats']> | null {
    return this.sync?.stats() ?? null;
  }

  /** The policies checks are decided under now (inspect and reset find keys as checks do: src/engine/inspect.ts). */
  get policyRuntimes(): ReadonlyMap<string, PolicyRuntime> {
    return this.runtimes;
  }

  /** The write-behind of sync policies, or null (inspect reports its staleness, reset drops a key's deltas). */
  get syncWriter(): SyncWriter | null {
    return this.sync;
  }

  get pending(): number {
    return this.rts.length + this.inFlight;
  }

  /** Queues one check; validation errors reject at once and name the field. */
  check(req: CheckRequest): Promise<Decision> {
    return this.submit(req, false) as Promise<Decision>;
  }

  /**
   * Decides one check at once when it can be decided on this thread (no shard pool; a policy not decided in
   * Redis), together with whatever this turn has queued, in order, in one batch. Returns undefined when it
   * cannot; use check(). The HTTP front answers a request this way inside uWS's callback: no promise, no
   * microtask, no abort handler.
   * @throws SluiceError what check() would reject with.
   */
  checkNow(req: CheckRequest): Decision | undefined {
    // with shards: decided on the owning shard through its synchronous channel (dispatchNow), unless a sync
    // policy's batch is still unanswered there (its admissions must be settled in order: see dispatchNow)
    if (this.o.pool !== null && this.sync !== null && this.unsettled()) return undefined;
    return this.submit(req, true) as Decision | undefined;
  }

  /** The chunk checkBatch() decides on this thread's kernel (made on first use; no shard pool only). */
  private direct: DirectBatch | null = null;

  /**
   * Decides checks [from, to) of `src` in order, writing check i's outcome into `out` at i − from: the batch
   * path of a binary `/v1/stream` frame (the limiter's CHECK_BATCH). With no shard pool, a check on a local
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
    if (here && this.rts.length > 0) this.flush();
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
      const rt = lastRt;
      /** The key as a string, when the check needs one (else the kernel takes its bytes). */
      let key: string | null = null;
      let cost: number;
      let direct: boolean;
      try {
        if (this.closed) throw closed();
        if (typeof name !== 'string') throw invalidArgument('policy', `must be a string (got ${describe(name)})`);
        if (rt === undefined) throw unknownPolicy(name);
        direct = chunk !== null && isDirect(rt);
        // the open chunk holds the hasher: decide it before anything else may queue a check
        if (!direct && chunk !== null && chunk.n > 0) chunk.decide(out);
        cost = costs[i];
        if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0) {
          throw invalidArgument('cost', `must be a non-negative safe integer (got ${describe(cost)})`);
        }
        if (!direct || rt.lists !== null || !keyLengthOk(keyLen[i])) key = keyOf(rt.policy, src.key(i), undefined);
        if (rt.lists !== null) {
          const d = this.fromLists(rt, key!, cost);
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
          if (this.rts.length > 0) this.flush();
          chunk!.now = readClock(this.o.clock);
          if (this.rts.length > 0) this.flush();
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
      this.queue(rt!, key!, cost);
      this.resolves.push(settle);
      this.rejects.push(settle);
      if (rt!.shadows !== null) this.addShadows(rt!, key!, cost);
      this.schedule();
    }
    if (chunk !== null && chunk.n > 0) chunk.decide(out);
    if (here && this.rts.length > 0) this.flush();
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
      rt = this.policyOf(req);
      if (now && rt.stored) return undefined;
      // read once: a getter must not hand the kernel a value other than the one validated
      cost = (req as { cost?: unknown }).cost as number;
      if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0) {
        throw invalidArgument('cost', `must be a non-negative safe integer (got ${describe(cost)})`);
      }
      key = keyOf(rt.policy, req.key, req.descriptors);
      // lists answer before any kernel or store work (and before the queue bound: they cost nothing)
      if (rt.lists !== null) {
        const d = this.fromLists(rt, key, cost);
        if (d !== null) return now ? d : Promise.resolve(d);
      }
      if (this.pending >= this.o.maxPending) {
        throw overloaded(`more than ${this.o.maxPending} checks pending`);
      }
    } catch (e) {
      if (now) throw e;
      return Promise.reject(e);
    }
    this.queue(rt, key, cost);
    if (now) {
      this.resolves.push(this.tookNow);
      this.rejects.push(this.failedNow);
      if (rt.shadows !== null) this.addShadows(rt, key, cost);
      this.nowFlush = true;
      try {
        this.flush();
      } finally {
        this.nowFlush = false;
      }
      const d = this.nowDecision;
      const e = this.nowError;
      this.nowDecision = null;
      this.nowError = null;
      if (e !== null) throw e;
      return d!;
    }
    const decision = new Promise<Decision>(this.enqueue);
    if (rt.shadows !== null) this.addShadows(rt, key, cost);
    this.schedule();
    return decision;
  }

  /** Adds one check to this turn's batch; the caller pushes its resolve and reject. */
  private queue(rt: PolicyRuntime, key: string, cost: number): void {
    this.o.hasher.add(key, rt.seedLo, rt.seedHi);
    this.rts.push(rt);
    this.costs.push(cost);
    this.keys.push(key);
    if (rt.stored) this.stored++;
    this.legs += rt.legCount;
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
    if (this.o.hasher.full || this.legs + MAX_GROUP > this.o.maxBatch || this.stored >= STORE_CHUNK) this.flush();
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

  /**
   * The decision of a check on `rt`'s allow or deny list (deny wins), counted; null when on neither. The live
   * policy's candidates are still evaluated, and a shadow policy's list denial is only a would-deny.
   */
  private fromLists(rt: PolicyRuntime, key: string, cost: number): Decision | null {
    const list = listed(rt.lists!, key);
    if (list === null) return null;
    this.counters.listed(rt.policy.name, list);
    const d = list === 'allow' ? allowlisted(rt) : denylisted(rt);
    if (rt.shadows !== null) {
      this.addShadows(rt, key, cost);
      this.schedule();
    }
    return rt.shadow ? this.counters.shadowed(rt, d, readClock(this.o.clock)) : d;
  }

  /**
   * Queues one internal check per candidate shadowing `live` (`shadowOf`), on the key derived from the live
   * check's and the same cost. Each is a check of its own, decided apart from the live one (no all-or-nothing
   * with its legs); its decision is only counted.
   */
  private addShadows(live: PolicyRuntime, key: string, cost: number): void {
    for (const link of live.shadows!) {
      let k = key;
      if (link.pick !== null) {
        const parts = key.split(':');
        // a key given directly that is not a tuple of the live policy's descriptors: nothing to derive from
        if (parts.length !== link.parts) continue;
        k = parts[link.pick[0]];
        for (let j = 1; j < link.pick.length; j++) k += ':' + parts[link.pick[j]];
        if (k.length === 0) continue;
      }
      const rt = link.rt;
      if (rt.lists !== null) {
        const list = listed(rt.lists, k);
        if (list !== null) {
          this.counters.listed(rt.policy.name, list);
          this.counters.shadowed(rt, list === 'allow' ? allowlisted(rt) : denylisted(rt), readClock(this.o.clock));
          continue;
        }
      }
      if (this.o.hasher.full || this.legs + MAX_GROUP > this.o.maxBatch) this.flush();
      this.queue(rt, k, cost);
      this.resolves.push(IGNORE);
      this.rejects.push(IGNORE);
    }
  }

  /** The promise executor of every check: one shared function, so a check allocates no closure of its own. */
  private readonly enqueue = (resolve: Resolve, reject: Reject): void => {
    this.resolves.push(resolve);
    this.rejects.push(reject);
  };

  /** The check's policy, after checking the request's shape. */
  private policyOf(req: CheckRequest): PolicyRuntime {
    if (typeof req !== 'object' || req === null) throw invalidArgument('check', 'must be an object');
    const name = (req as { policy?: unknown }).policy;
    if (typeof name !== 'string') throw invalidArgument('policy', `must be a string (got ${describe(name)})`);
    const rt = this.runtimes.get(name);
    if (rt === undefined) throw unknownPolicy(name);
    return rt;
  }

  /** Decides everything queued. Safe to call at any time; a no-op when nothing is queued. */
  flush(): void {
    this.scheduled = false;
    if (this.rts.length === 0) return;
    const { rts, costs, keys, resolves, rejects } = this;
    const hasher = this.o.hasher;
    try {
      // the clock is the caller's code: read it before counting, so a check it issues joins this batch
      const now = readClock(this.o.clock);
      const n = rts.length;
      hasher.run();
      const all: Batch = { n, rts, costs, keys, hashes: this.o.kernel.hashOut, resolves, rejects };
      if (this.stored === 0) this.decideLocally(all, now);
      else this.split(all, now);
    } catch (e) {
      const err = isSluiceError(e) ? e : shardFailed((e as Error).message);
      for (const r of rejects) r(err);
    } finally {
      // The queues are reused: nothing above keeps them, and settling a promise runs no code synchronously.
      empty(rts);
      empty(costs);
      empty(keys);
      empty(resolves);
      empty(rejects);
      this.legs = 0;
      this.stored = 0;
      hasher.reset();
    }
  }

  private decideLocally(b: Batch, now: number): void {
    if (this.o.pool === null) this.decideHere(b, now);
    else if (this.nowFlush) this.dispatchNow(this.o.pool, b, now);
    else this.dispatch(this.o.pool, b, now);
  }

  /** Set while checkNow() flushes: the batch goes to its shards through their synchronous channels. */
  private nowFlush = false;

  /**
   * {@link dispatch}, but each shard's part of the batch is decided through the shard's synchronous channel
   * (ShardPool.callNow: shared memory, this thread sleeps until the shard answers) and settled before this
   * returns, so the HTTP front answers inside uWS's callback with shards too (uWS drops a connection whose
   * pipelined request arrives while an answer is pending). The legs are written straight into the channel:
   * nothing is allocated. With sync policies, a shard's call is numbered like its batches and settled at once,
   * which keeps the numbers settled in order because checkNow() declines while a batch is unanswered.
   */
  private dispatchNow(pool: ShardPool, b: Batch, now: number): void {
    const shards = pool.size;
    const room = pool.maxCallLegs;
    for (let s = 0; s < shards; s++) {
      const legs = pool.legsFor(s);
      let used = 0;
      let from = 0;
      for (let i = 0; i < b.n; i++) {
        if (this.routeOf(b, i, shards) !== s) continue;
        if (used + b.rts[i].legCount > room) {
          this.callNow(pool, s, used, from, i, b, now);
          used = 0;
          from = i;
        }
        this.writeLegs(legs, used, b, i);
        used += b.rts[i].legCount;
      }
      if (used > 0) this.callNow(pool, s, used, from, b.n, b, now);
    }
  }

  /** One call of {@link dispatchNow}: shard `s`'s checks among [from, to) of `b`, `used` legs written. */
  private callNow(pool: ShardPool, s: number, used: number, from: number, to: number, b: Batch, now: number): void {
    const shards = pool.size;
    const seq = this.sync === null ? 0 : this.shardSeq(s);
    let out: Float64Array;
    try {
      out = pool.callNow(s, used, now, seq, seq === 0 ? 0 : this.shardSettled[s]);
    } catch (e) {
      for (let i = from; i < to; i++) if (this.routeOf(b, i, shards) === s) b.rejects[i](e as Error);
      return;
    } finally {
      if (seq > this.shardSettled[s]) this.shardSettled[s] = seq;
    }
    let base = 0;
    for (let i = from; i < to; i++) {
      if (this.routeOf(b, i, shards) !== s) continue;
      this.settleLocal(out, base, b, i, s, now);
      base += b.rts[i].legCount;
    }
  }

  /** The shard that owns check i of `b`: its key's, or for a guarded policy its guard's (the shared leg). */
  private routeOf(b: Batch, i: number, shards: number): number {
    const rt = b.rts[i];
    return shardOf(rt.guardHashes === null ? b.hashes[2 * i + 1] : rt.guardHashes[1], shards);
  }

  /** True when a batch numbered for sync bookkeeping is unanswered on some shard. */
  private unsettled(): boolean {
    for (let s = 0; s < this.shardSent.length; s++) if (this.shardSent[s] !== this.shardSettled[s]) return true;
    return false;
  }

  /** Sends this turn's store-backed checks to the store and decides the rest locally. */
  private split(all: Batch, now: number): void {
    const local = emptyBatch();
    const stored = emptyBatch();
    for (let i = 0; i < all.n; i++) push(all.rts[i].stored ? stored : local, all, i);
    if (local.n > 0) this.decideLocally(local, now);
    this.decideInStore(stored, now);
  }

  /**
   * One script call decides every store-backed check of the turn, but for the checks the over-limit cache
   * answers (src/engine/strict-cache.ts). If the call fails (Redis down or frozen, circuit open), each check
   * takes its policy's onStoreError: open, closed, or local (this instance's kernel, under the same key hashes,
   * seeded with the key's last state learned from Redis); each such decision is marked degraded.
   */
  private decideInStore(b: Batch, now: number): void {
    const store = this.o.store!;
    const cache = this.strict!;
    const redisKeys: string[] = [];
    const args: number[] = [];
    const sent = emptyBatch();
    const known: Known[] = [];
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const key0 = this.legKey(rt, b.keys[i], 0);
      const e = cache.entry(key0, rt);
      const shared = this.sharedKeys(rt, b.keys[i]);
      const d = cache.overLimit(e, b.costs[i], now, shared === null ? 0 : cache.epochOf(shared));
      if (d !== null) {
        this.settleStored(d, b, i, now);
        continue;
      }
      if (shared !== null) {
        for (const k of shared) cache.touch(k);
        e.sentEpoch = cache.epochOf(shared);
      }
      e.inflight++;
      known.push(e);
      push(sent, b, i);
      for (let j = 0; j < rt.legCount; j++) {
        redisKeys.push(j === 0 ? key0 : this.legKey(rt, b.keys[i], j));
        const l = rt.legLimits[j];
        args.push(l.algorithmCode, l.limit, scriptPeriod(l, now), scriptBurst(l, now), b.costs[i], j === 0 ? rt.legCount : 0);
      }
    }
    if (sent.n === 0) return;
    this.inFlight += sent.n;
    store.decideWide(redisKeys, args, now).then(
      (rows) => {
        for (const e of known) e.inflight--;
        if (rows.length > 0) cache.sample(rows[4], now, readClock(this.o.clock));
        const out = narrow(rows);
        // NaN rows: legs whose Redis Cluster slot call failed while others answered; they take the failure rule
        const failed = emptyBatch();
        const failedKnown: Known[] = [];
        let base = 0;
        for (let i = 0; i < sent.n; i++) {
          if (Number.isNaN(rows[LEG_WIDE * base])) {
            push(failed, sent, i);
            failedKnown.push(known[i]);
          } else {
            cache.learn(known[i], rows, base, sent.costs[i]);
            this.settleStored(compose(out, base, sent.rts[i]), sent, i, now);
          }
          base += sent.rts[i].legCount;
        }
        if (failed.n > 0) this.storeFailed(failed, failedKnown, now);
      },
      () => {
        for (const e of known) e.inflight--;
        this.storeFailed(sent, known, now);
      },
    ).finally(() => this.landed(sent.n));
  }

  /**
   * The Redis keys of a check's legs that other checks share (a guard's, through a guarded policy or a
   * check on the guard itself), or null when it has none.
   */
  private sharedKeys(rt: PolicyRuntime, key: string): readonly string[] | null {
    if (rt.guardStoreKeys !== null) return rt.guardStoreKeys;
    if (key !== GUARD_KEY) return null;
    const out: string[] = [];
    for (let j = 0; j < rt.legCount; j++) out.push(this.legKey(rt, key, j));
    return out;
  }

  /** The failure rule of each check of `b` (`known`: their cache entries, in order). */
  private storeFailed(b: Batch, known: Known[], now: number): void {
    const local = emptyBatch(true);
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const rule = rt.policy.onStoreError;
      this.degraded.count(rt.policy.name, rule);
      if (rule === 'local') {
        this.seed(b, i, known[i], now);
        push(local, b, i);
      } else this.settleStored(degraded(rt, rule), b, i, now);
    }
    if (local.n > 0) this.decideLocally(local, now);
  }

  /**
   * Seeds the kernel that will decide check i of `b` locally with the key's state last learned from Redis,
   * once per stall (a later Redis answer makes it due again). The kernel receives the state before the check:
   * this thread's at once, a shard's ahead of the batch on the same worker queue.
   */
  private seed(b: Batch, i: number, e: Known, now: number): void {
    const rt = b.rts[i];
    if (e.seeded || e.rt !== rt) return;
    e.seeded = true;
    const cache = this.strict!;
    const rows: number[] = [];
    const h = this.legHash;
    for (let j = 0; j < rt.legCount; j++) {
      const last = e.states[3 * j + 2];
      // calendar windows and sliding logs (codes 4, 5) keep state the cache does not rebuild: fresh locally
      if (!(last >= 0) || rt.legLimits[j].algorithmCode >= 4) continue;
      const local = cache.toLocal(last, now);
      writeLegHash(rt, b.hashes[2 * i], b.hashes[2 * i + 1], j, h, 0);
      // a GCRA state's w0 is a time (the TAT): it moves with the clock
      const w0 = rt.legLimits[j].algorithmCode === 1 ? e.states[3 * j] - (last - local) : e.states[3 * j];
      rows.push(h[0], h[1], rt.limitIds[j], w0, e.states[3 * j + 1], local);
    }
    if (rows.length === 0) return;
    const pool = this.o.pool;
    if (pool === null) {
      this.o.kernel.legIn.set(rows);
      this.o.kernel.setState(rows.length / STATE_ROW, now);
    } else {
      const shard = shardOf(rt.guardHashes === null ? b.hashes[2 * i + 1] : rt.guardHashes[1], pool.size);
      void pool.setState(shard, { kind: 'setState', now, n: rows.length / STATE_ROW, rows: Float64Array.from(rows) }).catch(() => undefined);
    }
  }

  /** Settles check i of `b` with `d` (a shadow policy's decision is counted and becomes an admission). */
  private settleStored(d: Decision | SluiceError, b: Batch, i: number, now: number): void {
    const rt = b.rts[i];
    if (d instanceof Error) b.rejects[i](d);
    else b.resolves[i](rt.shadow ? this.counters.shadowed(rt, d, now) : d);
  }

  /** The Redis key of leg j of a check on `key`. */
  private legKey(rt: PolicyRuntime, key: string, j: number): string {
    const own = rt.saltLo.length;
    return j < own ? storeKey(this.o.store!.prefix, rt.policy.name, rt.policy.version, key, j) : rt.guardStoreKeys![j - own];
  }

  /**
   * Settles check i of `b` from its legs' output rows at `base`; a sync policy's admitted cost is recorded
   * for the next merge, and its decision says how stale the view behind it is.
   */
  private settleLocal(out: Float64Array, base: number, b: Batch, i: number, shard: number, now: number): void {
    const rt = b.rts[i];
    const sync = rt.synced ? this.sync : null;
    const d = compose(out, base, rt, sync === null ? -1 : sync.staleness(now));
    if (d instanceof Error) return b.rejects[i](d);
    if (b.fallback === true) markLocal(d);
    if (sync !== null && d.allowed && b.costs[i] > 0) this.record(rt, b, i, shard);
    b.resolves[i](rt.shadow ? this.counters.shadowed(rt, d, now) : d);
  }

  /**
   * Adds check i's admitted cost to each of its legs' deltas, found by the leg's kernel hash: no string, object
   * or closure per check. Only a leg the writer does not know yet is described, with its Redis key.
   */
  private record(rt: PolicyRuntime, b: Batch, i: number, shard: number): void {
    const sync = this.sync!;
    const lo = b.hashes[2 * i], hi = b.hashes[2 * i + 1];
    const cost = b.costs[i];
    const ns = this.namespaces(rt);
    const h = this.legHash;
    for (let j = 0; j < rt.legCount; j++) {
      writeLegHash(rt, lo, hi, j, h, 0);
      if (sync.bump(h[0], h[1], rt.limitIds[j], ns[j], cost)) continue;
      const l = rt.legLimits[j];
      sync.add({
        redisKey: this.legKey(rt, b.keys[i], j), algorithmCode: l.algorithmCode, limit: l.limit, periodMs: l.periodMs,
        burst: l.burst, limitId: rt.limitIds[j], hashLo: h[0], hashHi: h[1], shard, ns: ns[j],
      }, cost);
    }
  }

  /**
   * A number per leg of `rt` for what its Redis key holds beyond the leg's hash and limit id: its policy's name
   * and version (the guard's, for a guard leg). A reload that changes a derived version (another limit's
   * numbers, say) keeps a leg's hash and limit id but not its Redis key, and so gets other numbers.
   */
  private namespaces(rt: PolicyRuntime): Int32Array {
    if (rt === this.nsRt) return this.nsOfRt;
    let ns = this.legNs.get(rt);
    if (ns === undefined) {
      ns = new Int32Array(rt.legCount);
      const own = rt.saltLo.length;
      for (let j = 0; j < rt.legCount; j++) {
        const text = j < own ? `${rt.policy.name}\u0000${rt.policy.version}` : `\u0000${rt.guardStoreKeys![j - own]}`;
        let id = this.nsIds.get(text);
        if (id === undefined) this.nsIds.set(text, (id = this.nsIds.size));
        ns[j] = id;
      }
      this.legNs.set(rt, ns);
    }
    this.nsRt = rt;
    this.nsOfRt = ns;
    return ns;
  }

  /** Installs merged states into the kernels that own them: this thread's, or each shard's in order. */
  private async install(entries: SyncLeg[], states: number[], now: number): Promise<void> {
    const byShard = new Map<number, number[]>();
    const paramsOf = new Map<number, number[]>();
    entries.forEach((e, i) => {
      this.strict?.drop(e.redisKey);
      let rows = byShard.get(e.shard);
      if (rows === undefined) {
        byShard.set(e.shard, (rows = []));
        paramsOf.set(e.shard, []);
      }
      rows.push(e.hashLo, e.hashHi, e.limitId, states[3 * i], states[3 * i + 1], states[3 * i + 2]);
      paramsOf.get(e.shard)!.push(e.algorithmCode, e.limit, e.periodMs);
    });
    const pool = this.o.pool;
    const sent: Promise<void>[] = [];
    for (const [shard, rows] of byShard) {
      if (shard < 0 || pool === null) {
        const k = this.o.kernel;
        const perCall = Math.floor(k.legIn.length / STATE_ROW) * STATE_ROW;
        for (let off = 0; off < rows.length; off += perCall) {
          const chunk = rows.slice(off, off + perCall);
          k.legIn.set(chunk);
          k.setState(chunk.length / STATE_ROW, now);
        }
      } else {
        sent.push(pool.setState(shard, {
          kind: 'setState', now, n: rows.length / STATE_ROW, rows: Float64Array.from(rows),
          params: Float64Array.from(paramsOf.get(shard)!), after: this.shardSettled[shard] ?? 0,
        }));
      }
    }
    await Promise.allSettled(sent);
  }

  /** Writes check i's legs at row `base` of `legs`. */
  private writeLegs(legs: Float64Array, base: number, b: Batch, i: number): void {
    const rt = b.rts[i];
    const lo = b.hashes[2 * i], hi = b.hashes[2 * i + 1];
    const cost = b.costs[i];
    for (let j = 0; j < rt.legCount; j++) {
      const r = (base + j) * LEG_IN;
      writeLegHash(rt, lo, hi, j, legs, r);
      legs[r + 2] = rt.limitIds[j] + (j === 0 ? rt.legCount * GROUP_SHIFT : 0);
      legs[r + 3] = cost;
    }
  }

  private decideHere(b: Batch, now: number): void {
    const k = this.o.kernel;
    let base = 0;
    for (let i = 0; i < b.n; i++) {
      this.writeLegs(k.legIn, base, b, i);
      base += b.rts[i].legCount;
    }
    k.decide(base, now);
    base = 0;
    for (let i = 0; i < b.n; i++) {
      this.settleLocal(k.legOut, base, b, i, -1, now);
      base += b.rts[i].legCount;
    }
  }

  private dispatch(pool: ShardPool, b: Batch, now: number): void {
    const shards = pool.size;
    const route = new Int32Array(b.n);
    const legCount = new Int32Array(shards);
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const hi = rt.guardHashes === null ? b.hashes[2 * i + 1] : rt.guardHashes[1];
      const s = shardOf(hi, shards);
      route[i] = s;
      legCount[s] += rt.legCount;
    }
    // Each shard's checks are copied out: the turn's queues are reused before the replies arrive.
    const batches: Array<{ legs: Float64Array; used: number; bases: number[]; checks: Batch } | null> = [];
    for (let s = 0; s < shards; s++) {
      batches.push(legCount[s] === 0 ? null
        : { legs: new Float64Array(legCount[s] * LEG_IN), used: 0, bases: [], checks: emptyBatch(b.fallback) });
    }
    for (let i = 0; i < b.n; i++) {
      const sb = batches[route[i]]!;
      this.writeLegs(sb.legs, sb.used, b, i);
      sb.bases.push(sb.used);
      push(sb.checks, b, i);
      sb.used += b.rts[i].legCount;
    }
    for (let s = 0; s < shards; s++) {
      const sb = batches[s];
      if (sb === null) continue;
      const { checks, bases } = sb;
      this.inFlight += checks.n;
      // with sync policies, batches are numbered per shard so a merged state spends what the shard admitted
      // in the batches not settled here yet (src/shard/admissions.ts)
      const seq = this.sync === null ? 0 : this.shardSeq(s);
      const task: ShardTask = seq === 0 ? { kind: 'batch', now, n: sb.used, legs: sb.legs }
        : { kind: 'batch', now, n: sb.used, legs: sb.legs, seq, ack: this.shardSettled[s] };
      pool.run(s, task).then(
        (out) => {
          for (let i = 0; i < checks.n; i++) this.settleLocal(out, bases[i], checks, i, s, now);
          if (seq > this.shardSettled[s]) this.shardSettled[s] = seq;
        },
        (e: Error) => {
          for (const r of checks.rejects) r(e);
          if (seq > this.shardSettled[s]) this.shardSettled[s] = seq;
        },
      ).finally(() => this.landed(checks.n));
    }
  }

  /** Batches sent to each shard and the last settled here (sync mode), for {@link install}. */
  private shardSent: number[] = [];
  private shardSettled: number[] = [];

  private shardSeq(s: number): number {
    while (this.shardSent.length <= s) {
      this.shardSent.push(0);
      this.shardSettled.push(0);
    }
    return ++this.shardSent[s];
  }

  private landed(count: number): void {
    this.inFlight -= count;
    if (this.inFlight === 0 && this.drained) this.drained();
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
    if (this.inFlight > 0) await new Promise<void>((r) => (this.drained = r));
    if (this.sync === null) return { keys: 0, tokens: 0 };
    return this.sync.close(drainMs === undefined ? undefined : Math.max(0, drainMs - (Date.now() - start)));
  }
}

/**
 * Empties a reused queue. A turn often holds one or a few checks (an HTTP request is a turn of its own):
 * pop() is inlined, while setting `length` calls into the runtime, ~600 instructions each, five per turn.
 */
function empty(a: unknown[]): void {
  if (a.length > 32) a.length = 0;
  else while (a.length > 0) a.pop();
}

function emptyBatch(fallback?: boolean): Batch {
  const b: Batch = { n: 0, rts: [], costs: [], keys: [], hashes: [] as number[], resolves: [], rejects: [] };
  if (fallback === true) b.fallback = true;
  return b;
}

/** The 4 outputs of each leg of a widened store reply (src/store/reply.ts), as compose() reads them. */
function narrow(rows: readonly number[]): Float64Array {
  const n = rows.length / LEG_WIDE;
  const out = new Float64Array(n * 4);
  for (let j = 0; j < n; j++) {
    out[4 * j] = rows[LEG_WIDE * j];
    out[4 * j + 1] = rows[LEG_WIDE * j + 1];
    out[4 * j + 2] = rows[LEG_WIDE * j + 2];
    out[4 * j + 3] = rows[LEG_WIDE * j + 3];
  }
  return out;
}

/** Appends check i of `from` to `to`, copying its hash. */
function push(to: Batch, from: Batch, i: number): void {
  to.rts.push(from.rts[i]);
  to.costs.push(from.costs[i]);
  to.keys.push(from.keys[i]);
  (to.hashes as number[]).push(from.hashes[2 * i], from.hashes[2 * i + 1]);
  to.resolves.push(from.resolves[i]);
  to.rejects.push(from.rejects[i]);
  to.n++;
}
