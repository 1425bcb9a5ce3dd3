/**
 * Lease mode (`consistency: lease`): checks decided on this thread from tokens leased from Redis.
 *
 * Each leg of a check (a limit of its key, or of its guard) has a {@link Holding}: the tokens of this
 * instance's lease of that key. A check whose every leg holds its cost is admitted at once, with no Redis call;
 * otherwise it waits for a lease call on the legs short of tokens (one call in flight per leg: the checks
 * behind it wait with it). Redis grants in one atomic step (lua/lease.lua), so the tokens this instance holds
 * are tokens one exact limiter has set aside: admitted checks never exceed what it would admit. What leasing
 * costs is under-admission: tokens held here and not spent until they come back (idle, close) or expire.
 *
 * Lease sizes follow the key's rate here (a key's first lease is its check's cost; a hot key's covers half a
 * lease's life of spends, up to maxShare of the capacity); a hot key renews before it runs out (under a
 * quarter of its size left, or half its life gone), so it rarely waits on Redis. A key unchecked for idleMs
 * returns what it holds; close() returns everything.
 *
 * Redis down: the tokens held are spent until their lease's end; a check that needs more takes the policy's
 * onStoreError (open, closed, or `local`: this instance's kernel, marked degraded).
 */
import type { CompiledLimit, CompiledPolicy } from '../../config/policy-spec.js';
import type { Decision } from '../../types/decision.js';
import type { KeyState } from '../../types/keys.js';
import type { LeaseStats } from '../../types/stats.js';
import type { LeaseReply, LeaseStore, LeaseCall } from '../../store/lease.js';
import type { PolicyRuntime } from '../runtime.js';
import { GUARD_KEY } from '../runtime.js';
import type { DegradedCounts } from '../degraded.js';
import { neverReason } from '../decision.js';
import type { Decider, LocalFallback } from '../decider.js';
import { storeFailure } from '../failure.js';
import { emptyBatch, type Batch } from '../queue.js';
import type { PolicyCounters } from '../shadow.js';
import { overloaded } from '../../util/errors.js';
import { Holding, type Waiter } from './holding.js';
import { leaseStateKey } from './keys.js';
import { LeaseCounters } from './stats.js';
import { leaseLimitState } from './inspect.js';

/** The algorithm code lua/lease.lua runs for a limit: GCRA is leased as the token bucket it is equivalent to. */
function leaseAlgorithm(l: CompiledLimit): number {
  return l.algorithmCode;
}

/** Capacity of a leg: the most one check may cost (burst for buckets, limit for windows). */
function capacityOf(l: CompiledLimit): number {
  return l.algorithmCode <= 1 ? l.burst : l.limit;
}

/** What the lease decider uses of the front (src/engine/front.ts). */
export interface LeaseEngine {
  /** Shadow policies' counts: a shadow policy's decision is counted and becomes an admission. */
  counters: PolicyCounters;
  /** Decisions not made by Redis (onStoreError), by policy and rule. */
  degraded: DegradedCounts;
  /** Where a check whose policy's onStoreError is `local` goes once Redis failed: this instance's kernel. */
  localFallback: LocalFallback;
}

export interface LeaseDeciderOptions {
  store: Pick<LeaseStore, 'call' | 'calls' | 'failed' | 'read'>;
  /** Key prefix of the store (`sluice:`). */
  prefix: string;
  clock: () => number;
  /** Checks waiting for lease calls, at most (past it: OVERLOADED). */
  maxWaiting: number;
  /** The front's parts the decider uses, bound late (the front is made after its deciders). */
  engine: () => LeaseEngine;
  /** An id unique to this instance (lease ids are `<instance>.<n>`). */
  instanceId: string;
  /** Run the idle sweep on a timer (default true); false: the caller calls {@link LeaseDecider.sweep}. */
  sweepTimer?: boolean;
  /** Regions: told each key the decider touches (no-op by default). */
  touched?: (policy: string, key: string, stateKey: string, limitIndex?: number) => void;
  /**
   * Regions (src/engine/regions/): a `scope: global` policy's limit `j` is leased from this region's share, and
   * this is the share the lease script uses while the share hash is absent (the region's default); null for a
   * policy that is not global. Absent: no region.
   */
  shareOf?: (policy: CompiledPolicy, limitIndex: number) => { limit: number; burst: number } | null;
}

export class LeaseDecider implements Decider {
  readonly mode = 'lease';
  private readonly o: LeaseDeciderOptions;
  /** Holdings by lease state key (a guard's are shared by every key of its guarded policies). */
  private readonly holdings = new Map<string, Holding>();
  /** Per runtime: a check key's legs. */
  private readonly index = new WeakMap<PolicyRuntime, Map<string, Holding[]>>();
  private readonly indexes = new Set<Map<string, Holding[]>>();
  private waiting = 0;
  private seq = 0;
  private timer: NodeJS.Timeout | null = null;
  private closing = false;
  /** Calls in flight (close() waits for them). */
  private calls = 0;
  private idle: (() => void) | null = null;
  readonly counters = new LeaseCounters();
  /** Regions: the default share of the holdings of `scope: global` limits (see {@link LeaseDeciderOptions.shareOf}). */
  private readonly shares = new WeakMap<Holding, { limit: number; burst: number }>();

  constructor(o: LeaseDeciderOptions) {
    this.o = o;
  }

  private finish(rt: PolicyRuntime, d: Decision, now: number): Decision {
    return rt.shadow ? this.o.engine().counters.shadowed(rt, d, now) : d;
  }

  /**
   * The front's turn of lease checks (src/engine/decider.ts): each decided from what is held, or queued on the
   * lease call it waits for (keeping its resolve, reject and hash: the batch's arrays are reused).
   */
  decide(b: Batch, now: number): void {
    for (let i = 0; i < b.n; i++) {
      this.check(b.rts[i], b.keys[i], b.costs[i], now, b.resolves[i], b.rejects[i], b.hashes[2 * i], b.hashes[2 * i + 1]);
    }
  }

  /** The legs of `key` under `rt`, made on first use. */
  private legsOf(rt: PolicyRuntime, key: string): Holding[] {
    let m = this.index.get(rt);
    if (m === undefined) {
      this.index.set(rt, (m = new Map()));
      this.indexes.add(m);
    }
    let legs = m.get(key);
    if (legs === undefined || legs.some((h) => h.gone)) {
      legs = [];
      const own = rt.saltLo.length;
      for (let j = 0; j < rt.legCount; j++) {
        const sk = j < own ? leaseStateKey(this.o.prefix, rt.policy.name, rt.policy.version, key, j) : `${rt.guardStoreKeys![j - own]}:lease`;
        let h = this.holdings.get(sk);
        if (h === undefined) {
          h = new Holding(j < own ? rt.policy.name : rt.policy.guard!, sk, rt.legLimits[j], rt.policy.lease!, `${this.o.instanceId}.${++this.seq}`);
          this.holdings.set(sk, h);
          const share = j < own ? this.o.shareOf?.(rt.policy, j) ?? null : null;
          if (share !== null) {
            this.shares.set(h, share);
            this.o.touched?.(rt.policy.name, key, sk, j);
          } else if (this.o.shareOf === undefined) {
            this.o.touched?.(j < own ? rt.policy.name : rt.policy.guard!, j < own ? key : GUARD_KEY, sk);
          }
        }
        legs.push(h);
      }
      m.set(key, legs);
      this.arm();
    }
    return legs;
  }

  /**
   * Decides a check from what is held, or returns undefined when it must wait for Redis (then
   * {@link check} queues it). Never calls Redis itself.
   */
  decideNow(rt: PolicyRuntime, key: string, cost: number, now: number): Decision | undefined {
    const legs = this.legsOf(rt, key);
    for (let j = 0; j < legs.length; j++) {
      const h = legs[j];
      if (cost > capacityOf(h.limit)) return this.finish(rt, this.never(h.limit), now);
      if (h.spendable(now) < cost) {
        // Redis's last denial answers a check that lacks exactly what it was asked for (its retryAfterMs is
        // that need's); a check lacking more or less is Redis's to decide (an exact wait for another need
        // takes the bucket's state, and a smaller need may be admitted sooner)
        if (h.inFlight || h.waiters.length > 0 || h.deniedUntil <= now) return undefined;
        if (h.deniedUntil !== Infinity && cost - h.spendable(now) !== h.deniedNeed) return undefined;
        return this.finish(rt, this.denied(legs, j, now), now);
      }
    }
    return this.finish(rt, this.spend(legs, cost, now), now);
  }

  /** Decides a check: from what is held when it can, else once the lease calls it waits for have answered. */
  check(rt: PolicyRuntime, key: string, cost: number, now: number, resolve: (d: Decision) => void, reject: (e: Error) => void,
    hashLo = 0, hashHi = 0): void {
    const d = this.decideNow(rt, key, cost, now);
    if (d !== undefined) return resolve(d);
    if (this.waiting >= this.o.maxWaiting) return reject(overloaded(`more than ${this.o.maxWaiting} checks waiting for leases`));
    this.waiting++;
    this.counters.waits(rt.policy.name);
    this.park({ rt, key, cost, legs: this.legsOf(rt, key), resolve, reject, hashLo, hashHi }, now);
  }

  /** Queues `w` on its first leg short of tokens, and asks Redis for them if no call is on its way. */
  private park(w: Waiter, now: number): void {
    for (const h of w.legs) {
      if (h.spendable(now) >= w.cost) continue;
      h.waiters.push(w);
      if (!h.inFlight) this.acquire(h, now);
      return;
    }
    // every leg holds enough now
    this.waiting--;
    w.resolve(this.finish(w.rt, this.spend(w.legs, w.cost, now), now));
  }

  /** Spends `cost` on every leg; renews a leg running low while it is being spent. */
  private spend(legs: Holding[], cost: number, now: number): Decision {
    let bind = 0;
    let bindLeft = Infinity;
    for (let j = 0; j < legs.length; j++) {
      const h = legs[j];
      h.held -= cost;
      h.unreported += cost;
      h.spentTotal += cost;
      h.spent += cost;
      h.lastUse = now;
      const left = h.held + h.remote;
      if (left < bindLeft) {
        bindLeft = left;
        bind = j;
      }
      // hot: renew ahead of need (a quarter of the lease left; a bucket's lease also past half its life: a
      // window's cannot outlive its window, so it is renewed for tokens only)
      if (!h.inFlight && !this.closing && h.spendRate > 0 && (h.held * 4 < h.size || (h.limit.algorithmCode <= 1 && 2 * (h.deadline - now) < h.settings.ttlMs))) {
        this.renew(h, now);
      }
    }
    const l = legs[bind].limit;
    return { allowed: true, limit: l.limit, remaining: bindLeft, resetAfterMs: legs[bind].resetAfterMs(now), retryAfterMs: 0, policy: l.name };
  }

  private denied(legs: Holding[], j: number, now: number): Decision {
    const h = legs[j];
    if (h.deniedUntil === Infinity) return this.never(h.limit);
    for (const x of legs) x.lastUse = now;
    const l = h.limit;
    return {
      allowed: false, limit: l.limit, remaining: h.spendable(now) + h.remote, resetAfterMs: h.resetAfterMs(now),
      retryAfterMs: Math.max(1, h.deniedUntil - now), policy: l.name,
    };
  }

  private never(l: CompiledLimit): Decision {
    return { allowed: false, limit: l.limit, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy: l.name, reason: neverReason(l.limit) };
  }

  /** A renewal: reports what was spent, extends the lease, and tops it up to its size (nothing needed yet). */
  private renew(h: Holding, now: number): void {
    this.send(h, 'acquire', 0, h.want(now, 0), now);
  }

  /** Asks for the tokens `h`'s first waiter (and those behind it) lack. */
  private acquire(h: Holding, now: number): void {
    const have = h.spendable(now);
    let need = 0;
    for (const w of h.waiters) need = Math.max(need, w.cost);
    need = Math.max(1, need - have);
    let sum = 0;
    for (const w of h.waiters) sum += w.cost;
    const want = Math.min(Math.max(h.want(now, need), sum - have), Math.max(need, capacityOf(h.limit)));
    this.send(h, 'acquire', need, want, now);
  }

  private send(h: Holding, op: 'acquire' | 'return', need: number, want: number, now: number): void {
    const used = h.unreported;
    h.unreported = 0;
    h.inFlight = true;
    this.calls++;
    const l = h.limit;
    const share = this.shares.get(h);
    const q: LeaseCall = {
      stateKey: h.stateKey, op, algorithm: leaseAlgorithm(l), limit: share?.limit ?? l.limit, periodMs: l.periodMs, burst: share?.burst ?? l.burst,
      leaseId: h.leaseId, spentTotal: h.spentTotal, need, want, ttlMs: h.settings.ttlMs, ...(share === undefined ? {} : { shared: true }),
    };
    if (op === 'return') {
      // what is returned leaves this instance now: nothing may spend it while the call is on its way
      h.held = 0;
    }
    const sentAt = now;
    const policy = h.policy;
    this.o.store.call(q, now).then(
      (r) => this.answered(h, r, op, need, sentAt, policy),
      () => this.failed(h, used, op),
    ).finally(() => {
      if (--this.calls === 0 && this.idle !== null) this.idle();
    });
  }

  private answered(h: Holding, r: LeaseReply, op: 'acquire' | 'return', need: number, sentAt: number, policy: string): void {
    h.inFlight = false;
    const now = this.now();
    this.counters.expired(policy, r.expired);
    if (op === 'return') {
      this.counters.returned(policy, r.returned);
      h.deadline = 0;
    } else {
      // the lease's outstanding count in Redis less what was spent here since the call went out
      h.held = Math.max(0, r.count - h.unreported);
      h.deadline = sentAt + r.ttlMs;
      if (r.granted > 0) this.counters.acquired(policy, r.granted);
      // a renewal Redis had nothing for: no more until this lease runs out (a check then asks, and waits)
      else if (need === 0) h.size = 0;
      h.deniedUntil = r.granted === 0 && need > 0 ? (r.retryAfterMs < 0 ? Infinity : now + Math.max(1, r.retryAfterMs)) : 0;
      h.deniedNeed = need;
    }
    h.remote = r.remaining;
    h.resetAt = now + r.resetAfterMs;
    h.deficit = r.deficit;
    h.deficitAt = now;
    h.rate = r.rate;
    this.drain(h, now, false);
  }

  private failed(h: Holding, used: number, op: 'acquire' | 'return'): void {
    h.inFlight = false;
    // Not known to be reported: counted as outstanding here again until a call answers. The call may still
    // run in Redis (given up on at its deadline, not refused); the next reports the running total, so
    // Redis settles these spends once either way. A return that failed leaves its lease to expire in Redis.
    if (op === 'acquire') h.unreported += used;
    this.drain(h, this.now(), true);
  }

  /** Decides `h`'s waiters after a call: from what is held, else denied, else (Redis failed) onStoreError. */
  private drain(h: Holding, now: number, storeFailed: boolean): void {
    const ws = h.waiters.splice(0);
    for (const w of ws) {
      const d = this.decideNow(w.rt, w.key, w.cost, now);
      if (d !== undefined) {
        this.waiting--;
        w.resolve(d);
      } else if (storeFailed && h.spendable(now) < w.cost) {
        this.waiting--;
        this.storeError(w, now);
      } else this.park(w, now);
    }
  }

  /** The store failure rule (src/engine/failure.ts): open, closed, or this instance's kernel (`local`). */
  private storeError(w: Waiter, now: number): void {
    const e = this.o.engine();
    const d = storeFailure(w.rt, e.degraded, w.cost);
    if (d !== null) return w.resolve(this.finish(w.rt, d, now));
    const b = emptyBatch(true);
    b.rts.push(w.rt);
    b.costs.push(w.cost);
    b.keys.push(w.key);
    (b.hashes as number[]).push(w.hashLo, w.hashHi);
    b.resolves.push(w.resolve);
    b.rejects.push(w.reject);
    b.n = 1;
    e.localFallback.decide(b, now);
  }

  private now(): number {
    const t = this.o.clock();
    return Number.isSafeInteger(t) ? t : Date.now();
  }

  /** Starts the idle sweep (once a key is held). */
  private arm(): void {
    if (this.timer !== null || this.closing || this.o.sweepTimer === false) return;
    let every = Infinity;
    for (const h of this.holdings.values()) every = Math.min(every, h.settings.idleMs);
    this.timer = setInterval(() => this.sweep(this.now()), Math.max(10, Math.floor(every / 2)));
    this.timer.unref();
  }

  /**
   * Returns what keys unchecked for their idleMs hold, voids tokens past their lease's end, and forgets legs
   * with nothing held, spent or awaited. Runs on a timer; tests call it with their clock.
   */
  sweep(now: number): void {
    for (const [sk, h] of this.holdings) {
      if (h.inFlight || h.waiters.length > 0) continue;
      if (h.held > 0 && now >= h.deadline) {
        this.counters.lapsed(h.policy, h.held);
        h.held = 0;
      }
      if (now - h.lastUse < h.settings.idleMs) continue;
      // nothing left to give back: the lease's tokens are all spent, and its expiry counts them so (a return
      // would only report them sooner), so a cold key costs one call, not two
      if (h.held > 0) this.send(h, 'return', 0, 0, now);
      else if (now >= h.deniedUntil) {
        h.gone = true;
        this.holdings.delete(sk);
      }
    }
    for (const m of this.indexes) {
      for (const [key, legs] of m) if (legs.some((h) => h.gone)) m.delete(key);
    }
  }

  /** True once a lease check was made (LimiterStats.lease is present from then on). */
  get used(): boolean {
    return this.seq > 0;
  }

  /** Counts since start, and what is held now (LimiterStats.lease). */
  stats(): LeaseStats {
    let leases = 0, tokens = 0;
    const heldByPolicy: Record<string, number> = {};
    const now = this.now();
    for (const h of this.holdings.values()) {
      const n = h.spendable(now);
      if (n <= 0) continue;
      leases++;
      tokens += n;
      heldByPolicy[h.policy] = (heldByPolicy[h.policy] ?? 0) + n;
    }
    return { policies: this.counters.snapshot(), leases, tokensHeld: tokens, heldByPolicy, calls: this.o.store.calls, failedCalls: this.o.store.failed, callsInFlight: this.calls };
  }

  /**
   * Drops what this instance holds of `key`'s own limits (reset: the key's lease states are deleted) and
   * returns their lease state keys.
   */
  forget(rt: PolicyRuntime, key: string): string[] {
    const keys: string[] = [];
    for (let j = 0; j < rt.saltLo.length; j++) {
      const sk = leaseStateKey(this.o.prefix, rt.policy.name, rt.policy.version, key, j);
      const h = this.holdings.get(sk);
      if (h !== undefined && !h.inFlight && h.waiters.length === 0) {
        h.gone = true;
        this.holdings.delete(sk);
      }
      keys.push(sk);
    }
    return keys;
  }

  /**
   * One key's state under its policy's own limits, read from Redis (its leases included) and from what this
   * instance holds; changes nothing. Rejects when Redis fails.
   */
  async inspect(rt: PolicyRuntime, key: string, now: number): Promise<KeyState> {
    const own = rt.saltLo.length;
    const limits = await Promise.all(rt.policy.limits.slice(0, own).map(async (l, j) => {
      const sk = leaseStateKey(this.o.prefix, rt.policy.name, rt.policy.version, key, j);
      const h = this.holdings.get(sk);
      const here = h === undefined ? null : { leaseId: h.leaseId, held: h.spendable(now), unreported: h.unreported };
      return leaseLimitState(l, await this.o.store.read(sk), now, here);
    }));
    return { policy: rt.policy.name, key, version: rt.policy.version, source: 'redis', limits };
  }

  /**
   * Returns every lease's unused tokens and reports what was spent (close(), SIGTERM): checks waiting are
   * decided first; waits at most `ms` for Redis to answer.
   */
  async close(ms = 2000): Promise<void> {
    this.closing = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    if (this.calls > 0) await this.settled(ms);
    const now = this.now();
    for (const h of this.holdings.values()) {
      if (!h.inFlight && (h.held > 0 || h.unreported > 0)) this.send(h, 'return', 0, 0, now);
    }
    if (this.calls > 0) await this.settled(ms);
  }

  private settled(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      function done(): void {
        clearTimeout(t);
        resolve();
      }
      this.idle = () => {
        this.idle = null;
        done();
      };
    });
  }
}
