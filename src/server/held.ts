/**
 * Answers held until their delay has passed (onLimit: delay) on one `/v1/stream` connection: each is a timer
 * that writes the answer when due. A connection that closes first cancels them all and frees their wait
 * places (src/engine/delay.ts); the tokens stay spent, as they were reserved at decision time.
 */
import type { Decision } from '../types/decision.js';
import type { DelayPlaces } from '../engine/delay.js';

export class HeldAnswers {
  private readonly timers = new Map<ReturnType<typeof setTimeout>, Decision | null>();

  constructor(private readonly places: DelayPlaces | undefined) {}

  get size(): number {
    return this.timers.size;
  }

  /** Runs `write` in `ms`; `d` is the decision whose wait place is freed then (null: none known). */
  hold(ms: number, d: Decision | null, write: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (d !== null) this.places?.release(d);
      write();
    }, ms);
    this.timers.set(timer, d);
  }

  /** The connection closed: nothing more is written, and every place is freed. */
  cancelAll(): void {
    for (const [timer, d] of this.timers) {
      clearTimeout(timer);
      if (d !== null) this.places?.release(d);
    }
    this.timers.clear();
  }
}
