/**
 * What the lease decider needs from regions: the default share of a `scope: global` limit (what the lease
 * script uses until the reconciler writes the key's share hash) and the RegionUsage hook, told once per key
 * the decider starts holding.
 */
import type { CompiledPolicy } from '../../config/policy-spec.js';
import { regionDefaultShare, type RegionSettings, type Share } from '../../config/regions.js';
import type { RegionUsage } from './usage.js';

export interface LeaseRegionHooks {
  shareOf(policy: CompiledPolicy, limitIndex: number): Share | null;
  touched(policy: string, key: string, stateKey: string, limitIndex?: number): void;
}

export function leaseRegionHooks(region: RegionSettings, usage: RegionUsage): LeaseRegionHooks {
  return {
    shareOf: (policy, j) => (policy.scope === 'global' ? regionDefaultShare(policy.limits[j], region) : null),
    touched: (policy, key, stateKey, limitIndex) => usage.touched(policy, key, stateKey, limitIndex),
  };
}
