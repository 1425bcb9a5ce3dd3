/**
 * Redis store health on `GET /metrics` (src/metrics/registry.ts): the store and write-behind metrics exist
 * only with a store, read `limiter.stats().store` at scrape time, and follow a stall of Redis (SIGSTOP):
 * errors count up and the breaker opens, the sync writer's failures and pending keys move; after SIGCONT the
 * breaker closes again within 2 s and every pending delta is merged.
 *
 * The limiter here: a strict policy (onStoreError: open) and a sync policy, timeoutMs 50 and a fast breaker
 * (probe after 200 ms, at most 400 ms), as in redis-outage.test.ts.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import { createMetrics } from '../../src/metrics/registry.js';
import { connected, startRedis, type TestRedis } from '../helpers/redis.js';
import { send, ServerPool } from '../helpers/server.js';
import { parseMetrics } from './support.js';
import { storeKey } from '../../src/keys/store-key.js';
import { decodeState, encodeState } from '../../src/store/state.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

const STORE_METRICS = ['sluice_store_errors_total', 'sluice_store_connected', 'sluice_store_breaker_state'];
const SYNC_METRICS = ['sluice_sync_merges_total', 'sluice_sync_failures_total', 'sluice_sync_dropped_total', 'sluice_sync_pending_keys'];

const POLICIES: Record<string, PolicySpec> = {
  s: { algorithm: 'fixed_window', limit: 1_000_000, period: 3_600_000, consistency: 'strict', onStoreError: 'open' },
  y: { algorithm: 'fixed_window', limit: 1_000_000, period: 3_600_000, consistency: 'sync' },
};

let redis: TestRedis;
let limiter: Limiter | null = null;
let server: SluiceServer | null = null;
const pool = new ServerPool();

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  redis.resume();
  await pool.closeAll();
  await server?.close();
  server = null;
  await limiter?.close();
  limiter = null;
});
afterAll(async () => {
  await redis?.stop();
});

/** The metric's value, failing if it is missing (so a renamed metric cannot pass as 0). */
function value(m: Map<string, number>, key: string): number {
  const v = m.get(key);
  if (v === undefined) throw new Error(`metric ${key} is missing; have: ${[...m.keys()].join(' ')}`);
  return v;
}

async function scrape(url: string): Promise<Map<string, number>> {
  const a = await send(`${url}/metrics`);
  expect(a.status).toBe(200);
  return parseMetrics(a.text);
}

/** Polls `probe` every 25 ms until it returns true; false past `ms`. */
async function until(ms: number, probe: () => Promise<boolean>): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    if (await probe()) return true;
    await sleep(25);
  }
  return false;
}

describe('store metrics on GET /metrics', () => {
  it('are absent without a store', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'token_bucket', limit: 2, period: 1000 } } });
    const m = await scrape(s.url);
    for (const name of [...STORE_METRICS, ...SYNC_METRICS]) expect(m.has(name)).toBe(false);
    expect(m.has('sluice_keys')).toBe(true);
  });

  it('follow a Redis stall: errors and an open breaker, sync failures and pending keys, then recovery within 2 s', async () => {
    limiter = await createLimiter({
      policies: POLICIES, shards: 0, maxKeys: 1024,
      redis: { url: redis.url, prefix: 'mr:', timeoutMs: 50, syncIntervalMs: 20, breaker: { resetMs: 200, maxResetMs: 400 } },
    });
    await connected(limiter);
    server = await startServer({ limiter, host: '127.0.0.1', port: 0, stream: false });
    const url = `http://127.0.0.1:${server.port}`;
    const check = async (policy: string, key: string): Promise<Record<string, any>> => {
      const a = await send(`${url}/v1/check?policy=${policy}&key=${key}`);
      expect(a.status).toBe(200);
      return JSON.parse(a.text) as Record<string, any>;
    };

    // healthy, before any check: every store and sync series at its exact value
    let m = await scrape(url);
    expect([...STORE_METRICS, ...SYNC_METRICS].map((n) => value(m, n))).toStrictEqual([0, 1, 0, 0, 0, 0, 0]);
    // the strict policy's degraded series exist from the start, at 0 (a rate over them sees the first ones); the
    // sync policy has none (Redis never decides for it)
    const degradedSeries = (mm: Map<string, number>): Array<[string, number]> =>
      [...mm].filter(([k]) => k.startsWith('sluice_degraded_decisions_total'));
    expect(degradedSeries(m)).toStrictEqual([
      ['sluice_degraded_decisions_total{policy="s",rule="open"}', 0],
      ['sluice_degraded_decisions_total{policy="s",rule="closed"}', 0],
      ['sluice_degraded_decisions_total{policy="s",rule="local"}', 0],
    ]);

    // healthy checks: strict decided by Redis (not degraded), sync merged
    for (const key of ['a', 'b', 'c']) {
      expect((await check('s', key)).degraded ?? false).toBe(false);
      expect((await check('y', key)).allowed).toBe(true);
    }
    expect(await until(2000, async () => {
      const mm = await scrape(url);
      return value(mm, 'sluice_sync_merges_total') >= 1 && value(mm, 'sluice_sync_pending_keys') === 0;
    })).toBe(true);
    m = await scrape(url);
    const st = (await limiter.stats()).store!;
    // quiet now: the scrape and stats() agree exactly
    expect(value(m, 'sluice_sync_merges_total')).toBe(st.sync!.merges);
    expect(value(m, 'sluice_sync_merges_total')).toBeGreaterThanOrEqual(1);
    expect(value(m, 'sluice_sync_merges_total')).toBeLessThanOrEqual(3);
    expect(value(m, 'sluice_sync_failures_total')).toBe(0);
    expect(value(m, 'sluice_sync_dropped_total')).toBe(0);
    expect(value(m, 'sluice_store_errors_total')).toBe(0);
    expect(value(m, 'sluice_store_connected')).toBe(1);
    expect(value(m, 'sluice_store_breaker_state')).toBe(0);
    // every script call (decisions and merges) is timed; the lag is the time since the last merge
    expect(value(m, 'sluice_store_call_duration_seconds_count'))
      .toBe(st.latency.counts.reduce((a, b) => a + b, 0));
    expect(value(m, 'sluice_store_call_duration_seconds_count')).toBeGreaterThanOrEqual(2);
    expect(value(m, 'sluice_sync_lag_seconds')).toBeGreaterThanOrEqual(0);
    const mergesBefore = value(m, 'sluice_sync_merges_total');

    // stall: strict checks fail open (degraded) and count as errors until the breaker opens
    redis.pause();
    let sawOpen = false;
    let sawSyncPending = false;
    let sawSyncFailure = false;
    let maxErrors = 0;
    const stallStart = performance.now();
    for (let i = 0; performance.now() - stallStart < 4000; i++) {
      const d = await check('s', `stall${i % 4}`);
      expect(d.allowed).toBe(true);
      expect(d.degraded).toBe(true);
      expect((await check('y', `stall${i % 4}`)).allowed).toBe(true);
      m = await scrape(url);
      maxErrors = Math.max(maxErrors, value(m, 'sluice_store_errors_total'));
      if (value(m, 'sluice_store_breaker_state') === 2) sawOpen = true;
      if (value(m, 'sluice_sync_pending_keys') > 0) sawSyncPending = true;
      if (value(m, 'sluice_sync_failures_total') > 0) sawSyncFailure = true;
      if (i >= 5 && sawOpen && sawSyncPending && sawSyncFailure) break;
      await sleep(20);
    }
    expect({ sawOpen, sawSyncPending, sawSyncFailure }).toStrictEqual({ sawOpen: true, sawSyncPending: true, sawSyncFailure: true });
    expect(maxErrors).toBeGreaterThan(0);

    // resume: the breaker closes (a probe goes through on the next check) within 2 s, the deltas merge
    redis.resume();
    const resumed = performance.now();
    let recoveredMs = -1;
    expect(await until(2000, async () => {
      await check('s', 'after');
      const mm = await scrape(url);
      if (value(mm, 'sluice_store_breaker_state') !== 0) return false;
      recoveredMs = performance.now() - resumed;
      return true;
    })).toBe(true);
    expect(recoveredMs).toBeLessThan(2000);
    expect(await until(2000, async () => value(await scrape(url), 'sluice_sync_pending_keys') === 0)).toBe(true);

    m = await scrape(url);
    const after = (await limiter.stats()).store!;
    expect(value(m, 'sluice_store_connected')).toBe(1);
    expect(value(m, 'sluice_store_breaker_state')).toBe(0);
    // counters never went back, and match stats() once quiet
    expect(value(m, 'sluice_store_errors_total')).toBeGreaterThanOrEqual(maxErrors);
    expect(value(m, 'sluice_store_errors_total')).toBe(after.storeErrors);
    expect(value(m, 'sluice_sync_merges_total')).toBeGreaterThan(mergesBefore);
    expect(value(m, 'sluice_sync_merges_total')).toBe(after.sync!.merges);
    expect(value(m, 'sluice_sync_failures_total')).toBe(after.sync!.failures);
    expect(value(m, 'sluice_sync_failures_total')).toBeGreaterThan(0);
    expect(value(m, 'sluice_sync_dropped_total')).toBe(0);
  });

  it('a frozen Redis: /readyz says unavailable while the breaker is open, and after SIGCONT, with no check sent, the breaker closes by itself within 2 s', async () => {
    limiter = await createLimiter({
      policies: { s: POLICIES.s }, shards: 0, maxKeys: 1024,
      redis: { url: redis.url, prefix: 'mz:', timeoutMs: 50, breaker: { resetMs: 200, maxResetMs: 400 } },
    });
    await connected(limiter);
    server = await startServer({ limiter, host: '127.0.0.1', port: 0, stream: false });
    const url = `http://127.0.0.1:${server.port}`;
    const ready = async (): Promise<unknown> => JSON.parse((await send(`${url}/readyz`)).text);
    const breaker = async (): Promise<number> => value(await scrape(url), 'sluice_store_breaker_state');
    expect((await send(`${url}/v1/check?policy=s&key=a`)).status).toBe(200);
    expect(await ready()).toMatchObject({ status: 'ready', store: 'connected' });

    redis.pause();
    // checks time out until the breaker opens
    expect(await until(3000, async () => {
      await send(`${url}/v1/check?policy=s&key=a`);
      return (await breaker()) === 2;
    })).toBe(true);
    expect(await ready()).toMatchObject({ status: 'ready', store: 'unavailable' });
    // idle and still frozen: the breaker's own probes (PING) find no answer, so it never closes
    const frozenSince = performance.now();
    while (performance.now() - frozenSince < 1200) {
      expect(await breaker()).not.toBe(0);
      expect(await ready()).toMatchObject({ store: 'unavailable' });
      await sleep(100);
    }

    redis.resume();
    const resumed = performance.now();
    expect(await until(2000, async () => (await breaker()) === 0)).toBe(true);
    expect(performance.now() - resumed).toBeLessThan(2000);
    expect(await ready()).toMatchObject({ status: 'ready', store: 'connected' });
    // no check was sent since the stall: the probes were the breaker's own
    expect((await limiter.stats()).store!.breaker).toBe('closed');
  });
});

describe('store failures by kind', () => {
  const STRICT: Record<string, PolicySpec> = {
    s: { algorithm: 'token_bucket', limit: 1_000_000, period: 3_600_000, consistency: 'strict', onStoreError: 'open' },
  };
  const KINDS = ['sluice_store_timeouts_total', 'sluice_store_script_errors_total', 'sluice_store_connection_errors_total', 'sluice_store_breaker_rejections_total'];
  /** A breaker that never opens (volume threshold far above these tests' calls), unless a test sets its own. */
  const NEVER_OPENS = { volumeThreshold: 100_000 };

  async function strictLimiter(prefix: string, breaker: Record<string, number> = NEVER_OPENS, url = redis.url): Promise<Limiter> {
    limiter = await createLimiter({ policies: STRICT, shards: 0, maxKeys: 1024, redis: { url, prefix, timeoutMs: 50, breaker } });
    return limiter;
  }
  /** The four kind counters and sluice_store_errors_total, from a scrape. */
  async function kinds(l: Limiter): Promise<number[]> {
    const m = parseMetrics(await createMetrics(l).render());
    return [...KINDS, 'sluice_store_errors_total'].map((n) => value(m, n));
  }
  /**
   * Key `key`'s state key under `prefix`. Computed, not scanned for: these buckets refill to full (and their
   * keys expire) 3.6 ms after a check, so a key seen by SCAN may be gone by the time it is planted over.
   */
  function stateKeyOf(l: Limiter, prefix: string, key: string): string {
    return storeKey(prefix, 's', l.policies.get('s')!.version, key, 0);
  }
  /** `n` checks one after another (one script call each); each must be answered, degraded (fail open). */
  async function degradedChecks(l: Limiter, key: string, n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const d = await l.check({ policy: 's', key, cost: 1 });
      expect([d.allowed, d.degraded]).toStrictEqual([true, true]);
    }
  }

  it('a paused Redis: each call past timeoutMs is a timeout, nothing else', async () => {
    const l = await strictLimiter('kt:');
    await connected(l);
    expect((await l.check({ policy: 's', key: 'k', cost: 1 })).degraded ?? false).toBe(false);
    expect(await kinds(l)).toStrictEqual([0, 0, 0, 0, 0]);
    redis.pause();
    await degradedChecks(l, 'k', 5);
    redis.resume();
    expect(await kinds(l)).toStrictEqual([5, 0, 0, 0, 5]);
    const st = (await l.stats()).store!;
    expect([st.timeouts, st.scriptErrors, st.connectionErrors, st.breakerRejections, st.storeErrors]).toStrictEqual([5, 0, 0, 0, 5]);
  });

  it('the breaker opens after 3 timeouts: the next calls are breaker rejections, not timeouts', async () => {
    const l = await strictLimiter('kb:', { volumeThreshold: 3, errorThresholdPercentage: 50, resetMs: 60_000, maxResetMs: 60_000 });
    await connected(l);
    redis.pause();
    await degradedChecks(l, 'k', 3);
    expect((await l.stats()).store!.breaker).toBe('open');
    await degradedChecks(l, 'k', 4);
    redis.resume();
    expect(await kinds(l)).toStrictEqual([3, 0, 0, 4, 7]);
    const m = parseMetrics(await createMetrics(l).render());
    expect(value(m, 'sluice_store_breaker_state')).toBe(2);
  });

  it('a key of the wrong type planted in Redis: the script fails with WRONGTYPE, each call a script error', async () => {
    const l = await strictLimiter('kw:');
    await connected(l);
    expect((await l.check({ policy: 's', key: 'poison', cost: 1 })).degraded ?? false).toBe(false);
    const stateKey = stateKeyOf(l, 'kw:', 'poison');
    expect(stateKey).toMatch(/^kw:\{s:/);
    await redis.client.del(stateKey);
    await redis.client.rpush(stateKey, 'not a rate-limit state');
    // the script errors on the planted key; Redis itself answers, so these are neither timeouts nor connection errors
    await degradedChecks(l, 'poison', 4);
    expect(await kinds(l)).toStrictEqual([0, 4, 0, 0, 4]);
    // other keys are unaffected (each check here is its own script call)
    expect((await l.check({ policy: 's', key: 'clean', cost: 1 })).degraded ?? false).toBe(false);
    expect(await redis.client.type(stateKey)).toBe('list');
    expect(await kinds(l)).toStrictEqual([0, 4, 0, 0, 4]);
  });

  it('a poisoned key fails only its own check: the others in the same script call are decided exactly', async () => {
    const l = await strictLimiter('kp:');
    await connected(l);
    for (const key of ['poison', 'garbled']) await l.check({ policy: 's', key, cost: 1 });
    const [poison, garbled] = ['poison', 'garbled'].map((k) => stateKeyOf(l, 'kp:', k));
    await redis.client.del(poison);
    await redis.client.rpush(poison, 'a list');
    await redis.client.set(garbled, 'not a state');
    // one turn: one script call deciding all four
    const ds = await Promise.all(['a', 'poison', 'garbled', 'b'].map((key) => l.check({ policy: 's', key, cost: 1 })));
    expect(ds.map((d) => d.degraded ?? false)).toStrictEqual([false, true, true, false]);
    expect([ds[0].remaining, ds[3].remaining]).toStrictEqual([999_999, 999_999]);
    // one script error for the call; the poisoned keys are left as they are
    expect(await kinds(l)).toStrictEqual([0, 1, 0, 0, 1]);
    expect(await redis.client.type(poison)).toBe('list');
    expect(await redis.client.get(garbled)).toBe('not a state');
  });

  it('a packed value that is not a state is unreadable; a state in the old text format is still read', async () => {
    const l = await strictLimiter('kf:');
    await connected(l);
    const [nan, fraction, inf, old] = ['nan', 'fraction', 'inf', 'old'].map((k) => stateKeyOf(l, 'kf:', k));
    // B = 1e6 tokens, P = 1 h: x = tokens·P. lastSeen an hour ahead, so nothing refills before the check.
    const last = Date.now() + 3_600_000;
    await redis.client.set(nan, encodeState(NaN, 0, last), 'PX', 60_000);
    await redis.client.set(fraction, encodeState(0.5, 0, last), 'PX', 60_000);
    await redis.client.set(inf, encodeState(1, 0, Infinity), 'PX', 60_000);
    // 100,000 tokens short of full, so the rewritten key's PX (the time to refill: 6 min) outlives the reads
    // below on a loaded machine (10 short gave 36 ms)
    await redis.client.set(old, `${(1_000_000 - 100_000) * 3_600_000} 0 ${last}`, 'PX', 60_000);
    const ds = await Promise.all(['nan', 'fraction', 'inf', 'old'].map((key) => l.check({ policy: 's', key, cost: 1 })));
    expect(ds.map((d) => d.degraded ?? false)).toStrictEqual([true, true, true, false]);
    expect(ds[3]).toMatchObject({ allowed: true, remaining: 1_000_000 - 100_001 });
    expect(await kinds(l)).toStrictEqual([0, 1, 0, 0, 1]);
    // the unreadable ones are left as they were; the old one is rewritten packed
    expect((await redis.client.getBuffer(nan))!.equals(encodeState(NaN, 0, last))).toBe(true);
    expect(decodeState((await redis.client.getBuffer(old))!)).toStrictEqual([(1_000_000 - 100_001) * 3_600_000, 0, last]);
  });

  it('script errors do not open the circuit breaker: one poisoned key cannot switch Redis off for the others', async () => {
    // the default breaker: 5 calls in the window, 50% failures open it
    const l = await strictLimiter('kb:', {});
    await connected(l);
    expect((await l.check({ policy: 's', key: 'poison', cost: 1 })).degraded ?? false).toBe(false);
    const stateKey = stateKeyOf(l, 'kb:', 'poison');
    await redis.client.del(stateKey);
    await redis.client.rpush(stateKey, 'not a rate-limit state');
    await degradedChecks(l, 'poison', 12);
    expect(await kinds(l)).toStrictEqual([0, 12, 0, 0, 12]);
    const m = parseMetrics(await createMetrics(l).render());
    expect(value(m, 'sluice_store_breaker_state')).toBe(0);
    expect(await l.check({ policy: 's', key: 'clean', cost: 1 })).toMatchObject({ allowed: true, remaining: 999_999 });
    expect((await l.check({ policy: 's', key: 'clean', cost: 1 })).degraded ?? false).toBe(false);
    expect(await kinds(l)).toStrictEqual([0, 12, 0, 0, 12]);
  });

  it('Redis not there at all: each call is a connection error', async () => {
    // a port nothing listens on: the client never connects (createLimiter waits 2 s for it, then starts)
    const gone = await startRedis();
    const url = gone.url;
    await gone.stop();
    const l = await strictLimiter('kc:', NEVER_OPENS, url);
    expect(l.storeStatus()).toBe('disconnected');
    await degradedChecks(l, 'k', 3);
    expect(await kinds(l)).toStrictEqual([0, 0, 3, 0, 3]);
  });
});
