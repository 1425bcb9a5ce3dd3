/**
 * A controllable clock for limiters under test: integer Unix-epoch ms that only moves when a test moves it.
 *
 * The limiter reads its clock once per batch, at the end of the event-loop turn in which checks were queued
 * (see src/engine/front.ts). Over HTTP that is after the request arrived, so a test that sets the clock and
 * then sends a request (awaiting each answer before the next) gets a decision at exactly that time.
 */

/** 1,700,000,040,000 ms: a multiple of one minute (and of every period the tests use), so fixed windows start here. */
export const EPOCH_MINUTE = 1_700_000_040_000;

export class ManualClock {
  private t: number;

  constructor(start = EPOCH_MINUTE) {
    this.t = ManualClock.valid(start);
  }

  /** The time source to hand to `createLimiter({ clock })`. */
  readonly now = (): number => this.t;

  /** Sets the clock to `t` (any integer ms, even backwards: the engine must cope with that). */
  set(t: number): void {
    this.t = ManualClock.valid(t);
  }

  /** Moves the clock by `ms` (may be negative). */
  advance(ms: number): void {
    this.t = ManualClock.valid(this.t + ms);
  }

  private static valid(t: number): number {
    if (!Number.isSafeInteger(t) || t < 0) throw new Error(`ManualClock: time must be a non-negative integer of ms (got ${t})`);
    return t;
  }
}

export function manualClock(start = EPOCH_MINUTE): ManualClock {
  return new ManualClock(start);
}

/** Resolves after `ms` of real time (for a test waiting on real processes: a Redis, a server). */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
