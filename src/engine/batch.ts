/**
 * The batch path of the front ({@link Front.checkBatch}): checks given as parallel arrays, outcomes written
 * into parallel arrays, with no promise, object or closure per check on the common path (shards 0, a local
 * policy). `/v1/stream`'s binary frames use it: a frame's checks go from the frame to the kernel's input
 * and from the kernel's output to the answers frame.
 */
import { degradedCode } from './degraded.js';
import type { Decision } from '../types/decision.js';
import { writeLegHash, type PolicyRuntime } from './runtime.js';
import type { Kernel } from '../shard/kernel.js';
import { MAX_KEY_BYTES } from '../keys/bounds.js';
import type { Hasher } from '../keys/hasher.js';
import { GROUP_SHIFT, IN_COST, IN_LIMIT, LEG_IN, LEG_OUT, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER } from '../shard/abi.js';
import { BOUND_DENIED, BOUND_NEVER, badLegError, bindingLeg, neverReason } from './decision.js';
import { isSluiceError, shardFailed } from '../util/errors.js';

/**
 * The checks of a batch, as parallel arrays (one index per check). Keys come as UTF-8 bytes, so that a check
 * decided in the kernel needs no string: key i is keyLen[i] bytes of keyBytes at keyAt[i], well-formed UTF-8
 * (the caller's to check). key(i) makes the string when one is needed (lists, the store, sync, shadows).
 */
export interface BatchInput {
  policies: ArrayLike<string>;
  costs: ArrayLike<number>;
  keyBytes: Uint8Array;
  keyAt: ArrayLike<number>;
  keyLen: ArrayLike<number>;
  key(i: number): string;
}

/** A key of this many bytes of (well-formed) UTF-8 is valid as it is: what validateKey (keys/derive.ts) admits. */
export function keyLengthOk(len: number): boolean {
  return len >= 1 && len <= MAX_KEY_BYTES;
}

/** `checkBatch(src, from, to, out)`: see {@link Front.checkBatch}. */
export type CheckBatch = (src: BatchInput, from: number, to: number, out: BatchOutcomes) => Promise<void> | null;

/** Outcome codes ({@link BatchOutcomes.code}). */
export const OUTCOME_DENIED = 0;
export const OUTCOME_ALLOWED = 1;
export const OUTCOME_ERROR = 2;

/**
 * Outcomes of a batch's checks as parallel arrays, a decision's fields or an error per index. Reusable: a
 * writer overwrites every field of an index it writes.
 */
export class BatchOutcomes {
  readonly capacity: number;
  /** OUTCOME_DENIED, OUTCOME_ALLOWED or OUTCOME_ERROR. */
  readonly code: Uint8Array;
  readonly limit: Float64Array;
  readonly remaining: Float64Array;
  readonly resetAfterMs: Float64Array;
  /** −1: null (can never pass). */
  readonly retryAfterMs: Float64Array;
  /** 0, or the rule of a degraded decision (the store failed: see onStoreError): degradedCode(), 1 open, 2 closed, 3 local. */
  readonly degraded: Uint8Array;
  /** The binding limit's name. */
  readonly name: string[];
  /** The decision's reason, '' when it has none. */
  readonly reason: string[];
  /** The error of an OUTCOME_ERROR index. */
  readonly error: Array<Error | null>;
  /** onLimit: delay: an admitted check's delayMs (0: at once). */
  readonly delayMs: Float64Array;
  /** The decision of a delayed index (its wait place's handle: DelayPlaces.release), else null. */
  readonly delayed: Array<Decision | null>;
  /**
   * The decision of an index written from an object ({@link put}: lists, the store, sync, shadows, the
   * queue's path), else null (composed from the kernel's rows, {@link composeInto}, or an error): a transport
   * that answers with every field of a decision (JSON) answers from it.
   */
  readonly decisions: Array<Decision | null>;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.code = new Uint8Array(capacity);
    this.limit = new Float64Array(capacity);
    this.remaining = new Float64Array(capacity);
    this.resetAfterMs = new Float64Array(capacity);
    this.retryAfterMs = new Float64Array(capacity);
    this.degraded = new Uint8Array(capacity);
    this.name = new Array<string>(capacity).fill('');
    this.reason = new Array<string>(capacity).fill('');
    this.error = new Array<Error | null>(capacity).fill(null);
    this.delayMs = new Float64Array(capacity);
    this.delayed = new Array<Decision | null>(capacity).fill(null);
    this.decisions = new Array<Decision | null>(capacity).fill(null);
  }

  /** Writes a decision made as an object (lists, shadows, the store, the queue's path). */
  put(i: number, d: Decision): void {
    this.code[i] = d.allowed ? OUTCOME_ALLOWED : OUTCOME_DENIED;
    this.limit[i] = d.limit;
    this.remaining[i] = d.remaining;
    this.resetAfterMs[i] = d.resetAfterMs;
    this.retryAfterMs[i] = d.retryAfterMs === null ? -1 : d.retryAfterMs;
    this.degraded[i] = degradedCode(d);
    this.name[i] = d.policy;
    this.reason[i] = d.reason ?? '';
    this.error[i] = null;
    const delay = d.delayMs ?? 0;
    this.delayMs[i] = delay;
    this.delayed[i] = delay > 0 ? d : null;
    this.decisions[i] = d;
  }

  fail(i: number, e: Error): void {
    this.code[i] = OUTCOME_ERROR;
    this.error[i] = e;
    this.decisions[i] = null;
  }

  /** Settles index i from a queued check's outcome (a Decision, or an Error). */
  settle(i: number, x: Decision | Error): void {
    if (x instanceof Error) this.fail(i, x);
    else this.put(i, x);
  }

  /** The decision at i as an object (tests, and callers that want one). */
  decision(i: number): Decision {
    const d: Decision = {
      allowed: this.code[i] === OUTCOME_ALLOWED, limit: this.limit[i], remaining: this.remaining[i],
      resetAfterMs: this.resetAfterMs[i], retryAfterMs: this.retryAfterMs[i] < 0 ? null : this.retryAfterMs[i], policy: this.name[i],
    };
    if (this.reason[i] !== '') d.reason = this.reason[i];
    if (this.delayMs[i] > 0) d.delayMs = this.delayMs[i];
    return d;
  }
}

/**
 * The same decision as compose() (src/engine/decision.ts) from a check's legs' output rows at `base`, written
 * into `o` at `i` instead of into a new object.
 */
export function composeInto(out: Float64Array, base: number, rt: PolicyRuntime, o: BatchOutcomes, i: number): void {
  const bound = bindingLeg(out, base, rt);
  if (bound < 0) {
    o.fail(i, badLegError(out, base, rt, bound));
    return;
  }
  const pick = bound & 0xff;
  const allowed = bound < BOUND_DENIED;
  const never = bound >= BOUND_NEVER;
  const row = (base + pick) * LEG_OUT;
  const limit = rt.legLimits[pick];
  o.code[i] = allowed ? OUTCOME_ALLOWED : OUTCOME_DENIED;
  o.limit[i] = limit.limit;
  o.remaining[i] = out[row + OUT_REMAINING];
  o.resetAfterMs[i] = out[row + OUT_RESET_AFTER];
  o.retryAfterMs[i] = allowed ? 0 : never ? -1 : out[row + OUT_RETRY_AFTER];
  o.degraded[i] = 0;
  o.name[i] = limit.name;
  o.reason[i] = never ? neverReason(limit.limit) : '';
  o.error[i] = null;
  o.delayMs[i] = 0; // a direct chunk never delays (isDirect)
  o.delayed[i] = null;
  o.decisions[i] = null;
}

/**
 * True when a check on `rt` can be decided by {@link DirectBatch} (with no shard pool): a local policy that is
 * not a shadow, has no shadow candidates, keeps no sync bookkeeping and has no onLimit: delay (its wait
 * places are settled per check: src/engine/delay.ts). Others take the front's queue.
 */
export function isDirect(rt: PolicyRuntime): boolean {
  return !rt.stored && !rt.synced && !rt.leased && !rt.shadow && rt.shadows === null && rt.delayed === null;
}

/**
 * A chunk of checks decided on this thread's kernel at once: keys are added to the hasher as they are
 * validated, then one hash call, one decide call, and outcomes composed straight from the output rows. The
 * front owns the hasher while a chunk is open: nothing else may add to it.
 */
export class DirectBatch {
  private readonly rts: PolicyRuntime[] = [];
  private readonly costs: Float64Array;
  /** Each check's index in the caller's outcomes. */
  private readonly at: Int32Array;
  n = 0;
  legs = 0;
  /** The clock read for this chunk (read before its first key is added). */
  now = 0;

  constructor(private readonly kernel: Kernel, private readonly hasher: Hasher, private readonly maxBatch: number) {
    this.costs = new Float64Array(maxBatch);
    this.at = new Int32Array(maxBatch);
  }

  /** Adds a validated check; true when the chunk is full and must be decided before the next one. */
  add(rt: PolicyRuntime, key: string, cost: number, at: number, maxGroup: number): boolean {
    this.hasher.add(key, rt.seedLo, rt.seedHi);
    return this.push(rt, cost, at, maxGroup);
  }

  /** add() with the key as UTF-8 bytes (validated: see {@link BatchInput}). */
  addBytes(rt: PolicyRuntime, src: Uint8Array, keyAt: number, keyLen: number, cost: number, at: number, maxGroup: number): boolean {
    this.hasher.addBytes(src, keyAt, keyLen, rt.seedLo, rt.seedHi);
    return this.push(rt, cost, at, maxGroup);
  }

  /** Records a check whose key the hasher has just taken; true when the chunk is full. */
  private push(rt: PolicyRuntime, cost: number, at: number, maxGroup: number): boolean {
    const k = this.n++;
    this.rts[k] = rt;
    this.costs[k] = cost;
    this.at[k] = at;
    this.legs += rt.legCount;
    return this.hasher.full || this.legs + maxGroup > this.maxBatch || this.n === this.maxBatch;
  }

  /** Decides the chunk into `o` and empties it (the hasher too). */
  decide(o: BatchOutcomes): void {
    const n = this.n;
    const { rts, costs, at } = this;
    const k = this.kernel;
    try {
      this.hasher.run();
      const h = k.hashOut;
      const legIn = k.legIn;
      let base = 0;
      for (let c = 0; c < n; c++) {
        const rt = rts[c];
        const lo = h[2 * c], hi = h[2 * c + 1];
        const cost = costs[c];
        for (let j = 0; j < rt.legCount; j++) {
          const r = (base + j) * LEG_IN;
          writeLegHash(rt, lo, hi, j, legIn, r);
          legIn[r + IN_LIMIT] = rt.limitIds[j] + (j === 0 ? rt.legCount * GROUP_SHIFT : 0);
          legIn[r + IN_COST] = cost;
        }
        base += rt.legCount;
      }
      k.decide(base, this.now);
      const out = k.legOut;
      base = 0;
      for (let c = 0; c < n; c++) {
        const rt = rts[c];
        composeInto(out, base, rt, o, at[c]);
        base += rt.legCount;
      }
    } catch (e) {
      const err = isSluiceError(e) ? e : shardFailed((e as Error).message);
      for (let c = 0; c < n; c++) o.fail(at[c], err);
    } finally {
      this.hasher.reset();
      this.n = 0;
      this.legs = 0;
    }
  }
}

/** The checks of one checkBatch call still queued: the call's promise resolves when the last one settles. */
export class BatchWait {
  left = 0;
  done: (() => void) | null = null;

  /** One queued check settled. */
  settled(): void {
    if (--this.left === 0) this.done?.();
  }
}
