import type { CheckRequest, Decision } from '../types.js';
import type { Kernel } from '../shard/kernel.js';
import type { ShardPool } from '../shard/pool.js';
import type { PolicyRuntime } from './runtime.js';
import type { Hasher } from '../keys/hasher.js';
import { compose } from './decision.js';
import { keyOf, describe } from '../keys/derive.js';
import { shardOf } from '../shard/router.js';
import { GROUP_SHIFT, LEG_IN, MAX_GROUP } from '../shard/protocol.js';
import { SluiceError, invalidArgument, isSluiceError } from '../util/errors.js';
import type { RedisStore } from '../store/redis.js';
import { storeKey } from '../keys/store-key.js';
import { degraded } from './degraded.js';

/** Clock values the kernel keeps exactly (last-seen times are stored in 48 bits). */
const MAX_TIME = 2 ** 48 - 1;

type Resolve = (d: Decision) => void;
type Reject = (e: Error) => void;

/**
 * Checks decided together, as parallel arrays; `hashes` holds each key's hash as (lo, hi) pairs: the
 * kernel's hash output for a fresh batch, a copy for checks that fall back from the store.
 */
interface Batch {
  n: number;
  rts: PolicyRuntime[];
  costs: number[];
  hashes: ArrayLike<number>;
  resolves: Resolve[];
  rejects: Reject[];
}

/** The checks of one shard's batch, in leg order, waiting for the reply. */
interface InFlight {
  rts: PolicyRuntime[];
  bases: number[];
  resolves: Resolve[];
  rejects: Reject[];
}

export interface FrontOptions {
  runtimes: Map<string, PolicyRuntime>;
  hasher: Hasher;
  /** The calling thread's kernel: it hashes keys, and with no pool, decides. */
  kernel: Kernel;
  pool: ShardPool | null;
  /** Where `strict` policies are decided; null when no Redis is configured. */
  store: RedisStore | null;
  clock: () => number;
  maxBatch: number;
  maxPending: number;
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

  constructor(o: FrontOptions) {
    this.o = o;
  }

  get pending(): number {
    return this.rts.length + this.inFlight;
  }

  /** Queues one check; validation errors reject at once and name the field. */
  check(req: CheckRequest): Promise<Decision> {
    let rt: PolicyRuntime;
    let key: string;
    try {
      if (this.closed) throw new SluiceError('CLOSED', 'limiter is closed');
      rt = this.policyOf(req);
      key = keyOf(rt.policy, req.key, req.descriptors);
      if (this.pending >= this.o.maxPending) {
        throw new SluiceError('OVERLOADED', `more than ${this.o.maxPending} checks pending`);
      }
    } catch (e) {
      return Promise.reject(e);
    }
    this.o.hasher.add(key, rt.seedLo, rt.seedHi);
    this.rts.push(rt);
    this.costs.push(req.cost);
    this.keys.push(key);
    if (rt.stored) this.stored++;
    this.legs += rt.legCount;
    const decision = new Promise<Decision>(this.enqueue);
    if (this.o.hasher.full || this.legs + MAX_GROUP > this.o.maxBatch) this.flush();
    else if (!this.scheduled) {
        this.scheduled = true;
      // In-thread decisions are answered before this turn ends: a caller's synchronous burst still forms
      // one batch, and uWS, which drops a connection whose pipelined request arrives while an earlier
      // response is pending, sees every answer in time. Shards batch a whole event-loop turn instead.
      if (this.o.pool === null) queueMicrotask(this.flushNow);
      else setImmediate(this.flushNow);
    }
    return decision;
  }

  /** The promise executor of every check: one shared function, so a check allocates no closure of its own. */
  private readonly enqueue = (resolve: Resolve, reject: Reject): void => {
    this.resolves.push(resolve);
    this.rejects.push(reject);
  };

  /** The check's policy, after checking the request's shape and its cost. */
  private policyOf(req: CheckRequest): PolicyRuntime {
    if (typeof req !== 'object' || req === null) throw invalidArgument('check', 'must be an object');
    const name = (req as { policy?: unknown }).policy;
    if (typeof name !== 'string') throw invalidArgument('policy', `must be a string (got ${describe(name)})`);
    const rt = this.o.runtimes.get(name);
    if (rt === undefined) throw new SluiceError('UNKNOWN_POLICY', `policy: unknown policy ${JSON.stringify(name)}`, 'policy');
    const cost = (req as { cost?: unknown }).cost;
    if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0) {
      throw invalidArgument('cost', `must be a non-negative safe integer (got ${describe(cost)})`);
    }
    return rt;
  }

  /** Decides everything queued. Safe to call at any time; a no-op when nothing is queued. */
  flush(): void {
    this.scheduled = false;
    const n = this.rts.length;
    if (n === 0) return;
    const { rts, costs, keys, resolves, rejects } = this;
    const hasher = this.o.hasher;
    try {
      const now = this.o.clock();
      if (typeof now !== 'number' || !Number.isSafeInteger(now) || now < 0 || now > MAX_TIME) {
        throw new SluiceError('CLOCK', `clock must return integer Unix-epoch ms in [0, 2^48) (got ${describe(now)})`);
      }
      hasher.run();
      const all: Batch = { n, rts, costs, hashes: this.o.kernel.hashOut, resolves, rejects };
      if (this.stored === 0) this.decideLocally(all, now);
      else this.split(all, keys, now);
    } catch (e) {
      const err = isSluiceError(e) ? e : new SluiceError('SHARD_FAILED', (e as Error).message);
      for (const r of rejects) r(err);
    } finally {
      // The queues are reused: nothing above keeps them, and settling a promise runs no code synchronously.
      rts.length = 0;
      costs.length = 0;
      keys.length = 0;
      resolves.length = 0;
      rejects.length = 0;
      this.legs = 0;
      this.stored = 0;
      hasher.reset();
    }
  }

  private decideLocally(b: Batch, now: number): void {
    if (this.o.pool === null) this.decideHere(b, now);
    else this.dispatch(this.o.pool, b, now);
  }

  /** Sends this turn's store-backed checks to the store and decides the rest locally. */
  private split(all: Batch, keys: string[], now: number): void {
    const local = emptyBatch();
    const stored = emptyBatch();
    const storedKeys: string[] = [];
    for (let i = 0; i < all.n; i++) {
      const b = all.rts[i].stored ? stored : local;
      if (b === stored) storedKeys.push(keys[i]);
      b.rts.push(all.rts[i]);
      b.costs.push(all.costs[i]);
      (b.hashes as number[]).push(all.hashes[2 * i], all.hashes[2 * i + 1]);
      b.resolves.push(all.resolves[i]);
      b.rejects.push(all.rejects[i]);
      b.n++;
    }
    if (local.n > 0) this.decideLocally(local, now);
    this.decideInStore(stored, storedKeys, now);
  }

  /**
   * One script call decides every store-backed check of the turn. If it fails (Redis down, slow past the
   * timeout, circuit open), each check takes its policy's onStoreError: open, closed, or local (this
   * instance's kernel, under the same key hashes).
   */
  private decideInStore(b: Batch, keys: string[], now: number): void {
    const store = this.o.store!;
    const redisKeys: string[] = [];
    const args: number[] = [];
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const own = rt.saltLo.length;
      for (let j = 0; j < rt.legCount; j++) {
        redisKeys.push(j < own ? storeKey(store.prefix, rt.policy.name, rt.policy.version, keys[i], j) : rt.guardStoreKeys![j - own]);
        const l = rt.legLimits[j];
        args.push(l.algorithmCode, l.limit, l.periodMs, l.burst, b.costs[i], j === 0 ? rt.legCount : 0);
      }
    }
    this.inFlight += b.n;
    store.decide(redisKeys, args, now).then(
      (rows) => {
        const out = Float64Array.from(rows);
        let base = 0;
        for (let i = 0; i < b.n; i++) {
          settle(compose(out, base, b.rts[i]), b.resolves[i], b.rejects[i]);
          base += b.rts[i].legCount;
        }
      },
      () => this.storeFailed(b, now),
    ).finally(() => this.landed(b.n));
  }

  private storeFailed(b: Batch, now: number): void {
    const local = emptyBatch();
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      if (rt.policy.onStoreError !== 'local') {
        b.resolves[i](degraded(rt, rt.policy.onStoreError));
        continue;
      }
      local.rts.push(rt);
      local.costs.push(b.costs[i]);
      (local.hashes as number[]).push(b.hashes[2 * i], b.hashes[2 * i + 1]);
      local.resolves.push(b.resolves[i]);
      local.rejects.push(b.rejects[i]);
      local.n++;
    }
    if (local.n > 0) this.decideLocally(local, now);
  }

  /** Writes check i's legs at row `base` of `legs`. */
  private writeLegs(legs: Float64Array, base: number, b: Batch, i: number): void {
    const rt = b.rts[i];
    const lo = b.hashes[2 * i], hi = b.hashes[2 * i + 1];
    const cost = b.costs[i];
    const own = rt.saltLo.length;
    for (let j = 0; j < rt.legCount; j++) {
      const r = (base + j) * LEG_IN;
      let hl: number, hh: number;
      if (j < own) {
        hl = (lo ^ rt.saltLo[j]) >>> 0;
        hh = (hi ^ rt.saltHi[j]) >>> 0;
        if (hl === 0 && hh === 0) hl = 1; // 0 marks an empty slot in the kernel
      } else {
        hl = rt.guardHashes![2 * (j - own)];
        hh = rt.guardHashes![2 * (j - own) + 1];
      }
      legs[r] = hl;
      legs[r + 1] = hh;
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
      settle(compose(k.legOut, base, b.rts[i]), b.resolves[i], b.rejects[i]);
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
    const batches: Array<{ legs: Float64Array; used: number; f: InFlight } | null> = [];
    for (let s = 0; s < shards; s++) {
      batches.push(legCount[s] === 0 ? null
        : { legs: new Float64Array(legCount[s] * LEG_IN), used: 0, f: { rts: [], bases: [], resolves: [], rejects: [] } });
    }
    for (let i = 0; i < b.n; i++) {
      const sb = batches[route[i]]!;
      this.writeLegs(sb.legs, sb.used, b, i);
      sb.f.rts.push(b.rts[i]);
      sb.f.bases.push(sb.used);
      sb.f.resolves.push(b.resolves[i]);
      sb.f.rejects.push(b.rejects[i]);
      sb.used += b.rts[i].legCount;
    }
    for (let s = 0; s < shards; s++) {
      const sb = batches[s];
      if (sb === null) continue;
      const f = sb.f;
      this.inFlight += f.rts.length;
      pool.run(s, { kind: 'batch', now, n: sb.used, legs: sb.legs }).then(
        (out) => {
          for (let i = 0; i < f.rts.length; i++) settle(compose(out, f.bases[i], f.rts[i]), f.resolves[i], f.rejects[i]);
        },
        (e: Error) => {
          for (const r of f.rejects) r(e);
        },
      ).finally(() => this.landed(f.rts.length));
    }
  }

  private landed(count: number): void {
    this.inFlight -= count;
    if (this.inFlight === 0 && this.drained) this.drained();
  }

  /** Decides what is queued, waits for batches in flight, and refuses checks from then on. */
  async close(): Promise<void> {
    this.flush();
    this.closed = true;
    if (this.inFlight > 0) await new Promise<void>((r) => (this.drained = r));
  }
}

function emptyBatch(): Batch {
  return { n: 0, rts: [], costs: [], hashes: [] as number[], resolves: [], rejects: [] };
}

function settle(d: Decision | SluiceError, resolve: Resolve, reject: Reject): void {
  if (d instanceof Error) reject(d);
  else resolve(d);
}
