/**
 * Reconnect delays: exponential backoff with full jitter (a uniform draw in [0, min(max, initial·factor^n)]),
 * so clients dropped together do not come back together.
 */
export interface BackoffOptions {
  /** The first attempt's ceiling, in ms. Default 50. */
  initialDelayMs?: number;
  /** The largest ceiling, in ms. Default 5,000. */
  maxDelayMs?: number;
  /** Growth of the ceiling per attempt. Default 2. */
  factor?: number;
  /** A uniform draw in [0, 1). Default Math.random; a test passes a fixed one. */
  random?: () => number;
}

export class Backoff {
  private readonly initial: number;
  private readonly max: number;
  private readonly factor: number;
  private readonly random: () => number;
  private n = 0;

  constructor(o: BackoffOptions = {}) {
    this.initial = positive(o.initialDelayMs ?? 50, 'initialDelayMs');
    this.max = positive(o.maxDelayMs ?? 5000, 'maxDelayMs');
    this.factor = o.factor ?? 2;
    if (!(this.factor >= 1)) throw new RangeError(`reconnect.factor: must be ≥ 1 (got ${o.factor})`);
    this.random = o.random ?? Math.random;
  }

  /** Attempts made since the last reset. */
  get attempts(): number {
    return this.n;
  }

  /** The ceiling of the next delay, in ms: min(max, initial·factor^attempts). */
  ceiling(): number {
    return Math.min(this.max, this.initial * this.factor ** this.n);
  }

  /** The next delay in ms (an integer in [0, ceiling]), counting one more attempt. */
  next(): number {
    const d = Math.floor(this.random() * (this.ceiling() + 1));
    this.n++;
    return d;
  }

  /** Back to the first delay (after a connection succeeded). */
  reset(): void {
    this.n = 0;
  }
}

function positive(v: number, name: string): number {
  if (!Number.isFinite(v) || v <= 0) throw new RangeError(`reconnect.${name}: must be a positive number of ms (got ${v})`);
  return v;
}
