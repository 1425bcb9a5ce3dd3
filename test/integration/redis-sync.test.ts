/**
 * Sync (write-behind) mode against a real redis-server: decisions are local, consumed deltas are merged
 * every syncIntervalMs, and the merged state replaces each instance's own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { insideWindow, startRedis, type TestRedis } from '../helpers/redis.js';
import { readState } from '../helpers/state.js';

let redis: TestRedis;
beforeAll(async () => { redis = await startRedis(); });
afterAll(async () => { await redis?.stop(); });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (up to 5 s) until the limiter has merged at least `n` times: fixed sleeps flake on a loaded machine. */
async function merged(l: Limiter, n: number): Promise<void> {
  const end = Date.now() + 5000;
  while (((await l.stats()).store?.sync?.merges ?? 0) < n || ((await l.stats()).store?.sync?.pendingKeys ?? 0) > 0) {
    if (Date.now() > end) throw new Error(`no merge #${n} within 5 s`);
    await sleep(10);
  }
}

async function instance(policies: Record<string, PolicySpec>, prefix: string, clock?: () => number): Promise<Limiter> {
  return createLimiter({ policies, clock, redis: { url: redis.url, prefix, syncIntervalMs: 20, ...(clock ? { clock: 'limiter' } : {}) } });
}

async function storedState(prefix: string): Promise<string[]> {
  const keys = await redis.client.keys(`${prefix}{*`); // state keys; merge markers are `${prefix}merged:<id>`
  return Promise.all(keys.sort().map(async (k) => `${k.slice(prefix.length)} = ${await readState(redis.client, k)}`));
}

describe('sync mode', () => {
  it('decides locally, then merges the consumed tokens into Redis with an expiry', async () => {
    let t = 1_000_000;
    const l = await instance({ p: { algorithm: 'token_bucket', limit: 10, period: 1000, consistency: 'sync' } }, 's1:', () => t);
    try {
      for (let i = 0; i < 4; i++) expect(await l.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 9 - i });
      await merged(l, 1);
      // x = tokens·P = (10 − 4)·1000, stored at the merge time (the limiter's clock here)
      expect(await storedState('s1:')).toEqual([expect.stringMatching(/^\{p:[0-9a-f]{8}:k\}:0 = 6000 0 1000000$/)]);
      const [key] = await redis.client.keys('s1:{*');
      const ttl = await redis.client.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(400); // 4 tokens to refill at 10 per 1000 ms
      expect((await l.stats()).store?.sync).toMatchObject({ failures: 0, dropped: 0, pendingKeys: 0 });
      // a decision says how old its view of the other instances is
      t += 5;
      const d = await l.check({ policy: 'p', key: 'k', cost: 0 });
      expect(d.stalenessMs).toBeGreaterThanOrEqual(5);
    } finally {
      await l.close();
    }
  });

  it('an instance learns what the others spent at its next merge', async () => {
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 10, period: 3_600_000, consistency: 'sync' } };
    // exact counts of one hour's fixed window (epoch-aligned, Redis's clock), across merges that may each take
    // up to 5 s: all in one hour
    await insideWindow(redis.client, 3_600_000, 10_000);
    const a = await instance(policies, 's2:');
    const b = await instance(policies, 's2:');
    try {
      for (let i = 0; i < 8; i++) expect((await a.check({ policy: 'p', key: 'k', cost: 1 })).allowed).toBe(true);
      await merged(a, 1);
      // b has not touched the key yet: its first check is decided on its own (stale) view, then merged
      expect(await b.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 9 });
      await merged(b, 1);
      // now b's view is the merged one: 9 spent, 1 left
      expect(await b.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
      expect((await b.check({ policy: 'p', key: 'k', cost: 1 })).allowed).toBe(false);
      // a learns at its next merge, which its next admitted check would trigger; a peek does not merge, so
      // it still shows a's own view (2 left) until a spends
      expect(await a.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ allowed: true, remaining: 2 });
      expect((await a.check({ policy: 'p', key: 'k', cost: 1 })).allowed).toBe(true);
      await merged(a, 2);
      expect(await a.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ remaining: 0 });
    } finally {
      await a.close();
      await b.close();
    }
  }, 30_000 + 10_000); // and insideWindow's longest wait

  it('N instances hammering one key stay within the documented over-admission bound', async () => {
    // Bound (README, "sync"): over a span T, admitted ≤ B + L·T/P + (N − 1)·(B + L·(S + R)/P)
    const N = 3, L = 100, P = 1000, B = 100, S = 20, R = 100; // R: a generous bound on the merge round trip
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'token_bucket', limit: L, period: P, burst: B, consistency: 'sync' } };
    const limiters = await Promise.all(Array.from({ length: N }, () => instance(policies, 's3:')));
    let admitted = 0;
    const start = Date.now();
    try {
      await Promise.all(limiters.map(async (l) => {
        while (Date.now() - start < 1000) {
          const ds = await Promise.all(Array.from({ length: 5 }, () => l.check({ policy: 'p', key: 'hot', cost: 1 })));
          admitted += ds.filter((d) => d.allowed).length;
          await sleep(1);
        }
      }));
      const T = Date.now() - start;
      const bound = B + (L * T) / P + (N - 1) * (B + (L * (S + R)) / P);
      expect(admitted).toBeLessThanOrEqual(bound);
      expect(admitted).toBeGreaterThanOrEqual(B); // and it does admit: the shared quota is not starved
    } finally {
      await Promise.all(limiters.map((l) => l.close()));
    }
  });

  it('Redis paused: decisions go on locally, and every delta reaches Redis once it is back', async () => {
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 1000, period: 3_600_000, consistency: 'sync' } };
    // the stored count of one hour's fixed window (epoch-aligned, Redis's clock) is read after a pause and two
    // merges (~1.5 s, each merge up to 5 s): all in one hour, or the first hour's key expires before it is read
    await insideWindow(redis.client, 3_600_000, 15_000);
    const l = await createLimiter({ policies, redis: { url: redis.url, prefix: 's4:', syncIntervalMs: 20, timeoutMs: 20 } });
    try {
      for (let i = 0; i < 5; i++) await l.check({ policy: 'p', key: 'k', cost: 1 });
      await merged(l, 1);
      redis.pause();
      const during = [];
      for (let i = 0; i < 20; i++) {
        during.push(await l.check({ policy: 'p', key: 'k', cost: 2 }));
        await sleep(10);
      }
      expect(during.every((d) => d.allowed)).toBe(true);
      await sleep(100);
      expect((await l.stats()).store?.sync?.failures).toBeGreaterThan(0);
      redis.resume();
      await merged(l, 2);
      const [key] = await redis.client.keys('s4:{*');
      // 5 before, 20 × 2 during the outage: all counted, none lost
      expect((await readState(redis.client, key))!.split(' ')[0]).toBe('45');
      expect((await l.stats()).store?.sync).toMatchObject({ dropped: 0, pendingKeys: 0 });
    } finally {
      redis.resume();
      await l.close();
    }
  }, 30_000 + 15_000); // and insideWindow's longest wait

  it('close() merges what is pending before it returns', async () => {
    // a sliding window of a minute (epoch-aligned, Redis's clock): its 7 checks in one window, or some are the
    // previous window's count
    await insideWindow(redis.client, 60_000, 2_000);
    const l = await instance({ p: { algorithm: 'sliding_window', limit: 100, period: 60_000, consistency: 'sync' } }, 's5:');
    for (let i = 0; i < 7; i++) await l.check({ policy: 'p', key: 'k', cost: 1 });
    await l.close();
    const [key] = await redis.client.keys('s5:{*');
    expect((await readState(redis.client, key))!.split(' ')[1]).toBe('7'); // cur = 7
  });
});
