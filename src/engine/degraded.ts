import type { Decision } from '../types/decision.js';
import type { PolicyRuntime } from './runtime.js';
import type { StoreErrorRule } from '../config/policy-spec.js';

/** How long a fail-closed denial asks the client to wait, in ms. */
export const CLOSED_RETRY_MS = 1000;

/** How a decision not made by Redis was made: a store-backed policy's onStoreError (PolicyRuntime.onStoreError). */
export type DegradedRule = StoreErrorRule;

/**
 * The decision a store-backed check gets when the store failed and its policy fails `open` (admitted) or
 * `closed` (denied, retry after {@link CLOSED_RETRY_MS}). Marked `degraded`, with the rule: nothing was
 * counted here (but the call that failed may still run in Redis later: a late spend).
 */
export function degraded(rt: PolicyRuntime, rule: 'open' | 'closed'): Decision {
  const limit = rt.legLimits[0];
  return rule === 'open'
    ? { allowed: true, limit: limit.limit, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, policy: limit.name, degraded: true, degradedBy: 'open' }
    : { allowed: false, limit: limit.limit, remaining: 0, resetAfterMs: CLOSED_RETRY_MS, retryAfterMs: CLOSED_RETRY_MS, policy: limit.name, degraded: true, degradedBy: 'closed' };
}

/** Marks a decision the instance's kernel made because Redis failed (the `local` rule). */
export function markLocal(d: Decision): void {
  d.degraded = true;
  d.degradedBy = 'local';
}

/** Decisions not made by Redis, by policy and rule (the metric `sluice_degraded_decisions_total`). */
export class DegradedCounts {
  private readonly byPolicy = new Map<string, Record<DegradedRule, number>>();

  /**
   * Makes `policy`'s counts exist, at 0, before any decision is degraded: a store-backed policy's series are
   * there from the start, so a rate over them (the shipped alert) sees the first degraded decisions too (a
   * series that appears at its first value hides that value from rate()).
   */
  declare(policy: string): void {
    if (!this.byPolicy.has(policy)) this.byPolicy.set(policy, { open: 0, closed: 0, local: 0 });
  }

  count(policy: string, rule: DegradedRule): void {
    let c = this.byPolicy.get(policy);
    if (c === undefined) this.byPolicy.set(policy, (c = { open: 0, closed: 0, local: 0 }));
    c[rule]++;
  }

  /** Policy name → counts by rule, since start. */
  snapshot(): Record<string, Record<DegradedRule, number>> {
    const out: Record<string, Record<DegradedRule, number>> = {};
    for (const [p, c] of this.byPolicy) out[p] = { ...c };
    return out;
  }
}

/** The wire code of a decision's degraded rule: 0 none (decided by Redis or not store-backed), 1 open, 2 closed, 3 local. */
export function degradedCode(d: { degraded?: boolean; degradedBy?: DegradedRule }): number {
  if (d.degraded !== true) return 0;
  return d.degradedBy === 'open' ? 1 : d.degradedBy === 'closed' ? 2 : 3;
}
