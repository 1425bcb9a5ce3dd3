/**
 * Sync merges against a real redis-server (issue #20, items 1 and 3): one instance admits exactly its limit
 * while merges are in flight; a burst of keys too large for one merge's old 20 ms deadline, and a freeze with
 * thousands of keys pending, end with every delta in Redis; a merge split from one that timed out applies once,
 * whichever of them Redis runs.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { RedisStore } from '../../src/store/redis.js';
import { engineOf } from '../../src/engine/handle.js';
import { insideWindow, keysUnder, startRedis, type TestRedis } from '../helpers/redis.js';
import { readState } from '../helpers/state.js';

let redis: TestRedis;
beforeAll(async () => { redis = await startRedis(); });
afterAll(async () => { await redis?.stop(); });
// every count is in one one-hour window: a test never straddles its end (the keys would expire there)
beforeEach(async () => { await insideWindow(redis.client, 3_600_000, 90_000); }, 100_000);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Sum of the fixed-window counts stored under `prefix` (a count is w0), and how many keys hold one. */
async function storedCounts(prefix: string): Promise<{ keys: number; total: number }> {
  let total = 0;
  const keys = (await keysUnder(redis.client, prefix)).filter((k) => k.startsWith(`${prefix}{`));
  for (const k of keys) total += Number((await readState(redis.client, k))!.split(' ')[0]);
  return { keys: keys.length, total };
}

/** Waits until nothing is waiting to be merged, at most `ms`. */
async function drained(l: Limiter, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (((await l.stats()).store?.sync?.pendingKeys ?? 0) > 0) {
    if (Date.now() > end) throw new Error(`still ${(await l.stats()).store?.sync?.pendingKeys} keys pending after ${ms} ms`);
    await sleep(20);
  }
}

const hour: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 1000, period: '1h', consistency: 'sync' } };

describe('sync merges', () => {
  it.each([0, 2])('a single instance admits exactly its limit while merges are in flight (item 3; shards %i)', async (shards) => {
    const prefix = `one${shards}:`;
    const l = await createLimiter({ policies: hour, shards, redis: { url: redis.url, prefix, syncIntervalMs: 1 } });
    try {
      let allowed = 0;
      // 3,000 checks of one key in turns of 10, each turn a round trip apart: merges are in flight throughout
      for (let turn = 0; turn < 300; turn++) {
        const ds = await l.checkMany(Array.from({ length: 10 }, () => ({ policy: 'p', key: 'k', cost: 1 })));
        for (const d of ds) if (!(d instanceof Error) && d.allowed) allowed++;
        await new Promise((r) => setImmediate(r));
      }
      expect(allowed).toBe(1000);
      await drained(l, 5000);
      expect(await storedCounts(prefix)).toStrictEqual({ keys: 1, total: 1000 });
      // merges ran while checks were admitted (how many depends on the machine's load)
      expect((await l.stats()).store?.sync?.merges).toBeGreaterThan(1);
    } finally {
      await l.close();
    }
  }, 30_000);

  // A synchronous call (the HTTP front's channel, src/shard/channel.ts) is answered and settled at once, while
  // a batch numbered before it may still be on its way: the two paths mixed on one key, with merges
  // installing states all along, still admit exactly the limit (the race itself, a state computed between the
  // call and the batch, is pinned deterministically in test/unit/shard/admissions.test.ts).
  it('a single instance admits exactly its limit with synchronous calls answered while batches are in flight (item 3; shards 2)', async () => {
    const prefix = 'mixed:';
    const l = await createLimiter({ policies: hour, shards: 2, redis: { url: redis.url, prefix, syncIntervalMs: 1 } });
    try {
      const now = engineOf(l)!.checkNow!;
      let allowed = 0;
      let sync = 0;
      for (let turn = 0; turn < 300; turn++) {
        const batch = l.checkMany(Array.from({ length: 5 }, () => ({ policy: 'p', key: 'k', cost: 1 })));
        await new Promise((r) => setImmediate(r)); // the turn's batch is sent to the shard
        for (let i = 0; i < 5; i++) {
          const d = now({ policy: 'p', key: 'k', cost: 1 });
          if (d !== undefined) sync++;
          if (d?.allowed === true) allowed++;
        }
        for (const d of await batch) if (!(d instanceof Error) && d.allowed) allowed++;
      }
      expect(sync).toBe(1500);
      expect(allowed).toBe(1000);
      await drained(l, 5000);
      expect(await storedCounts(prefix)).toStrictEqual({ keys: 1, total: 1000 });
      expect((await l.stats()).store?.sync?.merges).toBeGreaterThan(1);
    } finally {
      await l.close();
    }
  }, 30_000);

  it('20,000 distinct keys in one burst all reach Redis (item 1: a merge\'s deadline grows with its size)', async () => {
    const l = await createLimiter({ policies: hour, maxKeys: 30_000, redis: { url: redis.url, prefix: 'burst:', syncIntervalMs: 20 } });
    try {
      const n = 20_000;
      for (let at = 0; at < n; at += 1000) {
        await l.checkMany(Array.from({ length: 1000 }, (_, i) => ({ policy: 'p', key: `t${at + i}`, cost: 1 })));
      }
      await drained(l, 20_000);
      expect(await storedCounts('burst:')).toStrictEqual({ keys: n, total: n });
      expect((await l.stats()).store?.sync).toMatchObject({ dropped: 0, pendingKeys: 0 });
    } finally {
      await l.close();
    }
  }, 60_000);

  it('10,000 keys pending through a 2 s freeze all reach Redis after it (backoff, splitting)', async () => {
    const l = await createLimiter({ policies: hour, maxKeys: 30_000, redis: { url: redis.url, prefix: 'frozen:', syncIntervalMs: 20 } });
    try {
      redis.pause();
      const n = 10_000;
      try {
        for (let at = 0; at < n; at += 1000) {
          await l.checkMany(Array.from({ length: 1000 }, (_, i) => ({ policy: 'p', key: `t${at + i}`, cost: 2 })));
        }
        await sleep(2000);
      } finally {
        redis.resume();
      }
      expect((await l.stats()).store?.sync?.failures).toBeGreaterThan(0);
      await drained(l, 20_000);
      expect(await storedCounts('frozen:')).toStrictEqual({ keys: n, total: 2 * n });
    } finally {
      await l.close();
    }
  }, 60_000);

  it('a merge split from one in doubt applies once, whichever of them Redis runs first', async () => {
    const store = RedisStore.create({ url: redis.url, prefix: 'split:', clock: 'limiter', timeoutMs: 1000 });
    await store.connected(2000);
    try {
      const now = 1_000_000;
      // fixed window, L 1000, P 1 h: args per key are algorithm, L, P, B, delta
      const args = (deltas: number[]): number[] => deltas.flatMap((d) => [2, 1000, 3_600_000, 1000, d]);
      const keys = ['split:{a}:0', 'split:{b}:0'];
      // the parent ran whole (its reply was lost): its halves add nothing
      await store.merge(keys, args([1, 2]), now, 'P1');
      await store.merge([keys[0]], args([1]), now, 'P1a', { parents: ['P1'] });
      await store.merge([keys[1]], args([2]), now, 'P1b', { parents: ['P1'] });
      expect([await readState(redis.client, keys[0]), await readState(redis.client, keys[1])]).toStrictEqual(['1 0 1000000', '2 0 1000000']);
      // a half ran first: the parent, still queued in Redis, runs later and adds nothing; the other half applies
      await store.merge([keys[0]], args([10]), now, 'P2a', { parents: ['P2'] });
      await store.merge(keys, args([10, 20]), now, 'P2');
      await store.merge([keys[1]], args([20]), now, 'P2b', { parents: ['P2'] });
      // and a retry of a half adds nothing either; two levels of splitting are checked the same way
      await store.merge([keys[1]], args([20]), now, 'P2b', { parents: ['P2'] });
      await store.merge([keys[1]], args([5]), now, 'P3aa', { parents: ['P3', 'P3a'] });
      await store.merge([keys[1]], args([5]), now, 'P3a', { parents: ['P3'] });
      expect([await readState(redis.client, keys[0]), await readState(redis.client, keys[1])]).toStrictEqual(['11 0 1000000', '27 0 1000000']);
    } finally {
      await store.close();
    }
  });
});
