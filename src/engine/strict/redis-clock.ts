/**
 * Where Redis's clock stands against this instance's, as the strict cache (src/engine/strict/cache.ts) reads
 * it: the time an over-limit denial is evaluated at (src/engine/strict/over-limit.ts), and the local time a
 * state learned from Redis seeds the kernel at.
 *
 * Clock: Redis decides on its TIME. Each answered call bounds Redis − local (src/engine/strict/redis-offset.ts:
 * Redis's time t, seen between this instance's readings s0 before the call and s1 after it, puts the offset
 * within [t − s1 − 1, t + 1 − s0]), and each entry keeps the bounds its own answer gave. A denial is evaluated
 * at now + the upper bound its own answer gave (the clock of the server holding the key: on a Redis Cluster,
 * masters' clocks may differ), plus any step back this instance's wall clock made since (read against a
 * monotonic clock, when the limiter runs on the wall clock: a clock of the caller's is taken as it is); and on
 * a store of one clock (not a Cluster), at now + the smallest upper bound seen lately (on the wall clock or the
 * monotonic one, the larger) when that is larger (Redis's clock stepped ahead): so at a time no earlier than
 * Redis's, and a denial it gives, Redis gives too; the wait it reports is at most that call's round trip short
 * of Redis's, 1 ms more for the monotonic reading, and after the wall clock stepped ahead, the step more (a
 * step ahead cannot be told from the monotonic clock stopping in a suspend, which must not make the cache deny
 * what Redis admits). The smallest bounds are renewed every 10 s, so a clock that drifts or steps is followed,
 * and start over on every new connection (a failover may reach a server whose clock differs). On a Cluster
 * they are not used: one master's samples would move every key's evaluation (a master 4 s ahead, sampled
 * first after a renewal, shortened the waits of keys on the others by 4 s), so there a master's clock stepping
 * ahead is not followed while its denials are held. With `clock: 'limiter'` the script uses the caller's time:
 * no offset.
 */
import { RedisOffset } from './redis-offset.js';

/**
 * The bounds of Redis time − this instance's clock (on the wall clock and on the monotonic one), and the wall
 * clock's lead over the monotonic one at the batch being decided and at the last answer. One per strict cache.
 */
export class RedisClock {
  /** Bounds of Redis time − this instance's clock (used only when Redis decides on its own TIME). */
  private readonly offset = new RedisOffset();
  /**
   * The same bounds of Redis time − this instance's monotonic clock (each sample read at its send's lead; the
   * limiter's clock as it is without one), whose upper bound {@link upperTime} reads on a store of one clock:
   * the wall clock's, taken before a step ahead, had shortened every wait by the step until the next answer.
   */
  private readonly monoOffset = new RedisOffset();
  /** Wall − monotonic clock (ms) at the batch being decided ({@link at}). */
  private batchLead = 0;
  /** Wall − monotonic clock (ms) when the last answer was taken ({@link sample}; 0 without a monotonic clock). */
  private lastAnswerLead = 0;

  /**
   * @param redisTime whether Redis decides on its own TIME (else on the time the caller sends: no offset)
   * @param oneClock whether every key is decided on one server's clock (Store.oneClock; false: a Redis Cluster),
   *   which the bounds measured on every call then follow
   * @param mono a monotonic clock (ms) to tell the wall clock's steps by, when the limiter's clock is the wall
   *   clock; null (a clock of the caller's, as tests give) takes the limiter's clock as it is
   */
  constructor(readonly redisTime: boolean, private readonly oneClock = true, private readonly mono: (() => number) | null = null) {}

  /**
   * The limiter's time of the batch about to be decided (its clock, Unix ms): the monotonic clock is read once
   * for it, to tell a step of the wall clock since each denial was learned ({@link upperTime}).
   */
  at(now: number): void {
    if (this.mono !== null) this.batchLead = now - this.mono();
  }

  /**
   * Wall − monotonic clock (ms) at the batch being decided ({@link at}; 0 without a monotonic clock): what a
   * call it sends gives back to {@link sample} and StrictCache.learn with its answer.
   */
  get lead(): number {
    return this.batchLead;
  }

  /**
   * Wall − monotonic clock (ms) when the last answer was taken ({@link sample}; 0 without a monotonic clock):
   * an entry learned from that answer keeps it (Known.loLead), for {@link toLocal}.
   */
  get answerLead(): number {
    return this.lastAnswerLead;
  }

  /**
   * A clock sample: Redis's time `t` of a call issued at `s0` and answered at `s1` (this instance's clock), sent
   * by a batch whose {@link lead} was `sentLead`.
   */
  sample(t: number, s0: number, s1: number, sentLead = this.batchLead): void {
    if (!this.redisTime) return;
    this.offset.sample(t, s0, s1);
    const m1 = this.mono === null ? s1 : this.mono();
    this.monoOffset.sample(t, s0 - sentLead, m1);
    this.lastAnswerLead = s1 - m1;
  }

  /**
   * The time to evaluate a denial at, at this instance's `now` (Unix ms, of the batch {@link at} was given): no
   * earlier than Redis's time on the server holding the key, whose answer gave the upper bound `hi` of Redis −
   * this instance's clock when the wall clock led the monotonic one by `wallLead` (Known.hi, Known.wallLead);
   * `now` itself when Redis decides on the caller's time.
   *
   * Its own answer's bound, moved later by a step back the wall clock made since (the bound is that much larger
   * now), rounded up (the monotonic clock reads fractions of a ms); on one clock, the bound renewed from every
   * answer since when that is larger (Redis's clock stepped ahead meanwhile; none seen since a reconnection:
   * the own bound alone), read on the wall clock and on the monotonic one, the larger. Never moved earlier: a
   * wall clock ahead of the monotonic one since is a step ahead (the bound is smaller now) or the monotonic
   * clock stopped in a suspend (it is not), which cannot be told apart; taken for a step, a suspend of D had
   * kept denying for D after Redis refilled. So after a step ahead a denial is evaluated that much late, and
   * its wait reported that much short: the check goes to Redis, which decides it.
   */
  upperTime(now: number, hi: number, wallLead: number): number {
    if (!this.redisTime) return now;
    const back = Math.ceil(wallLead - this.batchLead);
    let t = now + hi + (back > 0 ? back : 0);
    const u = this.oneClock ? this.offset.upper() : Number.POSITIVE_INFINITY;
    if (u !== Number.POSITIVE_INFINITY) {
      // (the two take the same samples: both are finite here; a guard all the same, as +Infinity would hold
      // the denial for good)
      const um = Math.ceil(this.monoOffset.upper() - this.batchLead);
      const a = um > u && um !== Number.POSITIVE_INFINITY ? um : u;
      if (now + a > t) t = now + a;
    }
    return t;
  }

  /**
   * A Redis time as this instance's clock reads it, for seeding the kernel: converted with a lower bound of the
   * offset (so the local time is no earlier than the true one: less refill, never more), `lo` the one the
   * state's own answer gave (Known.lo, SharedState.lo) when known, taken when the wall clock led the monotonic
   * one by `loLead`, else the largest seen lately (on the wall clock or the monotonic one, the later time);
   * never past `now`. A wall clock that went ahead of the monotonic one since moves the time as late: a step
   * ahead (Redis's time did not move with it; taken as it is, the kernel refilled the step's worth more than
   * Redis) or a suspend (it did: the kernel refills the suspend's worth less, the safe side). `nowLead` is the
   * wall − monotonic clock at which `now` was read (a failed call's checks are decided at their send's `now`,
   * on that send's lead: a batch decided since, after a step back, has a smaller one).
   */
  toLocal(t: number, now: number, lo = Number.NEGATIVE_INFINITY, loLead = 0, nowLead = this.batchLead): number {
    if (!this.redisTime) return Math.min(t, now);
    let local: number;
    if (lo !== Number.NEGATIVE_INFINITY) {
      // the answer's own bound (the key's server: a Cluster's masters may disagree)
      const ahead = Math.ceil(nowLead - loLead);
      local = t - lo + (ahead > 0 ? ahead : 0);
    } else {
      // else, on one clock, the largest seen lately
      const l = this.oneClock ? this.offset.lower() : Number.NEGATIVE_INFINITY;
      if (l === Number.NEGATIVE_INFINITY) return now;
      local = t - l;
      const m = Math.ceil(t - this.monoOffset.lower() + nowLead);
      if (m > local && m !== Number.POSITIVE_INFINITY) local = m;
    }
    return Math.min(now, local);
  }

  /**
   * Forgets the bounds (a new connection to the store: Redis may have failed over to a server whose clock
   * differs). The leads stay: they are this instance's clocks only.
   */
  clear(): void {
    this.offset.clear();
    this.monoOffset.clear();
  }
}
