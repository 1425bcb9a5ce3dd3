/**
 * The regions' share protocol against real Redis, one round at a time: three regions (a database each of the
 * shared redis-server) and a global record (another database). The lease script's side of the share hash
 * (`used`, and the lease state's `o`) is written here as lua/lease.lua would, so each round's inputs are exact.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { compilePolicies } from '../../src/config/policies.js';
import { type CompiledPolicy } from '../../src/config/policy-spec.js';
import { compileRegion, regionDefaultShare, type RegionSpec } from '../../src/config/regions.js';
import { GlobalShareStore, RegionShareStore } from '../../src/store/region-share.js';
import { Reconciler } from '../../src/engine/regions/reconciler.js';
import { ActiveKeys } from '../../src/engine/regions/usage.js';
import { leaseStateKey } from '../../src/engine/lease/keys.js';
import { freePort, sharedRedis, type SharedRedis } from '../helpers/redis.js';

const NAMES = ['eu', 'us', 'ap'];
/** A global token bucket of 1,000 an hour: the rounds below take milliseconds, so refill plays no part. */
function globalPolicies(): ReadonlyMap<string, CompiledPolicy> {
  const base = compilePolicies({ api: { algorithm: 'token_bucket', limit: 1000, period: '1h' } }).get('api')!;
  // scope: global needs consistency lease (src/config/policies.ts); the reconciler reads scope and limits only
  return new Map([['api', { ...base, scope: 'global' as const }]]);
}
const policies = globalPolicies();
// the lease state key, as the lease decider reports it to the watched set (src/engine/lease/keys.ts)
const STATE = leaseStateKey('sluice:', 'api', policies.get('api')!.version, 'tenant-1', 0);
const SHARE = `${STATE}:share`;
const GLOBAL = `${STATE}:global`;

let regionDb: Record<string, SharedRedis>;
let globalDb: SharedRedis;
const open: Reconciler[] = [];

beforeAll(async () => {
  regionDb = {};
  for (const n of NAMES) regionDb[n] = await sharedRedis();
  globalDb = await sharedRedis();
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((r) => r.close()));
  await Promise.all([...Object.values(regionDb), globalDb].map((d) => d.client.flushdb()));
});
afterAll(async () => {
  await Promise.all([...Object.values(regionDb), globalDb].map((d) => d.stop()));
});

function reconciler(name: string, spec: Partial<RegionSpec> = {}, globalUrl: string | null = globalDb.url, touch = true): { r: Reconciler; active: ActiveKeys; regional: RegionShareStore } {
  const region = compileRegion({ name, names: NAMES, ...spec });
  const active = new ActiveKeys(spec.maxActiveKeys ?? 100);
  const regional = RegionShareStore.create({ url: regionDb[name].url }, 1000);
  const r = new Reconciler({
    region, regional, global: globalUrl === null ? null : GlobalShareStore.create(globalUrl, 1000), active,
    policies: () => policies, electionKey: `sluice:region:${name}:reconciler`, prefix: 'sluice:',
  });
  open.push(r);
  if (touch) active.touched('api', 'tenant-1', STATE, 0);
  return { r, active, regional };
}

async function share(name: string): Promise<{ limit: number; burst: number }> {
  const h = await regionDb[name].client.hgetall(SHARE);
  return h.limit === undefined ? { limit: 333, burst: 333 } : { limit: Number(h.limit), burst: Number(h.burst) };
}

async function record(): Promise<Record<string, number>> {
  const h = await globalDb.client.hgetall(GLOBAL);
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(h)) if (!k.startsWith('t:')) out[k] = Number(v);
  return out;
}

/** The invariant: the record's shares plus its pool are the limit, and no region holds more than recorded. */
async function invariant(): Promise<void> {
  const rec = await record();
  if (Object.keys(rec).length === 0) return;
  expect(rec.pl + NAMES.reduce((a, n) => a + rec[`l:${n}`], 0)).toBe(1000);
  expect(rec.pb + NAMES.reduce((a, n) => a + rec[`b:${n}`], 0)).toBe(1000);
  for (const n of NAMES) {
    const s = await share(n);
    expect(s.limit).toBeLessThanOrEqual(rec[`l:${n}`]);
    expect(s.burst).toBeLessThanOrEqual(rec[`b:${n}`]);
  }
}

const spend = (client: Redis, n: number): Promise<number> => client.hincrby(SHARE, 'used', n);

describe('region shares', () => {
  it('starts every region at its default share, the rounding remainder in the global pool', async () => {
    const rs = NAMES.map((n) => reconciler(n));
    for (const { r } of rs) await r.round();
    expect(await record()).toMatchObject({ pl: 1, pb: 1, 'l:eu': 333, 'b:eu': 333, 'l:us': 333, 'l:ap': 333, 'u:eu': 0 });
    // a read writes nothing in the region: the lease script keeps using its default share
    expect(await regionDb.eu.client.exists(SHARE)).toBe(0);
    expect(regionDefaultShare({ limit: 1000, burst: 1000 }, compileRegion({ name: 'eu', names: NAMES }))).toEqual({ limit: 333, burst: 333 });
    const st = rs[0].r.stats();
    expect(st).toMatchObject({ region: 'eu', leader: true, activeKeys: 1, rounds: 1, regionErrors: 0, globalErrors: 0 });
    expect(st.policies).toEqual([{ policy: 'api', limit: 1000, keys: 1, share: 333, usage: 0, globalUsage: 0 }]);
  });

  it('moves unused share to the region that runs short: lowered where it is given first, the limit never exceeded', async () => {
    const [eu, us, ap] = NAMES.map((n) => reconciler(n));
    for (const x of [eu, us, ap]) await x.r.round();
    await spend(regionDb.eu.client, 500);
    await eu.r.round(); // short (500 of 333 spent: ~10^8 an hour): takes the pool's 1
    expect(await share('eu')).toEqual({ limit: 334, burst: 334 });
    await invariant();
    await us.r.round(); // eu is short and the pool is empty: us keeps a tenth of its default (33), gives 300
    expect(await share('us')).toEqual({ limit: 33, burst: 33 });
    expect(await record()).toMatchObject({ pl: 300, pb: 300, 'l:us': 33, 'b:us': 33 });
    await invariant();
    await ap.r.round(); // the pool covers what eu may take next (a quarter of its share): ap keeps its share
    expect(await record()).toMatchObject({ pl: 300, pb: 300, 'l:ap': 333 });
    expect(await share('ap')).toEqual({ limit: 333, burst: 333 });
    await spend(regionDb.eu.client, 500);
    await eu.r.round(); // takes a quarter of its share (84) from the pool
    expect(await share('eu')).toEqual({ limit: 418, burst: 418 });
    expect(await record()).toMatchObject({ pl: 216, pb: 216, 'l:eu': 418 });
    await invariant();
    const h = await regionDb.eu.client.hgetall(SHARE);
    expect(Number(h.gen)).toBe(2);
    expect(Number(h.at)).toBeGreaterThan(0);
    expect(eu.r.stats()).toMatchObject({ took: 85, gave: 0 });
    expect(us.r.stats()).toMatchObject({ took: 0, gave: 300 });
  });

  it('a region that never checked the key gives its unused share to the one that runs short', async () => {
    const eu = reconciler('eu');
    const [us, ap] = ['us', 'ap'].map((n) => reconciler(n, {}, globalDb.url, false));
    await eu.r.round();
    await spend(regionDb.eu.client, 500);
    await eu.r.round(); // short: takes the pool's 1, and marks the key short for the other regions
    expect(await globalDb.client.zrange('sluice:regions:short', 0, -1)).toStrictEqual(['["api","tenant-1",0]']);
    await us.r.round(); // watches the marked key: reports its default share unused, keeps a tenth, gives 300
    expect([...us.active.keys.values()].map((e) => [e.stateKey, e.touched])).toStrictEqual([[STATE, false]]);
    expect(await share('us')).toEqual({ limit: 33, burst: 33 });
    expect(await record()).toMatchObject({ pl: 300, pb: 300, 'l:us': 33, 'l:eu': 334 });
    await invariant();
    await ap.r.round(); // the pool covers what eu may take next: ap keeps its share
    expect(await share('ap')).toEqual({ limit: 333, burst: 333 });
    await spend(regionDb.eu.client, 500);
    await eu.r.round(); // takes a quarter of its share from the pool
    expect(await share('eu')).toEqual({ limit: 418, burst: 418 });
    await invariant();
    expect([eu.r.stats().took, us.r.stats().gave, ap.r.stats().gave]).toStrictEqual([85, 300, 0]);
  });

  it('a region short of more keys than one page of the index: the others reach every one of them, a page a round', async () => {
    const eu = reconciler('eu', { maxActiveKeys: 1000 }, globalDb.url, false);
    const us = reconciler('us', { maxActiveKeys: 1000 }, globalDb.url, false);
    const states = Array.from({ length: 300 }, (_, i) => leaseStateKey('sluice:', 'api', policies.get('api')!.version, `t-${i}`, 0));
    states.forEach((st, i) => eu.active.touched('api', `t-${i}`, st, 0));
    await eu.r.round();
    await Promise.all(states.map((st) => regionDb.eu.client.hincrby(`${st}:share`, 'used', 500)));
    await eu.r.round(); // short of all 300: each marked
    expect(await globalDb.client.zcard('sluice:regions:short')).toBe(300);
    const given = async (): Promise<number> => (await Promise.all(states.map((st) => regionDb.us.client.hget(`${st}:share`, 'limit'))))
      .filter((l) => l === '33').length;
    await us.r.round(); // the first page: 256 keys
    expect([us.active.keys.size, await given()]).toStrictEqual([256, 256]);
    await us.r.round(); // the next page: the other 44 (and the first 256 reported again)
    expect([us.active.keys.size, await given()]).toStrictEqual([300, 300]);
  });

  it('never lowers a burst below the tokens out in leases', async () => {
    const [eu, us] = NAMES.map((n) => reconciler(n));
    await eu.r.round();
    await us.r.round();
    await regionDb.us.client.hset(STATE, 'o', 320); // the lease state's outstanding tokens
    await spend(regionDb.eu.client, 500);
    await eu.r.round();
    await us.r.round(); // gives 300 of limit, but only 13 of burst: 320 are leased out
    expect(await share('us')).toEqual({ limit: 33, burst: 320 });
    expect(await record()).toMatchObject({ pl: 300, pb: 13, 'l:us': 33, 'b:us': 320 });
    await invariant();
  });

  it('two reads within one millisecond of Redis time that saw tokens spent measure a usage, not none', async () => {
    const eu = reconciler('eu');
    const read = eu.regional.read.bind(eu.regional);
    let pinned = -1; // every read answers at the first read's Redis time, as two rounds within one ms do
    eu.regional.read = async (...a) => {
      const row = await read(...a);
      if (pinned < 0) pinned = row.nowMs;
      return { ...row, nowMs: pinned };
    };
    await eu.r.round();
    await spend(regionDb.eu.client, 500);
    await eu.r.round(); // 500 tokens in (at most) 1 ms: 500 · 3,600,000 an hour, short, takes the pool's 1
    expect(eu.r.stats().policies[0].usage).toBe(500 * 3_600_000);
    expect(await record()).toMatchObject({ pl: 0, 'l:eu': 334 });
    expect(await share('eu')).toEqual({ limit: 334, burst: 334 });
    await invariant();
  });

  it('a raise that fails leaves the share with the record, and the next report gives it back to the pool', async () => {
    const [eu] = NAMES.map((n) => reconciler(n));
    await eu.r.round();
    await spend(regionDb.eu.client, 500);
    const raise = eu.regional.raise.bind(eu.regional);
    eu.regional.raise = () => Promise.reject(new Error('region Redis went away'));
    await eu.r.round(); // the record moved the pool's 1 to eu; eu's Redis never raised
    expect(await record()).toMatchObject({ pl: 0, 'l:eu': 334 });
    expect(await share('eu')).toEqual({ limit: 333, burst: 333 });
    await invariant();
    expect(eu.r.stats().regionErrors).toBe(1);
    eu.regional.raise = raise;
    eu.active.keys.get(STATE)!.samples = []; // measured idle this round: no new take
    await eu.r.round();
    expect(await record()).toMatchObject({ pl: 1, pb: 1, 'l:eu': 333 });
  });

  it('a region holding more than a global record that was lost gives the excess back', async () => {
    const [eu, us, ap] = NAMES.map((n) => reconciler(n));
    for (const x of [eu, us, ap]) await x.r.round();
    await spend(regionDb.eu.client, 500);
    await eu.r.round();
    await us.r.round();
    await spend(regionDb.eu.client, 500);
    await eu.r.round();
    expect(await share('eu')).toEqual({ limit: 418, burst: 418 });
    await globalDb.client.del(GLOBAL);
    await eu.r.round(); // the record starts again at 333 each (pool 1): eu keeps 334 and gives back 84
    expect(await share('eu')).toEqual({ limit: 334, burst: 334 });
    expect(await record()).toMatchObject({ pl: 0, 'l:eu': 334 });
    await invariant();
  });

  it('with fixed weights the shares follow the weights and never move', async () => {
    const spec = { shares: { eu: 2, us: 1, ap: 1 } };
    const [eu, us] = NAMES.map((n) => reconciler(n, spec));
    await eu.r.round();
    await us.r.round();
    await spend(regionDb.eu.client, 900);
    await eu.r.round();
    await us.r.round();
    expect(await record()).toMatchObject({ pl: 0, pb: 0, 'l:eu': 500, 'l:us': 250, 'l:ap': 250 });
    expect(await regionDb.eu.client.hget(SHARE, 'limit')).toBeNull();
    expect(eu.r.stats().policies[0].usage).toBeGreaterThan(1000);
  });

  it('elects one reconciler per region; the next takes over when the leader closes', async () => {
    const a = reconciler('eu');
    const b = reconciler('eu');
    await a.r.round();
    await b.r.round();
    expect([a.r.stats().leader, b.r.stats().leader]).toEqual([true, false]);
    expect(b.r.stats().rounds).toBe(0);
    const ttl = await regionDb.eu.client.pttl('sluice:region:eu:reconciler');
    expect(ttl).toBeGreaterThan(3000);
    expect(ttl).toBeLessThanOrEqual(3500);
    await a.r.close();
    await b.r.round();
    expect(b.r.stats()).toMatchObject({ leader: true, rounds: 1 });
  });

  it('cut off from the global Redis: keeps its share, counts the errors, and reports no round complete', async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const eu = reconciler('eu', {}, dead);
    await spend(regionDb.eu.client, 500);
    await eu.r.round();
    await eu.r.round();
    expect(eu.r.stats()).toMatchObject({ leader: true, rounds: 2, globalErrors: 2, lagMs: -1 });
    expect(await share('eu')).toEqual({ limit: 333, burst: 333 });
  });
});
