/**
 * Prometheus metrics (src/metrics/registry.ts) on `GET /metrics`: exact values after a known sequence of
 * checks on a frozen clock, and the failure counters moving when the engine is overloaded or a shard worker
 * is killed while holding checks.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';

// The shard-queue test runs a stalling shard worker (test/fault/fixtures/faulty-worker.mjs): src/shard/pool.ts
// loads the worker from packageRoot(), which that test points at a faulty root; every other test uses the real one.
const fake = vi.hoisted(() => ({ root: '' }));
vi.mock('../../src/util/paths.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/util/paths.js')>();
  return { ...real, packageRoot: () => (fake.root === '' ? real.packageRoot() : fake.root) };
});

import { createLimiter, isSluiceError, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { createMetrics, LATENCY_BUCKETS } from '../../src/metrics/registry.js';
import { postJson, send, ServerPool, type TestServer } from '../helpers/server.js';
import { stallingRoot, keysByShard, parseMetrics, poolOf, settleWithin, tally, until } from './support.js';

const servers = new ServerPool();
let limiters: Limiter[] = [];
const roots: string[] = [];
afterEach(async () => {
  await servers.closeAll();
  await Promise.all(limiters.map((l) => l.close()));
  limiters = [];
  fake.root = '';
});
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

async function scrape(s: TestServer): Promise<Map<string, number>> {
  const a = await send(`${s.url}/metrics`);
  expect(a.status).toBe(200);
  expect(a.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseMetrics(a.text);
}

/** The metric's value, failing if it is missing (so a renamed metric cannot pass as 0). */
function value(m: Map<string, number>, key: string): number {
  const v = m.get(key);
  if (v === undefined) throw new Error(`metric ${key} is missing; have: ${[...m.keys()].join(' ')}`);
  return v;
}

const decisions = (m: Map<string, number>, policy: string, result: string): number =>
  value(m, `sluice_decisions_total{policy="${policy}",result="${result}"}`);

const POLICIES: Record<string, PolicySpec> = {
  // one token every 500 ms, at most 2
  p: { algorithm: 'token_bucket', limit: 2, period: 1000 },
  w: { algorithm: 'fixed_window', limit: 1, period: 60_000 },
};

describe('GET /metrics', () => {
  it('counts decisions by policy and result, latency, overloads and responses by class exactly', async () => {
    const s = await servers.start({ policies: POLICIES, maxPending: 3 });
    const get = (q: string): Promise<number> => send(`${s.url}${q}`).then((a) => a.status);

    // before any check: every series exists at 0
    let m = await scrape(s);
    for (const policy of ['p', 'w']) {
      for (const result of ['allowed', 'denied', 'never', 'error']) expect(decisions(m, policy, result)).toBe(0);
    }
    expect(value(m, 'sluice_decision_duration_seconds_count')).toBe(0);

    // p: allowed, allowed, denied; cost 5 > burst 2: never; 500 ms later one token: allowed
    expect(await get('/v1/check?policy=p&key=a')).toBe(200);
    expect(await get('/v1/check?policy=p&key=a')).toBe(200);
    expect(await get('/v1/check?policy=p&key=a')).toBe(200);
    expect(await get('/v1/check?policy=p&key=a&cost=5')).toBe(200);
    s.clock.advance(500);
    expect(await get('/v1/check?policy=p&key=a')).toBe(200);
    expect(await get('/v1/auth?policy=p&key=a')).toBe(429); // denied, through /v1/auth
    // invalid checks are 4xx answers, not decisions
    expect(await get('/v1/check?policy=nope&key=a')).toBe(400);
    expect(await get('/v1/check?policy=p&key=a&cost=-1')).toBe(400);
    expect(await get('/nowhere')).toBe(404);
    expect(await get('/healthz')).toBe(200);
    // maxPending 3: a batch of 5 queues its items in one turn, the 4th and 5th are refused OVERLOADED
    const batch = await postJson(`${s.url}/v1/check`, { checks: ['k1', 'k2', 'k3', 'k4', 'k5'].map((key) => ({ policy: 'w', key })) });
    expect(batch.status).toBe(200);
    const results = batch.json.results as Array<Record<string, any>>;
    expect(results.map((r) => ('error' in r ? r.error.code : r.allowed))).toStrictEqual([true, true, true, 'OVERLOADED', 'OVERLOADED']);
    expect(results[3].error.status).toBe(503);

    m = await scrape(s);
    expect({
      p: ['allowed', 'denied', 'never', 'error'].map((r) => decisions(m, 'p', r)),
      w: ['allowed', 'denied', 'never', 'error'].map((r) => decisions(m, 'w', r)),
    }).toStrictEqual({ p: [3, 2, 1, 0], w: [3, 0, 0, 2] });
    // every counted check has one latency observation, and a frozen clock does not freeze the latency clock
    expect(value(m, 'sluice_decision_duration_seconds_count')).toBe(11);
    expect(value(m, 'sluice_decision_duration_seconds_bucket{le="+Inf"}')).toBe(11);
    expect(value(m, 'sluice_decision_duration_seconds_sum')).toBeGreaterThan(0);
    // buckets are cumulative, in the declared bounds
    const buckets = LATENCY_BUCKETS.map((le) => value(m, `sluice_decision_duration_seconds_bucket{le="${le}"}`));
    expect(buckets.every((b, i) => i === 0 || b >= buckets[i - 1])).toBe(true);
    expect(buckets[buckets.length - 1]).toBeLessThanOrEqual(11);
    expect(value(m, 'sluice_overload_rejections_total')).toBe(2);
    expect(value(m, 'sluice_shard_failures_total')).toBe(0);
    // responses before this scrape: 200 ×7 (5 checks, healthz, the batch) plus the first scrape; 429, 400 ×2, 404
    expect(['2xx', '3xx', '4xx', '5xx'].map((c) => value(m, `sluice_http_responses_total{class="${c}"}`))).toStrictEqual([8, 0, 4, 0]);
    // engine gauges from limiter.stats(): p:a and w:k1..k3 are held
    expect(value(m, 'sluice_pending_checks')).toBe(0);
    expect(value(m, 'sluice_keys')).toBe(4);
    expect(value(m, 'sluice_evictions_total')).toBe(0);
    const st = await s.limiter.stats();
    expect(value(m, 'sluice_kernel_memory_bytes')).toBe(st.memoryBytes);
    expect(st.memoryBytes).toBeGreaterThan(0);
    expect(value(m, 'process_resident_memory_bytes')).toBeGreaterThan(10 * 2 ** 20);

    // a scrape counts the previous scrape's response, not its own
    m = await scrape(s);
    expect(value(m, 'sluice_http_responses_total{class="2xx"}')).toBe(9);
  });

  it('counts evictions and keys from the kernels', async () => {
    const s = await servers.start({ policies: POLICIES, maxKeys: 10 });
    for (let i = 0; i < 25; i++) expect((await send(`${s.url}/v1/check?policy=w&key=k${i}`)).status).toBe(200);
    const m = await scrape(s);
    expect(value(m, 'sluice_keys')).toBe(10);
    expect(value(m, 'sluice_evictions_total')).toBe(15);
    expect(decisions(m, 'w', 'allowed')).toBe(25);
  });

  it('one registry per server: two servers count separately', async () => {
    const a = await servers.start({ policies: POLICIES });
    const b = await servers.start({ policies: POLICIES });
    await send(`${a.url}/v1/check?policy=p&key=x`);
    expect(decisions(await scrape(a), 'p', 'allowed')).toBe(1);
    expect(decisions(await scrape(b), 'p', 'allowed')).toBe(0);
    expect(a.server.metrics.registry).not.toBe(b.server.metrics.registry);
  });
});

describe('failure counters', () => {
  const HOURLY: Record<string, PolicySpec> = { hourly: { algorithm: 'token_bucket', limit: 1, period: 3_600_000 } };
  /** Checks that make the front flush synchronously (legs + 16 > 4096), as in worker-crash.test.ts. */
  const SYNC_FLUSH = 4081;

  it('a killed shard worker: sluice_shard_failures_total counts exactly the checks that failed with SHARD_FAILED', async () => {
    const l = await createLimiter({ policies: HOURLY, shards: 2, maxKeys: 4 * SYNC_FLUSH });
    limiters.push(l);
    const metrics = createMetrics(l);
    const counted = metrics.instrument(l);
    const [s0, s1] = keysByShard(HOURLY, 'hourly', 2, SYNC_FLUSH + 50);
    const check = (key: string): Promise<Decision> => counted.check({ policy: 'hourly', key, cost: 1 });
    expect((await check(s0[0])).allowed).toBe(true);

    // one turn: kill shard 0's worker, then post a full batch to it (held by the dying worker) and a few to shard 1
    void poolOf(l).threads(0)[0].terminate();
    const held = s0.slice(1, 1 + SYNC_FLUSH).map(check);
    const other = s1.slice(0, 20).map(check);
    const all = await settleWithin([...held, ...other], 15_000);
    const t = tally(all);
    expect(t).toStrictEqual({ SHARD_FAILED: SYNC_FLUSH, decided: 20 });

    const m = parseMetrics(await metrics.render());
    expect(value(m, 'sluice_shard_failures_total')).toBe(SYNC_FLUSH);
    expect(decisions(m, 'hourly', 'error')).toBe(SYNC_FLUSH);
    expect(decisions(m, 'hourly', 'allowed')).toBe(21);
    expect(value(m, 'sluice_overload_rejections_total')).toBe(0);
    expect(value(m, 'sluice_decision_duration_seconds_count')).toBe(SYNC_FLUSH + 21);
  });

  it('overload: sluice_overload_rejections_total counts exactly the checks refused with OVERLOADED', async () => {
    const l = await createLimiter({ policies: HOURLY, shards: 2, maxKeys: 1024, maxPending: 10 });
    limiters.push(l);
    const metrics = createMetrics(l);
    const counted = metrics.instrument(l);
    const res = await counted.checkMany(Array.from({ length: 50 }, (_, i) => ({ policy: 'hourly', key: `k${i}`, cost: 1 })));
    const overloaded = res.filter((r) => isSluiceError(r) && r.code === 'OVERLOADED').length;
    expect(overloaded).toBe(40);
    const m = parseMetrics(await metrics.render());
    expect(value(m, 'sluice_overload_rejections_total')).toBe(40);
    expect(decisions(m, 'hourly', 'error')).toBe(40);
    expect(decisions(m, 'hourly', 'allowed')).toBe(10);
    expect(value(m, 'sluice_pending_checks')).toBe(0);
    expect(value(m, 'sluice_keys')).toBe(10);
  });
});

describe('shard queues', () => {
  const SHARDED: Record<string, PolicySpec> = {
    hourly: { algorithm: 'token_bucket', limit: 1, period: 3_600_000 },
    // two limits: two legs per check, so a queue counted in legs would read double
    both: { limits: [{ algorithm: 'token_bucket', limit: 5, period: 3_600_000 }, { algorithm: 'fixed_window', limit: 9, period: 60_000 }] },
  };
  /** The cost the faulty worker stalls on. */
  const STALL_COST = 999;

  it('sluice_shard_queue_depth counts exactly the checks a stalled shard holds, and 0 once it answers; the other shard reads 0 throughout', async () => {
    const { root, stalled, release } = stallingRoot(STALL_COST);
    roots.push(root);
    fake.root = root;
    const l = await createLimiter({ policies: SHARDED, shards: 2, maxKeys: 1024 });
    limiters.push(l);
    const metrics = createMetrics(l);
    const [h0, h1] = keysByShard(SHARDED, 'hourly', 2, 20);
    const [b0] = keysByShard(SHARDED, 'both', 2, 20);
    const check = (policy: string, key: string, cost = 1): Promise<Decision> => l.check({ policy, key, cost });
    const series = (m: Map<string, number>, name: string): number[] => [0, 1].map((s) => value(m, `${name}{shard="${s}"}`));

    let m = parseMetrics(await metrics.render());
    expect(series(m, 'sluice_shard_queue_depth')).toStrictEqual([0, 0]);
    expect(series(m, 'sluice_shard_queue_batches')).toStrictEqual([0, 0]);
    expect(series(m, 'sluice_shard_up')).toStrictEqual([1, 1]);
    expect(series(m, 'sluice_shard_downs_total')).toStrictEqual([0, 0]);
    expect(series(m, 'sluice_shard_recoveries_total')).toStrictEqual([0, 0]);

    // turn 1: one check that stalls shard 0's worker
    const held: Array<Promise<Decision>> = [check('hourly', h0[0], STALL_COST)];
    await until(() => existsSync(stalled), 10_000, 'shard 0 to stall');
    // turn 2: 10 checks for shard 0 (one batch) and 3 for shard 1; turn 3: 7 two-limit checks for shard 0
    held.push(...h0.slice(1, 11).map((k) => check('hourly', k)));
    const other = h1.slice(0, 3).map((k) => check('hourly', k));
    await new Promise((r) => setImmediate(r));
    held.push(...b0.slice(0, 7).map((k) => check('both', k)));
    expect(tally(await settleWithin(other, 10_000))).toStrictEqual({ decided: 3 });

    // a scrape while shard 0 is stalled: it does not wait for that worker, and its queue is exact
    m = parseMetrics(await metrics.render());
    expect(series(m, 'sluice_shard_queue_depth')).toStrictEqual([18, 0]);
    expect(series(m, 'sluice_shard_queue_batches')).toStrictEqual([3, 0]);
    expect(series(m, 'sluice_shard_up')).toStrictEqual([1, 1]);
    expect(value(m, 'sluice_pending_checks')).toBe(18);
    expect((await l.stats({ waitMs: 50 })).perShard.map((st) => st.queuedChecks)).toStrictEqual([18, 0]);

    // released: every held check is decided, and the queues read 0
    writeFileSync(release, '');
    const done = await settleWithin(held, 15_000);
    expect(tally(done)).toStrictEqual({ decided: 18 });
    // the stalling check costs more than the bucket holds (never admitted); the 17 others are admitted
    expect(done.map((d) => (d.ok ? (d.value.retryAfterMs === null ? 'never' : d.value.allowed) : 'error')))
      .toStrictEqual(['never', ...Array<boolean>(17).fill(true)]);
    m = parseMetrics(await metrics.render());
    expect(series(m, 'sluice_shard_queue_depth')).toStrictEqual([0, 0]);
    expect(series(m, 'sluice_shard_queue_batches')).toStrictEqual([0, 0]);
    expect(value(m, 'sluice_pending_checks')).toBe(0);
    expect(series(m, 'sluice_shard_up')).toStrictEqual([1, 1]);
  });

  it('without shards there are no per-shard series', async () => {
    const l = await createLimiter({ policies: SHARDED, shards: 0 });
    limiters.push(l);
    const m = parseMetrics(await createMetrics(l).render());
    expect([...m.keys()].filter((k) => k.startsWith('sluice_shard_'))).toStrictEqual(['sluice_shard_failures_total']);
    expect((await l.stats()).perShard).toStrictEqual([]);
  });
});
