/**
 * Bounds of the offset between Redis's clock (the TIME a strict script decides on) and this instance's, in
 * ms, from the calls Redis answers. A call issued when this instance's clock read s0 and answered when it read
 * s1, which Redis decided at its time t, puts Redis − local within [t − s1 − 1, t + 1 − s0]: both clocks are
 * read in whole ms, hence the ±1 (the bound of a two-way exchange, as in Cristian's algorithm and NTP). The
 * tightest bounds are kept for 10 s: the first sample after that starts them over, so a clock that drifts or
 * steps is followed; {@link clear} starts over at once (a new connection may reach a server whose clock
 * differs).
 */
export class RedisOffset {
  private hi = Number.POSITIVE_INFINITY;
  private lo = Number.NEGATIVE_INFINITY;
  /** This instance's time (ms) the current bounds began. */
  private windowAt = Number.NEGATIVE_INFINITY;

  /** A sample: Redis's time `t` of a call issued at `s0` and answered at `s1` (this instance's clock, Unix ms). */
  sample(t: number, s0: number, s1: number): void {
    if (!(t > 0)) return;
    if (s1 - this.windowAt >= RENEW_MS) {
      this.hi = Number.POSITIVE_INFINITY;
      this.lo = Number.NEGATIVE_INFINITY;
      this.windowAt = s1;
    }
    const hi = t + 1 - s0, lo = t - s1 - 1;
    if (hi < this.hi) this.hi = hi;
    if (lo > this.lo) this.lo = lo;
  }

  /** The smallest upper bound of Redis − local known lately (ms), or +Infinity when none is. */
  upper(): number {
    return this.hi;
  }

  /** The largest lower bound of Redis − local known lately (ms), or −Infinity when none is. */
  lower(): number {
    return this.lo;
  }

  /** Forgets the bounds. */
  clear(): void {
    this.hi = Number.POSITIVE_INFINITY;
    this.lo = Number.NEGATIVE_INFINITY;
    this.windowAt = Number.NEGATIVE_INFINITY;
  }
}

/** How long a set of bounds is kept before the next sample starts them over (ms). */
const RENEW_MS = 10_000;
