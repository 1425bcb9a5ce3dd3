/**
 * Whether a peeked key admits a cost now, and if not when it could next: the rules `/v1/stream` subscriptions
 * push and re-arm by. Rate-limit rules, so they live in the engine; the stream only schedules by them.
 */
import type { Decision } from '../types/decision.js';
import type { CompiledLimit, CompiledPolicy } from '../config/policy-spec.js';

/**
 * A lower bound, in ms, on the wait before a key whose peek (cost 0) gave `d` could admit `cost` tokens, under
 * the policy set in force (so a push confirmed by a peek at that time is never sent early, and is late by at
 * most a tick). `remaining` is whole tokens and the state up to one token more. Fixed windows only free tokens
 * at the window's end; token buckets, GCRA and sliding windows free at most `limit` tokens per period.
 */
export class ReadyAfter {
  /** Limits by name for the policy set in force, rebuilt when a reload replaces the set. */
  private byName = new Map<string, CompiledLimit>();
  private of: ReadonlyMap<string, CompiledPolicy> | null = null;

  /** @param policies the set in force (the limiter's `policies`), read at each call. */
  constructor(private readonly policies: () => ReadonlyMap<string, CompiledPolicy>) {}

  /**
   * Whether a check of `cost` would be admitted now, by the peek (cost 0) that gave `d`: it has `cost` tokens,
   * or the store failed and the policy fails `open` (any check is admitted, marked degraded, until it answers
   * again). The push that follows says so (`degradedBy: 'open'`).
   */
  admits(d: Decision, cost: number): boolean {
    return d.remaining >= cost || (d.degraded === true && d.degradedBy === 'open');
  }

  /**
   * The wait in ms (≥ 1) before the binding limit named `d.policy` could admit `cost`; 1,000 when no limit of
   * that name is in force (a reload removed it) or its limit is 0 (it never admits: the next peek says so).
   * A peek that was itself denied (the store failed and the policy fails `closed`: nothing is admitted, nor
   * known) waits its retryAfterMs, so a stall is not peeked at every tick.
   */
  waitMs(d: Decision, cost: number): number {
    if (!d.allowed) return Math.max(1, d.retryAfterMs ?? 1000);
    const l = this.limitNamed(d.policy);
    if (l === undefined || l.limit === 0) return 1000;
    if (l.algorithm === 'fixed_window') return Math.max(1, d.resetAfterMs);
    const missing = cost - d.remaining - 1;
    return Math.max(1, Math.floor((missing * l.periodMs) / l.limit));
  }

  private limitNamed(name: string): CompiledLimit | undefined {
    const set = this.policies();
    if (set !== this.of) {
      this.byName = new Map();
      for (const p of set.values()) for (const l of p.limits) this.byName.set(l.name, l);
      this.of = set;
    }
    return this.byName.get(name);
  }
}
