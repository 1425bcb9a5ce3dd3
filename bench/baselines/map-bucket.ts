/**
 * Baseline: the token bucket anyone would write in plain JS, a `Map<string, state>`, with the same exact
 * integer arithmetic as the sluice kernel (DESIGN.md, "JS ↔ WASM"): the state is x = tokens·P, a refill adds
 * elapsed·L (clamped to full), and time never runs backwards for a key. So it admits exactly what the
 * kernel admits (the replay scenario checks this), and what it measures is "a Map lookup plus the math".
 *
 * No eviction, no TTL, no per-key timer: a lower bound for a JS limiter's cost, not a usable limiter.
 */

interface BucketState {
  /** tokens · P */
  x: number;
  /** last time seen, Unix ms */
  t: number;
}

export class MapBucket {
  private readonly map = new Map<string, BucketState>();
  private readonly BP: number;
  private readonly fullAfter: number;

  /** `limit` tokens per `periodMs`, at most `burst` tokens held. B·P and elapsed·L must stay below 2^53. */
  constructor(private readonly L: number, private readonly P: number, private readonly B: number) {
    this.BP = B * P;
    this.fullAfter = L > 0 ? Math.ceil(this.BP / L) : Infinity;
    if (!Number.isSafeInteger(this.BP) || !Number.isSafeInteger(this.BP + this.fullAfter * L)) {
      throw new Error('MapBucket: B·P must stay below 2^53');
    }
  }

  /**
   * Spends `cost` tokens of `key` at `now` if it has them. Returns the tokens left (≥ 0) when admitted,
   * −1 when denied.
   */
  take(key: string, cost: number, now: number): number {
    let s = this.map.get(key);
    if (s === undefined) {
      s = { x: this.BP, t: now };
      this.map.set(key, s);
    } else if (now > s.t) {
      const elapsed = now - s.t;
      s.x = elapsed >= this.fullAfter ? this.BP : Math.min(this.BP, s.x + elapsed * this.L);
      s.t = now;
    }
    const cP = cost * this.P;
    if (cP <= s.x) {
      s.x -= cP;
      return Math.floor(s.x / this.P);
    }
    return -1;
  }

  get size(): number {
    return this.map.size;
  }
}
