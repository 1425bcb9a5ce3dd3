/**
 * Three regions on this machine (issue #14): a redis-server per region plus a global one, each region's link
 * to the global Redis through a delaying proxy (30-80 ms each way, test/helpers/delay-proxy.ts), one limiter
 * per region on its own Redis with a `scope: global` lease policy. The global Redis is only the reconcilers':
 * no check ever waits on it.
 *
 * 1. every region hammers one global key: the regions together admit at most what one exact limiter admits
 *    over the run (B + L·T/P);
 * 2. the global Redis cut off for 10 s: every region keeps serving within the share it holds (its share does
 *    not change; it admits at most b + l·T/P of it), nothing over;
 * 3. restored, with the demand in one region only: the shares move there, their sum never over the limit.
 *
 * A check's latency in phase 1 is compared with the same load on the same three Redis servers without
 * regions (scope local, no reconciler, no global Redis); the p99s are printed (no timing assertion here).
 */
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/limiter.js';
import type { Limiter } from '../../src/types.js';
import { startRedis, redisNow, type TestRedis } from '../helpers/redis.js';
import { startDelayProxy, type DelayProxy } from '../helpers/delay-proxy.js';
import { prng } from '../helpers/prng.js';
import { storeKey } from '../../src/keys/store-key.js';

const NAMES = ['eu', 'us', 'ap'] as const;
type Name = (typeof NAMES)[number];
const L = 300;
const B = 300;
const P = 10_000;
const POLICY = { algorithm: 'token_bucket', limit: L, burst: B, period: P, consistency: 'lease', scope: 'global', version: 'r1' } as const;
const KEY = 'tenant-1';
const INTERVAL = 200;
/** Clients per region, each checking every PACE_MS: bounded load on 2 shared cores. */
const CLIENTS = 8;
const PACE_MS = 2;

let redis: Record<Name | 'global', TestRedis>;
let proxies: Record<Name, DelayProxy>;
let limiters: Record<Name, Limiter>;
const admitted: Record<Name, number> = { eu: 0, us: 0, ap: 0 };
const latencies: number[] = [];
const SHARE = `${storeKey('sluice:', 'api', 'r1', KEY, 0)}:lease:share`;
const GLOBAL = `${storeKey('sluice:', 'api', 'r1', KEY, 0)}:lease:global`;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Hammers `limiter` with CLIENTS paced clients until `until()` is true; counts admissions in `into`. */
async function hammer(limiter: Limiter, region: Name | null, stop: () => boolean, samples: number[]): Promise<void> {
  const client = async (): Promise<void> => {
    while (!stop()) {
      const t0 = performance.now();
      const d = await limiter.check({ policy: 'api', key: KEY, cost: 1 });
      samples.push(performance.now() - t0);
      if (d.allowed && region !== null) admitted[region]++;
      await sleep(PACE_MS);
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, client));
}

async function share(n: Name): Promise<{ limit: number; burst: number }> {
  const h = await redis[n].client.hgetall(SHARE);
  return h.limit === undefined ? { limit: 100, burst: 100 } : { limit: Number(h.limit), burst: Number(h.burst) };
}

function p99(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))];
}

beforeAll(async () => {
  const [eu, us, ap, global] = await Promise.all([startRedis(), startRedis(), startRedis(), startRedis()]);
  redis = { eu, us, ap, global };
  const rand = prng(14);
  proxies = {} as Record<Name, DelayProxy>;
  for (const n of NAMES) proxies[n] = await startDelayProxy(global.port, { minMs: 30, maxMs: 80, random: rand });
  limiters = {} as Record<Name, Limiter>;
  for (const n of NAMES) {
    limiters[n] = await createLimiter({
      policies: { api: POLICY },
      redis: { url: redis[n].url },
      region: { name: n, names: [...NAMES], reconcileIntervalMs: INTERVAL, globalRedis: proxies[n].url },
    });
  }
}, 30_000);

afterAll(async () => {
  await Promise.all(NAMES.map((n) => limiters?.[n]?.close()));
  await Promise.all(NAMES.map((n) => proxies?.[n]?.close()));
  await Promise.all(Object.values(redis ?? {}).map((r) => r.stop()));
});

describe('three regions, one global limit', () => {
  it('admits at most the limit from all regions, keeps each region within its share while cut off, then moves shares to the demand', async () => {
    const t0 = await redisNow(redis.eu.client);
    // 1. all regions hammer
    let phase = 1;
    const phase1Lat: number[] = [];
    const runs = NAMES.map((n) => hammer(limiters[n], n, () => phase !== 1, phase1Lat));
    await sleep(4000);
    phase = 2;
    await Promise.all(runs);
    latencies.push(...phase1Lat);
    const t1 = await redisNow(redis.eu.client);
    const phase1 = NAMES.reduce((a, n) => a + admitted[n], 0);
    expect(phase1).toBeLessThanOrEqual(B + Math.floor((L * (t1 - t0)) / P));
    expect(phase1).toBeGreaterThan(B / 2); // it did serve

    // 2. the global Redis cut off for 10 s: every region keeps serving within its share
    for (const n of NAMES) proxies[n].cut();
    await sleep(3 * INTERVAL); // a round in flight when the link went lands (or fails) first
    const before = Object.fromEntries(await Promise.all(NAMES.map(async (n) => [n, await share(n)] as const))) as Record<Name, { limit: number; burst: number }>;
    const atCut = { ...admitted };
    const errorsAtCut = await Promise.all(NAMES.map(async (n) => (await limiters[n].stats()).region!.globalErrors));
    const c0 = await redisNow(redis.eu.client);
    const cutRuns = NAMES.map((n) => hammer(limiters[n], n, () => phase !== 2, latencies));
    await sleep(10_000);
    phase = 3;
    await Promise.all(cutRuns);
    const c1 = await redisNow(redis.eu.client);
    for (const [i, n] of NAMES.entries()) {
      const s = before[n];
      expect(await share(n)).toEqual(s); // nothing moves while cut off
      const during = admitted[n] - atCut[n];
      expect(during).toBeLessThanOrEqual(s.burst + Math.floor((s.limit * (c1 - c0 + 3 * INTERVAL)) / P));
      expect(during).toBeGreaterThan(0); // it kept serving from its share
      expect((await limiters[n].stats()).region!.globalErrors).toBeGreaterThan(errorsAtCut[i]);
    }

    // 3. restored; the demand is in eu only: the shares move there
    for (const n of NAMES) proxies[n].restore();
    const eu0 = (await share('eu')).limit;
    const r0 = admitted.eu;
    await hammer(limiters.eu, 'eu', (() => { const end = Date.now() + 5000; return () => Date.now() > end; })(), latencies);
    const t2 = await redisNow(redis.eu.client);
    const shares = await Promise.all(NAMES.map(share));
    expect(shares[0].limit).toBeGreaterThan(Math.max(eu0, 100)); // moved to where the demand is
    expect(shares.reduce((a, s) => a + s.limit, 0)).toBeLessThanOrEqual(L);
    expect(shares.reduce((a, s) => a + s.burst, 0)).toBeLessThanOrEqual(B);
    const rec = await redis.global.client.hgetall(GLOBAL);
    expect(Number(rec.pl) + NAMES.reduce((a, n) => a + Number(rec[`l:${n}`]), 0)).toBe(L);
    expect(Number(rec.pb) + NAMES.reduce((a, n) => a + Number(rec[`b:${n}`]), 0)).toBe(B);
    const total = NAMES.reduce((a, n) => a + admitted[n], 0);
    expect(total).toBeLessThanOrEqual(B + Math.floor((L * (t2 - t0)) / P));
    const threeRegionP99 = p99(phase1Lat);

    // phase 1's load again with no regions (each limiter on its own Redis, the policy's limit per Redis, no
    // reconciler, no global Redis): the latency a check has without regions
    const singles = await Promise.all(NAMES.map((n) => createLimiter({ policies: { api: { ...POLICY, scope: 'local', version: 'single' } }, redis: { url: redis[n].url } })));
    const singleLat: number[] = [];
    const end = Date.now() + 4000;
    await Promise.all(singles.map((l) => hammer(l, null, () => Date.now() > end, singleLat)));
    await Promise.all(singles.map((l) => l.close()));
    const singleP99 = p99(singleLat);
    const st = await limiters.eu.stats();
    console.log(JSON.stringify({
      admitted, total, bound: B + Math.floor((L * (t2 - t0)) / P), phase1, shares: Object.fromEntries(NAMES.map((n, i) => [n, shares[i]])),
      cutShares: before, checks: latencies.length,
      p99Ms: { threeRegion: +threeRegionP99.toFixed(3), noRegion: +singleP99.toFixed(3), diff: +(threeRegionP99 - singleP99).toFixed(3), checks: [phase1Lat.length, singleLat.length] },
      euReconciler: { rounds: st.region!.rounds, took: st.region!.took, gave: st.region!.gave, globalErrors: st.region!.globalErrors, lagMs: st.region!.lagMs },
      restoredEuAdmitted: admitted.eu - r0,
    }));
  }, 60_000);
});
