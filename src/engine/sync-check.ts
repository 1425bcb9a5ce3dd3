/**
 * Limiter.checkSync: one check decided at the call, on the calling thread's kernel, with no promise, queue or
 * batch object. It is check() for a limiter without shards on a policy decided in this process, as a function
 * call: the same validation (the same errors, thrown), the same kernel, the same exact decision. A check that
 * needs more than the kernel (lists, shadows, sync bookkeeping) or arrives while check()s are queued takes the
 * front's synchronous path (Front.checkNow), which decides the queue first, in order.
 */
import type { CheckRequest, Decision } from '../types/decision.js';
import type { Kernel } from '../shard/kernel.js';
import type { Hasher } from '../keys/hasher.js';
import type { Front } from './front.js';
import type { PolicyRuntime } from './runtime.js';
import { writeLegHash } from './runtime.js';
import { isDirect } from './batch.js';
import { compose } from './decision.js';
import { readClock } from './clock.js';
import { keyOf } from '../keys/derive.js';
import { checkCost, policyOf } from './validate.js';
import { GROUP_SHIFT, IN_COST, IN_LIMIT, LEG_IN } from '../shard/abi.js';
import { closed, isSluiceError, notSynchronous, shardFailed } from '../util/errors.js';

export interface SyncCheckOptions {
  front: Front;
  kernel: Kernel;
  hasher: Hasher;
  clock: () => number;
  /** Shard workers (0: decided here); checkSync refuses every check of a limiter with shards. */
  shards: number;
  /** True from close() on. */
  closed: () => boolean;
}

export class SyncCheck {
  /** The last key hashed and its hash, per the runtime that hashed it (a hot key is hashed once). */
  private lastRt: PolicyRuntime | null = null;
  private lastKey = '';
  private lastLo = 0;
  private lastHi = 0;

  constructor(private readonly o: SyncCheckOptions) {}

  /**
   * Decides `req` now.
   * @throws SluiceError what check() would reject with; NOT_SYNCHRONOUS for a limiter with shards or a policy
   *   decided in Redis (`consistency: strict`), after the request has been validated.
   */
  check(req: CheckRequest): Decision {
    const o = this.o;
    if (o.closed()) throw closed();
    if (o.shards > 0) throw notSynchronous('shards', `this limiter has ${o.shards} shard workers`);
    // the same checks, in the same order, as Front.submit (src/engine/validate.ts)
    const rt = policyOf(o.front.policyRuntimes, req, 'check');
    // read once: a getter must not hand the kernel a value other than the one validated
    const cost = checkCost((req as { cost?: unknown }).cost);
    const key = keyOf(rt.policy, req.key, req.descriptors);
    if (rt.stored) throw notSynchronous('policy', `policy "${rt.policy.name}" has consistency strict (decided in Redis)`);
    if (!isDirect(rt) || rt.lists !== null || o.front.pending > 0 || o.hasher.count > 0) {
      // queued checks go first, and lists, shadows and sync bookkeeping are the front's
      const d = o.front.checkNow(req);
      if (d === undefined) throw notSynchronous('policy', `policy "${rt.policy.name}" is not decided on this thread`);
      return d;
    }
    const now = readClock(o.clock);
    try {
      if (rt !== this.lastRt || key !== this.lastKey) {
        const h = o.hasher;
        h.add(key, rt.seedLo, rt.seedHi);
        h.run();
        this.lastLo = h.lo(0);
        this.lastHi = h.hi(0);
        h.reset();
        this.lastRt = rt;
        this.lastKey = key;
      }
      const k = o.kernel;
      const legIn = k.legIn;
      const n = rt.legCount;
      for (let j = 0; j < n; j++) {
        const r = j * LEG_IN;
        writeLegHash(rt, this.lastLo, this.lastHi, j, legIn, r);
        legIn[r + IN_LIMIT] = rt.limitIds[j] + (j === 0 ? n * GROUP_SHIFT : 0);
        legIn[r + IN_COST] = cost;
      }
      k.decide(n, now);
    } catch (e) {
      o.hasher.reset();
      this.lastRt = null;
      throw isSluiceError(e) ? e : shardFailed((e as Error).message);
    }
    const d = compose(this.o.kernel.legOut, 0, rt);
    if (d instanceof Error) throw d;
    return d;
  }
}
