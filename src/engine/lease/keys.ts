import { storeKey } from '../../keys/store-key.js';

/**
 * The Redis key of a leased leg's state: the strict key's name (so the same hash tag, one slot per check key in
 * a Redis Cluster) with `:lease`, a HASH (lua/lease.lua). Its own name: a policy moved from strict to lease
 * under one version never reads a strict state as a lease state. Regions keep a key's share beside it, in
 * `<this>:share`.
 */
export function leaseStateKey(prefix: string, policy: string, version: string, key: string, limitIndex: number): string {
  return `${storeKey(prefix, policy, version, key, limitIndex)}:lease`;
}
