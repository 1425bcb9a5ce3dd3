/**
 * Lease mode on a Redis Cluster (three masters the test starts): each lease call touches one key's lease
 * state (and its share) under one hash tag, so it runs on that key's slot. Two limiters over 32 keys of a
 * lease policy of two limits, guarded, admit exactly the limit per key; lease states
 * land on every master; no store call fails.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { insideWindow } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';

const HOUR = 3_600_000;
/** No idle return during the test (its rounds can be seconds apart here): every token leased is spent. */
const LEASE = { ttlMs: 60_000, idleMs: 60_000 };
let c: TestCluster;
const open: Limiter[] = [];

beforeAll(async () => {
  c = await startCluster();
}, 60_000);
afterAll(async () => {
  await Promise.all(open.map((l) => l.close()));
  await c?.stop();
});

describe('lease mode on a Redis Cluster', () => {
  it('two limiters, 32 keys over every master, a guarded policy of two limits: exact per key and for the guard', async () => {
    const policies: Record<string, PolicySpec> = {
      g: { algorithm: 'token_bucket', limit: 10_000, period: HOUR, consistency: 'lease', lease: LEASE },
      t: { limits: [{ algorithm: 'fixed_window', limit: 3, period: HOUR }, { algorithm: 'gcra', limit: 10, period: HOUR }], guard: 'g', consistency: 'lease', lease: LEASE },
    };
    const a = await createLimiter({ policies, redis: { cluster: c.nodes, prefix: 'cl:', timeoutMs: 1000 } });
    const b = await createLimiter({ policies, redis: { cluster: c.nodes, prefix: 'cl:', timeoutMs: 1000 } });
    open.push(a, b);
    const keys = Array.from({ length: 32 }, (_, i) => `tenant-${i}`);
    // 3 per key by one hour's fixed window (epoch-aligned): its five rounds (seconds apart on a loaded machine)
    // all in one hour, or a key could be admitted 3 more in the next
    await insideWindow(c.clients[0], HOUR, 15_000);
    const admitted = new Map<string, number>();
    for (let round = 0; round < 5; round++) {
      const ds = await Promise.all(keys.flatMap((key) => [a, b].map(async (l) => ({ key, d: await l.check({ policy: 't', key, cost: 1 }) }))));
      for (const { key, d } of ds) {
        expect(d.degraded).toBeUndefined();
        if (d.allowed) admitted.set(key, (admitted.get(key) ?? 0) + 1);
      }
    }
    // 10 checks per key, 3 admitted per key by its fixed window (the guard, 10,000, does not bind)
    expect(keys.map((k) => admitted.get(k) ?? 0)).toStrictEqual(keys.map(() => 3));
    const stored = await c.keysUnder('cl:');
    expect(new Set(stored.map((k) => k.node)).size).toBe(3);
    expect(stored.every((k) => k.key.endsWith(':lease'))).toBe(true);
    for (const l of [a, b]) {
      const st = await l.stats();
      expect(st.lease!.failedCalls).toBe(0);
    }
  }, 60_000 + 15_000); // and insideWindow's longest wait
});
