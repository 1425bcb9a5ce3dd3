/**
 * Range sharding from the hash's high 32 bits: shard = floor(hi · N / 2^32). Ranges, not modulo, so the
 * owner of a key depends on its hash's top bits only (the kernel's table uses the low bits). Exact: hi · N < 2^38.
 */
export function shardOf(hashHi: number, shards: number): number {
  return Math.floor((hashHi * shards) / 4294967296);
}
