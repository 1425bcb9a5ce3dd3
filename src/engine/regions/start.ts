/**
 * Starts a region's machinery for a limiter (src/limiter.ts, with the `region` option): the watched-key set
 * the lease decider reports to, and the reconciler on its own connections to the region's Redis and the
 * global one. Loaded only when a region is configured.
 */
import type { CompiledPolicy } from '../../config/policy-spec.js';
import type { RegionSettings } from '../../config/regions.js';
import type { RedisOptions } from '../../store/redis.js';
import { GlobalShareStore, RegionShareStore } from '../../store/region-share.js';
import { Reconciler } from './reconciler.js';
import { ActiveKeys } from './usage.js';

export interface RegionRuntime {
  /** The RegionUsage hook for the lease decider. */
  usage: ActiveKeys;
  reconciler: Reconciler;
}

/** How long one reconciler call may take, in ms: it is never on a check's path. */
export function reconcileTimeoutMs(region: RegionSettings): number {
  return Math.min(5000, Math.max(500, 2 * region.reconcileIntervalMs));
}

export function startRegion(region: RegionSettings, redis: RedisOptions, policies: () => ReadonlyMap<string, CompiledPolicy>,
  onError?: (where: 'region' | 'global', e: unknown) => void): RegionRuntime {
  const timeout = reconcileTimeoutMs(region);
  const usage = new ActiveKeys(region.maxActiveKeys);
  const reconciler = new Reconciler({
    region, regional: RegionShareStore.create(redis, timeout),
    global: region.globalRedis === null ? null : GlobalShareStore.create(region.globalRedis, timeout),
    active: usage, policies, electionKey: `${redis.prefix ?? 'sluice:'}region:${region.name}:reconciler`, prefix: redis.prefix ?? 'sluice:', onError,
  });
  reconciler.start();
  return { usage, reconciler };
}
