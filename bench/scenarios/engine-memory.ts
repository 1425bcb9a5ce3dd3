/**
 * The engine scenario's memory jobs (bench/scenarios/engine.ts): bytes per key once `keys` distinct keys are
 * held. The kernel's is its linear memory; the JS stores' is heap growth between two full collections (the
 * child runs with --expose-gc).
 */
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createLimiter } from '../../src/index.js';
import { GROUP_SHIFT } from '../../src/shard/protocol.js';
import { MapBucket } from '../baselines/map-bucket.js';
import { fullGc } from '../lib/measure.js';
import { BATCH, BURST, LEASES, LIMIT, PERIOD_MS, benchKernel, decideHashes, keyHashes } from './engine-subjects.js';

/** A memory job: which store, filled with how many keys (and the kernel's variant). */
export interface MemorySpec {
  kind: 'memory';
  impl: 'kernel' | 'rlf' | 'map' | 'leases';
  keys: number;
  variant?: string;
}

/** Bytes per key and the keys held, with the figures they come from. */
export interface MemoryResult {
  bytesPerKey: number;
  keysHeld: number;
  detail: Record<string, number>;
}

/** Bytes per key once `s.keys` distinct keys are held. Runs with --expose-gc. */
export async function memory(s: MemorySpec): Promise<MemoryResult> {
  if (s.impl === 'kernel') {
    // The kernel's state is its linear memory: the table plus fixed I/O regions, allocated in init().
    const k = benchKernel(s.variant, s.keys);
    const { lo, hi } = keyHashes(s.keys);
    for (let base = 0; base < s.keys; base += BATCH) decideHashes(k, lo, hi, base, Math.min(BATCH, s.keys - base), GROUP_SHIFT);
    const st = k.stats();
    return {
      bytesPerKey: st.memoryBytes / st.keys,
      keysHeld: st.keys,
      detail: { memoryBytes: st.memoryBytes, slots: st.slots, tableBytesPerKey: (st.slots * 32) / st.keys, evictions: st.evictions },
    };
  }
  // JS stores: JS heap growth after a full GC. Keys are built on the fly so only what the store keeps counts.
  fullGc();
  let before = process.memoryUsage();
  let held: () => number;
  if (s.impl === 'rlf') {
    const rl = new RateLimiterMemory({ points: LIMIT, duration: PERIOD_MS / 1000 });
    for (let base = 0; base < s.keys; base += BATCH) {
      const ps: Array<Promise<unknown>> = [];
      for (let i = base; i < Math.min(s.keys, base + BATCH); i++) ps.push(rl.consume(`k${i}`));
      await Promise.all(ps);
    }
    held = () => (rl as unknown as { _memoryStorage: { _storage: Map<string, unknown> } })._memoryStorage._storage.size;
  } else if (s.impl === 'leases') {
    // the lease table is JS heap (src/engine/lease-table.ts); the limiter's kernel is linear memory, outside
    // heapUsed, and is made before the first measurement anyway
    const lim = await createLimiter({ policies: LEASES as never, shards: 0, maxKeys: s.keys });
    fullGc();
    before = process.memoryUsage();
    let taken = 0;
    for (let base = 0; base < s.keys; base += BATCH) {
      const ps: Array<Promise<{ allowed: boolean }>> = [];
      for (let i = base; i < Math.min(s.keys, base + BATCH); i++) ps.push(lim.acquire({ policy: 'bench', key: `k${i}` }));
      for (const d of await Promise.all(ps)) if (d.allowed) taken++;
    }
    // the limiter stays reachable until the measurement is taken
    held = () => (lim.policies.size > 0 ? taken : 0);
  } else {
    const mb = new MapBucket(LIMIT, PERIOD_MS, BURST);
    const now = Date.now();
    for (let i = 0; i < s.keys; i++) mb.take(`k${i}`, 1, now);
    held = () => mb.size;
  }
  fullGc();
  const after = process.memoryUsage();
  const keysHeld = held(); // keeps the store reachable until after the measurement
  return {
    bytesPerKey: (after.heapUsed - before.heapUsed) / keysHeld,
    keysHeld,
    detail: { heapDelta: after.heapUsed - before.heapUsed, externalDelta: after.external - before.external },
  };
}
