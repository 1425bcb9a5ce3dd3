/**
 * sliding_log in strict mode against a database of the run's shared redis-server, on the limiter's clock: the
 * stored value is the packed log (little-endian doubles ts, count, oldest first) with PX = P after an admission, and inspect
 * reads it as held, with the newest entry's time.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { connected, keysUnder, sharedRedis, type SharedRedis } from '../helpers/redis.js';

let redis: SharedRedis;
beforeAll(async () => { redis = await sharedRedis(); });
afterAll(async () => { await redis?.stop(); });

describe('sliding_log, consistency strict', () => {
  it('decides exactly and stores the log with PX = period', async () => {
    let t = 1_000_000;
    const limiter = await createLimiter({
      policies: { api: { algorithm: 'sliding_log', limit: 5, period: 60_000, consistency: 'strict', onStoreError: 'closed' } },
      shards: 0, clock: () => t,
      redis: { url: redis.url, prefix: 'slog:', clock: 'limiter', timeoutMs: 5000 },
    });
    try {
      await connected(limiter);
      expect(await limiter.check({ policy: 'api', key: 'k', cost: 2 })).toMatchObject({ allowed: true, remaining: 3, resetAfterMs: 60_000 });
      expect(await limiter.check({ policy: 'api', key: 'k', cost: 2 })).toMatchObject({ allowed: true, remaining: 1, resetAfterMs: 60_000 });
      t += 1000;
      expect(await limiter.check({ policy: 'api', key: 'k', cost: 2 })).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 59_000, resetAfterMs: 59_000 });
      expect(await limiter.check({ policy: 'api', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 60_000 });
      t += 1000;
      // 5 logged: 4 at 1 000 000 (one entry, coalesced), 1 at 1 001 000; cost 3 waits for the first entry to leave
      expect(await limiter.check({ policy: 'api', key: 'k', cost: 3 })).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 58_000, resetAfterMs: 59_000 });
      const [key] = await keysUnder(redis.client, 'slog:');
      const v = (await redis.client.getBuffer(key))!;
      expect([v.length, v.readDoubleLE(0), v.readDoubleLE(8), v.readDoubleLE(16), v.readDoubleLE(24)]).toStrictEqual([32, 1_000_000, 4, 1_001_000, 1]);
      const pttl = await redis.client.pttl(key);
      expect(pttl).toBeGreaterThan(50_000);
      expect(pttl).toBeLessThanOrEqual(60_000);
      const state = await limiter.inspect({ policy: 'api', key: 'k' });
      expect(state.limits.map((l) => [l.held, l.lastUpdateMs, l.count, l.remaining])).toStrictEqual([[true, 1_001_000, 5, 0]]);
    } finally {
      await limiter.close();
    }
  });
});
