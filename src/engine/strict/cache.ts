/**
 * What one instance knows of its strict keys from Redis's answers: the exact over-limit cache, and the
 * last-known state the `local` failure rule starts a key from. The strict decider (src/engine/deciders/strict.ts)
 * reads and feeds it. Its parts, in this folder: the entries, one per strict key, and the shared keys' states
 * (table.ts, which {@link StrictCache} extends with learning from each answer); the over-limit answer
 * (over-limit.ts); the bounds of Redis's clock against this instance's (redis-clock.ts, on redis-offset.ts),
 * which the over-limit answer and a seed read; and a key's state rebuilt from an admission (state-rebuild.ts).
 *
 * Last known state: every answer (admitted or denied) updates the key's entry. A denial's states are exact;
 * after an admission the state is rebuilt from the answer's remaining and resetAfterMs, rounded toward fewer
 * tokens (see {@link rebuild}). When Redis fails and the policy's rule is `local`, the instance's kernel is
 * seeded with that state (once per stall: a later Redis answer makes the entry fresh again), so a key Redis
 * had exhausted stays exhausted, instead of starting from a full bucket. A leg on a key that checks share (a
 * guard's) is one kernel key for every tenant: its state is kept once per Redis key (SharedState, table.ts),
 * from whichever check's answer came last, and seeded once per stall. Seeding it from each tenant's own,
 * older copy would hand back tokens the guard had spent since, or start it full for a tenant not seen yet.
 */
import { LEG_WIDE } from '../../store/reply.js';
import { ALGORITHM_CODES } from '../../config/policy-spec.js';
import type { Decision } from '../../types/decision.js';
import { GUARD_KEY, type PolicyRuntime } from '../runtime.js';
import { KnownTable, oneVersion, type Known } from './table.js';
import { OverLimit } from './over-limit.js';
import { RedisClock } from './redis-clock.js';
import { rebuild } from './state-rebuild.js';

const SLIDING_LOG_CODE = ALGORITHM_CODES.sliding_log;

export class StrictCache extends KnownTable {
  /** Bounds of Redis time − this instance's clock (used only when Redis decides on its own TIME). */
  private readonly clock: RedisClock;
  /** Answers the checks the entries prove denied, at a time read on {@link clock}. */
  private readonly over: OverLimit;

  /**
   * @param maxKeys most entries held
   * @param redisTime whether Redis decides on its own TIME (else on the time the caller sends: no offset)
   * @param answer whether to answer over-limit checks (false: only learn, for the `local` rule)
   * @param oneClock whether every key is decided on one server's clock (Store.oneClock; false: a Redis Cluster),
   *   which the bounds measured on every call then follow
   * @param mono a monotonic clock (ms) to tell the wall clock's steps by, when the limiter's clock is the wall
   *   clock; null (a clock of the caller's, as tests give) takes the limiter's clock as it is
   */
  constructor(maxKeys: number, redisTime: boolean, answer = true, oneClock = true, mono: (() => number) | null = null) {
    super(maxKeys);
    this.clock = new RedisClock(redisTime, oneClock, mono);
    this.over = new OverLimit(this.clock, answer);
  }

  /** Over-limit answers given (the metric `sluice_store_over_limit_answers_total`). */
  get answers(): number {
    return this.over.answers;
  }

  /**
   * The limiter's time of the batch about to be decided (its clock, Unix ms): the monotonic clock is read once
   * for it, to tell a step of the wall clock since each denial was learned ({@link overLimit}).
   */
  at(now: number): void {
    this.clock.at(now);
  }

  /**
   * Wall − monotonic clock (ms) at the batch being decided ({@link at}; 0 without a monotonic clock): what a
   * call it sends gives back to {@link sample} and {@link learn} with its answer.
   */
  get lead(): number {
    return this.clock.lead;
  }

  /**
   * The decision Redis would give a check of `cost` on `e` now (this instance's clock, Unix ms), when the
   * entry proves a denial; else null (the check goes to Redis). Drops the entry's denial when `cost` is
   * smaller than the one denied or when the states would admit now (OverLimit.answer).
   */
  overLimit(e: Known, cost: number, now: number, epoch: number): Decision | null {
    return this.over.answer(e, cost, now, epoch);
  }

  /**
   * Learns from Redis's answer to a check of `cost` on `e`, sent under the runtime `sentRt` (the entry's own
   * unless a reload replaced it since) in the script call sent `callId`-th (StrictDecider's numbering; Infinity:
   * sent after any seed): `wide` holds its legs at row `base` ({@link LEG_WIDE} numbers each: outputs, Redis
   * time, and for a denied check the states).
   *
   * The states learned make the key (and its shared legs) due for seeding again in a later stall, unless the
   * call was already in flight when the key was last seeded (callId ≤ seedCall): such an answer predates the
   * local decisions made since that seed and cannot count them, so seeding the kernel from it again in the same
   * stall would hand back what they spent (measured: a stall that had admitted 3 of 4 locally admitted 3 more
   * after a call in flight was answered; test/unit/engine/strict-seed-inflight.test.ts). The kernel goes on
   * from its own state then; the answer's states are kept for the next stall. A call held at the seed
   * (StrictDecider.held) was not in flight: it is numbered as it is sent, after the seed, and its answer ends
   * the stall for the key like any later call's (numbered when built, a check added to it after the seed left
   * the next stall on the older seed's state: test/unit/engine/strict-seed-held.test.ts).
   */
  learn(e: Known, wide: ArrayLike<number>, base: number, cost: number, sentAt = Number.NEGATIVE_INFINITY, answeredAt = Number.POSITIVE_INFINITY,
    sentRt: PolicyRuntime = e.rt, callId = Number.POSITIVE_INFINITY, sentLead = this.clock.lead): void {
    const rt = e.rt;
    const s = e.states;
    if (e.stale > 0) {
      // sent before the key was dropped: the answer may predate the drop (a reset's DEL, a merge)
      e.stale--;
      e.deniedCost = -1;
      return;
    }
    if (!oneVersion(sentRt, rt)) {
      // sent before a reload that a later check of the key has brought to the entry (entry()): its rows are
      // the old runtime's legs, which need not be the entry's now (a version given in the config keeps the
      // keys when limits are added or removed), so reading them by the new runtime took another check's row
      // for a leg's state, and a denial could stand on it. Not learned: a later answer is, and a denial under
      // numbers that have changed proves nothing anyway.
      e.deniedCost = -1;
      return;
    }
    const denied = !Number.isNaN(wide[base * LEG_WIDE + 5]);
    // One leg on a key of its own (the common check), admitted: the answer's numbers wait on the entry itself,
    // and its state is rebuilt only when something reads it (statesOf: a stall's seed). Rebuilding it here, into
    // the entry's own Float64Array, cost a cache miss per admitted check (~5 % of the client's samples,
    // --cpu-prof). Such a check has no shared leg, so the shared states below are not touched either.
    e.pending = !denied && rt.legCount === 1 && e.key !== GUARD_KEY;
    if (e.pending) {
      e.pendingR = wide[base * LEG_WIDE + 1];
      e.pendingZ = wide[base * LEG_WIDE + 2];
      e.pendingT = wide[base * LEG_WIDE + 4];
    } else {
      for (let j = 0; j < rt.legCount; j++) {
        const r = (base + j) * LEG_WIDE;
        if (denied) {
          s[3 * j] = wide[r + 5];
          s[3 * j + 1] = wide[r + 6];
          s[3 * j + 2] = wide[r + 7];
        } else {
          rebuild(rt, j, wide[r + 1], wide[r + 2], wide[r + 4], s, 3 * j);
        }
      }
    }
    e.hi = wide[base * LEG_WIDE + 4] + 1 - sentAt;
    e.wallLead = sentLead;
    e.lo = wide[base * LEG_WIDE + 4] - answeredAt - 1;
    e.loLead = this.clock.answerLead;
    e.deniedCost = denied && cost > 0 ? cost : -1;
    // a sliding log (code 5) keeps its entries in Redis and the reply carries numbers only: no TS twin can
    // follow it as entries leave (lua-algorithms.ts), so a check with such a leg is never answered here
    for (let j = 0; j < rt.legCount; j++) if (rt.legLimits[j].algorithmCode === SLIDING_LOG_CODE) e.deniedCost = -1;
    // onLimit: delay: a denied check may be admitted with a delay by the next call (the TS twin has no delay)
    if (rt.delayed !== null || rt.legDelayMs !== null) e.deniedCost = -1;
    if (callId > e.seedCall) e.seeded = false;
    e.epoch = e.sentEpoch;
    // the shared legs' states, once per key for every tenant: this answer is the latest Redis gave for them
    this.keepShared(e, callId);
  }

  /**
   * Whether leg j of a check on `rt` has a state to seed the local kernel with, the one at s[at] (w0, w1,
   * lastSeen): one was learned, and it is not a sliding log's (whose entries stay in Redis; see {@link rebuild}).
   */
  seedable(rt: PolicyRuntime, j: number, s: Float64Array, at: number): boolean {
    return s[at + 2] >= 0 && rt.legLimits[j].algorithmCode !== SLIDING_LOG_CODE;
  }

  /**
   * A clock sample: Redis's time `t` of a call issued at `s0` and answered at `s1` (this instance's clock), sent
   * by a batch whose {@link lead} was `sentLead` (RedisClock.sample).
   */
  sample(t: number, s0: number, s1: number, sentLead?: number): void {
    this.clock.sample(t, s0, s1, sentLead);
  }

  /**
   * A Redis time `t` as this instance's clock reads it, for seeding the kernel at `now`, from the bounds `lo`
   * and `loLead` its state's answer gave (Known.lo, Known.loLead), `now` read at the lead `nowLead`
   * (RedisClock.toLocal).
   */
  toLocal(t: number, now: number, lo?: number, loLead?: number, nowLead?: number): number {
    return this.clock.toLocal(t, now, lo, loLead, nowLead);
  }

  /**
   * A new connection to the store (Redis may have restarted without its data, or failed over to a server
   * whose clock differs): every denial goes, and the clock bounds start over.
   */
  reconnected(): void {
    this.clearDenials();
    this.clock.clear();
  }
}
