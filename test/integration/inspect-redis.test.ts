/**
 * limiter.inspect and limiter.reset for Redis-backed policies, on a redis-server of the test's own and a
 * controlled clock (`redis.clock: 'limiter'`, so every number is exact): strict reads the state from Redis and
 * a reset deletes it there; sync reports its staleness, and a reset drops the key's unmerged deltas so a later
 * merge does not bring its spending back.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { storeKey } from '../../src/keys/store-key.js';
import { ManualClock, EPOCH_MINUTE } from '../helpers/clock.js';
import { spend } from '../helpers/limiter.js';
import { connected, keysUnder, sharedRedis, type SharedRedis } from '../helpers/redis.js';

const T0 = EPOCH_MINUTE;
let redis: SharedRedis;
beforeAll(async () => {
  redis = await sharedRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
  await redis.client.flushdb();
});

async function limiter(policies: Record<string, PolicySpec>, clock: ManualClock, shards: number, syncIntervalMs = 20): Promise<Limiter> {
  const l = await createLimiter({
    policies, shards, clock: clock.now, maxKeys: 4096,
    redis: { url: redis.url, clock: 'limiter', timeoutMs: 1000, syncIntervalMs },
  });
  open.push(l);
  await connected(l);
  return l;
}

describe.each([0, 2])('Redis-backed inspect and reset, %i shards', (shards) => {
  it('strict: the state read from Redis, exact; reset deletes it there', async () => {
    const clock = new ManualClock();
    const l = await limiter({
      api: { limits: [
        { algorithm: 'token_bucket', limit: 100, period: '1m' },
        { algorithm: 'sliding_window', limit: 50, period: '1m', name: 'api-window' },
      ], consistency: 'strict', onStoreError: 'closed' },
    }, clock, shards);
    expect(await spend(l, 'api', 'acme', 10)).toBe(10);
    clock.advance(61_500); // 1.5 s into the next window; the bucket refilled 102.5 > 100 tokens: full
    const version = l.policies.get('api')!.version;
    expect(await l.inspect({ policy: 'api', key: 'acme' })).toStrictEqual({
      policy: 'api', key: 'acme', version, source: 'redis',
      limits: [
        { name: 'api#0', algorithm: 'token_bucket', limit: 100, burst: 100, periodMs: 60_000, held: true, lastUpdateMs: T0, tokens: 100, remaining: 100, resetAfterMs: 0 },
        // the previous window's 10 weigh 10 · 58.5/60 = 9.75
        { name: 'api-window', algorithm: 'sliding_window', limit: 50, burst: 50, periodMs: 60_000, held: true, lastUpdateMs: T0, count: 0, previousCount: 10, remaining: 40, resetAfterMs: 58_500 },
      ],
    });
    const keys = [0, 1].map((i) => storeKey('sluice:', 'api', version, 'acme', i));
    expect(await keysUnder(redis.client, 'sluice:')).toStrictEqual([...keys].sort());
    expect(await l.reset({ policy: 'api', key: 'acme' })).toStrictEqual({ removed: 2 });
    expect(await keysUnder(redis.client, 'sluice:')).toStrictEqual([]);
    expect((await l.inspect({ policy: 'api', key: 'acme' })).limits.map((s) => [s.held, s.lastUpdateMs, s.remaining])).toStrictEqual([
      [false, null, 100], [false, null, 50],
    ]);
  });

  it('sync: local state with its staleness; reset drops unmerged deltas and the merged state', async () => {
    const clock = new ManualClock();
    // a long interval: nothing merges unless the test makes it (close() merges what is pending)
    const l = await limiter({ s: { algorithm: 'token_bucket', limit: 100, period: '1m', consistency: 'sync' } }, clock, shards, 3_600_000);
    expect(await spend(l, 's', 'acme', 10)).toBe(10);
    expect(await spend(l, 's', 'other', 3)).toBe(3);
    clock.advance(500);
    expect(await l.inspect({ policy: 's', key: 'acme' })).toMatchObject({
      source: 'local', stalenessMs: 500,
      limits: [{ held: true, lastUpdateMs: T0, tokens: 90, remaining: 90 }],
    });
    // not merged yet: only the kernel held it; its delta is dropped, so the merge at close writes only "other"
    expect(await l.reset({ policy: 's', key: 'acme' })).toStrictEqual({ removed: 1 });
    await l.close();
    const version = l.policies.get('s')!.version;
    expect(await keysUnder(redis.client, 'sluice:{s:')).toStrictEqual([storeKey('sluice:', 's', version, 'other', 0)]);

    // merged state: a second instance resets it in Redis (and in its own kernel, which never held it)
    const clock2 = new ManualClock(T0 + 1000);
    const l2 = await limiter({ s: { algorithm: 'token_bucket', limit: 100, period: '1m', consistency: 'sync' } }, clock2, shards, 3_600_000);
    expect(await l2.reset({ policy: 's', key: 'other' })).toStrictEqual({ removed: 1 });
    expect(await keysUnder(redis.client, 'sluice:{s:')).toStrictEqual([]);
  });
});
