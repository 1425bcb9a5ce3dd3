import type { SyncWriter } from '../../src/store/sync.js';
import type { SyncLeg } from '../../src/store/sync-deltas.js';

/** Leg number `n` for SyncWriter tests: Redis key `k<n>`, a fixed window of 100 per second unless `o` says. */
export function leg(n: number, o: Partial<SyncLeg> = {}): SyncLeg {
  return {
    redisKey: `k${n}`, algorithmCode: 2, limit: 100, periodMs: 1000, burst: 100,
    limitId: 0, hashLo: (n * 2654435761) >>> 0, hashHi: n, shard: -1, ns: 0, ...o,
  };
}

/**
 * Records `cost` on `l` as the front does: bump, and describe the leg when the writer does not know it.
 * @returns true when the writer knew the leg
 */
export function record(w: SyncWriter, l: SyncLeg, cost: number): boolean {
  if (w.bump(l.hashLo, l.hashHi, l.limitId, l.ns, cost)) return true;
  w.add(l, cost);
  return false;
}
