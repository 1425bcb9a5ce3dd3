/**
 * The batch queue: the checks of one event-loop turn, as parallel arrays (no object per check), and the
 * {@link Batch} view deciders receive. The turn's arrays are reused from turn to turn: a decider that answers
 * later copies the checks it keeps ({@link push}).
 */
import type { Decision } from '../types/decision.js';
import type { Hasher } from '../keys/hasher.js';
import type { PolicyRuntime } from './runtime.js';

export type Resolve = (d: Decision) => void;
export type Reject = (e: Error) => void;

/**
 * Checks decided together, as parallel arrays; `hashes` holds each key's hash as (lo, hi) pairs: the
 * kernel's hash output for a fresh batch, a copy for checks a decider keeps or that fall back from the store.
 */
export interface Batch {
  n: number;
  rts: PolicyRuntime[];
  /** Each check's cost, in tokens. */
  costs: number[];
  keys: string[];
  hashes: ArrayLike<number>;
  resolves: Resolve[];
  rejects: Reject[];
  /** Store-backed checks decided locally because the store failed (the `local` rule): marked degraded. */
  fallback?: boolean;
}

/** A new batch of its own (not the turn's reused arrays). */
export function emptyBatch(fallback?: boolean): Batch {
  const b: Batch = { n: 0, rts: [], costs: [], keys: [], hashes: [] as number[], resolves: [], rejects: [] };
  if (fallback === true) b.fallback = true;
  return b;
}

/** Appends check i of `from` to `to` (a batch of {@link emptyBatch}), copying its hash. */
export function push(to: Batch, from: Batch, i: number): void {
  to.rts.push(from.rts[i]);
  to.costs.push(from.costs[i]);
  to.keys.push(from.keys[i]);
  (to.hashes as number[]).push(from.hashes[2 * i], from.hashes[2 * i + 1]);
  to.resolves.push(from.resolves[i]);
  to.rejects.push(from.rejects[i]);
  to.n++;
}

/**
 * This turn's checks. {@link add} hashes the key in the turn's hasher call; the caller pushes the check's
 * resolve and reject. {@link clear} empties the arrays for the next turn.
 */
export class TurnQueue {
  readonly rts: PolicyRuntime[] = [];
  readonly costs: number[] = [];
  readonly keys: string[] = [];
  readonly resolves: Resolve[] = [];
  readonly rejects: Reject[] = [];
  /** Legs queued (a check has one per limit of its group). */
  legs = 0;
  /** Checks queued that leave the local path (a store-backed mode's decider takes them). */
  routed = 0;

  constructor(private readonly hasher: Hasher) {}

  get length(): number {
    return this.rts.length;
  }

  /** Adds one check to this turn's batch. */
  add(rt: PolicyRuntime, key: string, cost: number): void {
    this.hasher.add(key, rt.seedLo, rt.seedHi);
    this.rts.push(rt);
    this.costs.push(cost);
    this.keys.push(key);
    if (rt.stored) this.routed++;
    this.legs += rt.legCount;
  }

  /** The queue as a batch whose hashes are the hasher's output (valid until {@link clear}). */
  batch(hashes: ArrayLike<number>): Batch {
    const { rts, costs, keys, resolves, rejects } = this;
    return { n: rts.length, rts, costs, keys, hashes, resolves, rejects };
  }

  /** Empties the queue and the hasher; settling a promise runs no code synchronously, so nothing holds them. */
  clear(): void {
    empty(this.rts);
    empty(this.costs);
    empty(this.keys);
    empty(this.resolves);
    empty(this.rejects);
    this.legs = 0;
    this.routed = 0;
    this.hasher.reset();
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
