/**
 * The over-limit answer: a check on a strict key that Redis is known to deny is answered by this instance,
 * from what the strict cache (src/engine/strict/cache.ts) learned of the key.
 *
 * Over-limit: when Redis denies a check of cost c on a key, its reply carries the state of every leg the check
 * was decided on, at Redis time t (lua/check.lua). Every other caller, on every instance, only spends from
 * those states (refill is a function of time alone), so until the state has refilled enough, no check of cost
 * ≥ c on that key can be admitted by anyone. This instance then answers such checks itself: it evaluates the
 * kept states at the current Redis time with the very arithmetic of the script (src/store/lua-algorithms.ts),
 * and answers the denial that gives, with its remaining wait; once that evaluation would admit, the check goes
 * to Redis and the entry is dropped. A calendar window's leg is evaluated with the window ends a call sent now
 * would carry (src/engine/calendar-args.ts), so a denial learned in a window that has ended since is not
 * answered (the count no longer holds, as in the script). A sliding log's leg is never answered: the reply
 * carries numbers only, not the log, so a later remaining cannot be computed. A check of a smaller cost (which
 * Redis may admit, changing the state), a policy reload, an admin reset on any instance
 * (src/engine/reset-channel.ts) and a sync merge into the key drop the entry too; a call in flight when the
 * entry is dropped is not learned from (its answer may predate the drop); and every denial is forgotten when
 * the Redis connection or the reset channel (re)opens (Redis may have restarted without its data, or failed
 * over; a reset may have been missed; on a Redis Cluster, whenever a master's connection is lost:
 * Store.onConnect). With one cost per key (the usual case) the answer equals Redis's, field for field; with a
 * smaller cost spent elsewhere meanwhile, Redis's remaining could be lower and its wait longer, the denial
 * stands either way. So with a guard: every tenant on every instance spends its key, so the guard's state an
 * entry holds is as of its last answer, and Redis may then name the guard as the binding limit, with a longer
 * wait.
 *
 * The current Redis time is taken from above (src/engine/strict/redis-clock.ts): a denial this evaluation
 * gives, Redis gives too.
 */
import type { Decision } from '../../types/decision.js';
import { compose } from '../decision.js';
import { evaluateLeg } from '../../store/lua-algorithms.js';
import { MAX_GROUP, LEG_OUT } from '../../shard/protocol.js';
import { scriptBurst, scriptPeriod } from '../calendar-args.js';
import { CALENDAR_WINDOW_CODE } from '../../config/policy-spec.js';
import type { Known } from './table.js';
import type { RedisClock } from './redis-clock.js';

/** Answers over-limit checks from the entries' states, on the cache's clock; one per strict cache. */
export class OverLimit {
  /** Over-limit answers given (the metric `sluice_store_over_limit_answers_total`). */
  answers = 0;
  /** Each leg's outputs of one evaluation, as compose() reads them. */
  private readonly scratch = new Float64Array(MAX_GROUP * LEG_OUT);

  /**
   * @param clock the cache's bounds of Redis's clock
   * @param enabled whether to answer over-limit checks (false: the cache only learns, for the `local` rule)
   */
  constructor(private readonly clock: RedisClock, private readonly enabled: boolean) {}

  /**
   * The decision Redis would give a check of `cost` on `e` now (this instance's clock, Unix ms), when the
   * entry proves a denial; else null (the check goes to Redis). Drops the entry's denial when `cost` is
   * smaller than the one denied or when the states would admit now.
   */
  answer(e: Known, cost: number, now: number, epoch: number): Decision | null {
    if (e.deniedCost < 0 || !this.enabled) return null;
    if (cost < e.deniedCost || e.inflight > 0 || epoch !== e.epoch || (this.clock.redisTime && e.hi === Number.POSITIVE_INFINITY)) {
      if (cost < e.deniedCost) e.deniedCost = -1;
      return null;
    }
    // at a time no earlier than Redis's for the key (RedisClock.upperTime)
    const t = this.clock.upperTime(now, e.hi, e.wallLead);
    const rt = e.rt;
    const out = this.scratch;
    const s = e.states;
    for (let j = 0; j < rt.legCount; j++) {
      const l = rt.legLimits[j];
      if (l.algorithmCode === CALENDAR_WINDOW_CODE) {
        // the windows move: the ends a call sent now would carry (at this instance's `now`, as decide() sends
        // them), so a denial learned in a window that has ended since is evaluated in the current one
        evaluateLeg(CALENDAR_WINDOW_CODE, l.limit, scriptPeriod(l, now), scriptBurst(l, now), s[3 * j], s[3 * j + 1], s[3 * j + 2], cost, t, out, j * LEG_OUT);
      } else {
        evaluateLeg(l.algorithmCode, l.limit, l.periodMs, l.burst, s[3 * j], s[3 * j + 1], s[3 * j + 2], cost, t, out, j * LEG_OUT);
      }
    }
    const d = compose(out, 0, rt);
    if (d instanceof Error || d.allowed) {
      e.deniedCost = -1;
      return null;
    }
    this.answers++;
    return d;
  }
}
