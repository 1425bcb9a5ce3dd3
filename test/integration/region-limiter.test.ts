/**
 * A limiter with the region option on real Redis (a database for the region, another for the global
 * Redis): a `scope: global` lease policy decides from the region's share (its default share, then what the
 * reconciler writes), the key reaches the reconciler, and the sluice_region_* metrics show it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/limiter.js';
import { createMetrics } from '../../src/metrics/registry.js';
import { storeKey } from '../../src/keys/store-key.js';
import type { Limiter } from '../../src/types.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { parseMetrics } from '../fault/support.js';

const NAMES = ['eu', 'us', 'ap'];
const POLICY = { algorithm: 'token_bucket', limit: 30, period: '1h', consistency: 'lease', scope: 'global', version: 'v1' } as const;
const state = (key: string): string => `${storeKey('sluice:', 'api', 'v1', key, 0)}:lease`;

let region: SharedRedis;
let global: SharedRedis;
let limiter: Limiter;

beforeAll(async () => {
  region = await sharedRedis();
  global = await sharedRedis();
  limiter = await createLimiter({
    policies: { api: POLICY }, redis: { url: region.url },
    region: { name: 'eu', names: NAMES, reconcileIntervalMs: 50, globalRedis: global.url },
  });
});
afterAll(async () => {
  await limiter?.close();
  await region.stop();
  await global.stop();
});

async function admits(key: string, n: number): Promise<number> {
  let ok = 0;
  for (let i = 0; i < n; i++) if ((await limiter.check({ policy: 'api', key, cost: 1 })).allowed) ok++;
  return ok;
}

async function until(what: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await what())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('a limiter in a region', () => {
  it('decides a global key within its default share: a third of the limit and burst', async () => {
    expect(limiter.region).toBe('eu');
    expect(await admits('t-default', 15)).toBe(10);
  });

  it('decides within the share the region Redis holds', async () => {
    await region.client.hset(`${state('t-share')}:share`, 'limit', 4, 'burst', 4, 'at', 0, 'gen', 1);
    expect(await admits('t-share', 10)).toBe(4);
    // what the lease script settled as used is counted in the share hash, for the reconciler
    await limiter.close();
    expect(Number(await region.client.hget(`${state('t-share')}:share`, 'used'))).toBe(4);
    limiter = await createLimiter({
      policies: { api: POLICY }, redis: { url: region.url },
      region: { name: 'eu', names: NAMES, reconcileIntervalMs: 50, globalRedis: global.url },
    });
  });

  it('reports the keys it leases to the global Redis, and shows them in sluice_region_*', async () => {
    expect(await admits('t-metrics', 3)).toBe(3);
    await until(async () => (await global.client.exists(`${state('t-metrics')}:global`)) === 1);
    const rec = await global.client.hgetall(`${state('t-metrics')}:global`);
    expect(rec).toMatchObject({ 'l:eu': '10', 'l:us': '10', 'l:ap': '10', pl: '0' });
    const st = (await limiter.stats()).region!;
    expect(st).toMatchObject({ region: 'eu', leader: true, activeKeys: 1, regionErrors: 0, globalErrors: 0 });
    const m = parseMetrics(await createMetrics(limiter).render());
    expect(m.get('sluice_region_leader{region="eu"}')).toBe(1);
    expect(m.get('sluice_region_share_tokens{policy="api",region="eu"}')).toBe(10);
    expect(m.get('sluice_region_global_limit_tokens{policy="api",region="eu"}')).toBe(30);
    expect(m.get('sluice_region_keys{policy="api",region="eu"}')).toBe(1);
    expect(m.get('sluice_region_reconcile_errors_total{region="eu",target="global"}')).toBe(0);
    expect(m.get('sluice_region_reconcile_lag_seconds{region="eu"}')).toBeGreaterThanOrEqual(0);
  });

  it('refuses a reload that adds a global policy to a limiter without a region, naming the field', async () => {
    const plain = await createLimiter({ policies: { api: { ...POLICY, scope: 'local' } }, redis: { url: region.url } });
    await expect(plain.reload({ api: POLICY })).rejects.toMatchObject({ code: 'CONFIG', field: 'scope' });
    await plain.close();
  });
});
