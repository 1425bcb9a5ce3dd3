/**
 * Outcome arrays for the engine's batch path (src/engine/batch.ts), kept by size class and reused, shared by
 * a route's binary and JSON parts: a batch decided at once gives its arrays back before the next one takes.
 */
import { BatchOutcomes } from '../../engine/batch.js';

/** Arrays kept per size class: a few batches in flight at once (a store round trip) each hold one. */
const KEPT_PER_CLASS = 4;

export class OutcomePool {
  /** Spare outcome arrays by size class (2^k entries). */
  private readonly spare: BatchOutcomes[][] = [];

  /** Outcome arrays for at least `n` checks. */
  take(n: number): BatchOutcomes {
    const k = 32 - Math.clz32(n - 1);
    const list = this.spare[k];
    return list !== undefined && list.length > 0 ? list.pop()! : new BatchOutcomes(2 ** k);
  }

  /** Gives arrays back once their outcomes are answered. */
  give(out: BatchOutcomes): void {
    const list = (this.spare[31 - Math.clz32(out.capacity)] ??= []);
    if (list.length < KEPT_PER_CLASS) list.push(out);
  }
}
