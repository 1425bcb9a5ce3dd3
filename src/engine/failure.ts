/**
 * The store failure rule, written once for every store-backed mode (strict today; lease and regions
 * beside it): when the store fails (down, frozen, circuit open, a Cluster slot lost, an unreadable state),
 * each check takes its policy's `onStoreError`:
 * - `open`: admitted, `closed`: denied (retry after CLOSED_RETRY_MS), both marked degraded, nothing counted;
 * - `local`: decided by this instance's kernel under the same key hashes (seeded with the key's last state
 *   learned from the store, where the mode knows one), marked degraded `local`.
 * Every such decision is counted by policy and rule (`sluice_degraded_decisions_total`).
 */
import type { Decision } from '../types/decision.js';
import type { PolicyRuntime } from './runtime.js';
import { degraded, type DegradedCounts } from './degraded.js';

/**
 * Counts one store-failed check of `rt` and gives its decision under `open` or `closed`, or null under
 * `local` (the caller hands it to the local decider's fallback).
 */
export function storeFailure(rt: PolicyRuntime, counts: DegradedCounts): Decision | null {
  const rule = rt.policy.onStoreError;
  counts.count(rt.policy.name, rule);
  return rule === 'local' ? null : degraded(rt, rule);
}
