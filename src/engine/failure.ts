/**
 * The store failure rule, written once for every store-backed mode (strict today; lease and regions
 * beside it): when the store fails (down, frozen, circuit open, a Cluster slot lost, an unreadable state),
 * each check takes its policy's `onStoreError` (or its guard's, when stricter: PolicyRuntime.onStoreError):
 * - `open`: admitted, `closed`: denied (retry after CLOSED_RETRY_MS), both marked degraded, nothing counted;
 * - `local`: decided by this instance's kernel under the same key hashes (seeded with the key's last state
 *   learned from the store, where the mode knows one), marked degraded `local`.
 * Every such decision is counted by policy and rule (`sluice_degraded_decisions_total`): `open` and `closed`
 * here, `local` by the local decider once the kernel has decided (a check it fails is an error, not counted).
 */
import type { Decision } from '../types/decision.js';
import type { PolicyRuntime } from './runtime.js';
import { capacityOf } from '../config/policy-spec.js';
import { neverReason } from './decision.js';
import { degraded, type DegradedCounts } from './degraded.js';

/**
 * Gives a store-failed check of `rt` at `cost` (tokens) its decision under `open` or `closed`, counted, or null
 * under `local` (the caller hands it to the local decider's fallback, which counts it once decided). A cost no state could ever
 * admit (above a leg's capacity, or any cost on a limit of 0) is denied for good under every rule, as the
 * store would deny it (`retryAfterMs: null` and the reason), still marked degraded: `open` admitting it would
 * promise what the policy never gives.
 */
export function storeFailure(rt: PolicyRuntime, counts: DegradedCounts, cost: number): Decision | null {
  const rule = rt.onStoreError;
  // a `local` decision is counted where the kernel makes it (LocalDecider): one it fails is no decision
  if (rule === 'local') return null;
  counts.count(rt.policy.name, rule);
  const j = neverLeg(rt, cost);
  if (j < 0) return degraded(rt, rule);
  const l = rt.legLimits[j];
  return {
    allowed: false, limit: l.limit, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy: l.name,
    reason: neverReason(l.limit), degraded: true, degradedBy: rule,
  };
}

/** The first leg of `rt` no state could ever admit `cost` on, or −1. */
function neverLeg(rt: PolicyRuntime, cost: number): number {
  if (cost <= 0) return -1;
  for (let j = 0; j < rt.legCount; j++) {
    const l = rt.legLimits[j];
    if (l.limit === 0 || cost > capacityOf(l)) return j;
  }
  return -1;
}
