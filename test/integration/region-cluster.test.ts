/**
 * A region whose own Redis is a Redis Cluster (three masters): the lease state and its share hash share a
 * hash tag, so the lease script and the reconciler's share script each run on the key's own slot; the global
 * Redis is one server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/limiter.js';
import { storeKey } from '../../src/keys/store-key.js';
import type { Limiter } from '../../src/types.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';

const POLICY = { algorithm: 'token_bucket', limit: 30, period: '1h', consistency: 'lease', scope: 'global', version: 'c1' } as const;
const KEYS = ['t-1', 't-2', 't-3', 't-4', 't-5', 't-6'];

let c: TestCluster;
let global: SharedRedis;
let limiter: Limiter;

beforeAll(async () => {
  [c, global] = await Promise.all([startCluster(), sharedRedis()]);
  limiter = await createLimiter({
    policies: { api: POLICY }, redis: { cluster: c.nodes, timeoutMs: 1000 },
    region: { name: 'eu', names: ['eu', 'us', 'ap'], reconcileIntervalMs: 50, globalRedis: global.url },
  });
}, 60_000);
afterAll(async () => {
  await limiter?.close();
  await Promise.all([c?.stop(), global?.stop()]);
});

describe('a region on a Redis Cluster', () => {
  it('decides each global key within its share on its own slot, and the reconciler reports every key', async () => {
    for (const key of KEYS) {
      let ok = 0;
      for (let i = 0; i < 12; i++) if ((await limiter.check({ policy: 'api', key, cost: 1 })).allowed) ok++;
      expect(ok).toBe(10);
    }
    const nodes = new Set((await c.keysUnder('sluice:')).filter((k) => k.key.endsWith(':lease')).map((k) => k.node));
    expect(nodes.size).toBeGreaterThan(1); // the keys are spread over masters
    const end = Date.now() + 10_000;
    const recorded = async (): Promise<number> =>
      (await Promise.all(KEYS.map((k) => global.client.exists(`${storeKey('sluice:', 'api', 'c1', k, 0)}:lease:global`)))).reduce((a, b) => a + b, 0);
    while ((await recorded()) < KEYS.length && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    expect(await recorded()).toBe(KEYS.length);
    expect((await limiter.stats()).region).toMatchObject({ leader: true, activeKeys: KEYS.length, regionErrors: 0, globalErrors: 0 });
  });
});
