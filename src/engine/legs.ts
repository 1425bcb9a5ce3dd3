/**
 * The leg writer: a check's legs (one per limit of its group, its guard's last) as kernel input rows and as
 * store keys.
 */
import { GROUP_SHIFT, LEG_IN } from '../shard/protocol.js';
import { storeKey } from '../keys/store-key.js';
import { writeLegHash, type PolicyRuntime } from './runtime.js';
import type { Batch } from './queue.js';

/**
 * Writes check i of `b` as kernel input rows at row `base` of `legs`: each leg's hash, its limit id (the
 * first leg's carrying the group's length) and the cost.
 */
export function writeLegs(legs: Float64Array, base: number, b: Batch, i: number): void {
  const rt = b.rts[i];
  const lo = b.hashes[2 * i], hi = b.hashes[2 * i + 1];
  const cost = b.costs[i];
  for (let j = 0; j < rt.legCount; j++) {
    const r = (base + j) * LEG_IN;
    writeLegHash(rt, lo, hi, j, legs, r);
    legs[r + 2] = rt.limitIds[j] + (j === 0 ? rt.legCount * GROUP_SHIFT : 0);
    legs[r + 3] = cost;
  }
}

/** The store key of leg j of a check on `key` (a guard leg's is the guard's own). */
export function legKey(prefix: string, rt: PolicyRuntime, key: string, j: number): string {
  const own = rt.saltLo.length;
  return j < own ? storeKey(prefix, rt.policy.name, rt.policy.version, key, j) : rt.guardStoreKeys![j - own];
}
