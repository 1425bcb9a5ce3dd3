/**
 * lua/check.lua on the shared redis-server, on Redis's clock: a written key expires at the Redis time its check
 * was decided at plus the check's resetAfterMs, rounded up to the next whole second (never early, at most
 * 999 ms late), on a new key and on one written before, decided without a slot (a check of one leg on a key
 * no other leg of the call names, marked src/store/contract.ts UNIQUE_KEY) or through one (a key named twice); on
 * the caller's clock the same rule as a relative expiry; and the keys MGET reads as false are told apart (new, or of another type) whether one
 * EXISTS of all of them settles them or one per key has to: a key of another type among new keys makes its
 * own check unreadable and nothing else.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../src/store/redis.js';
import { LEG_WIDE } from '../../src/store/reply.js';
import { UNIQUE_KEY } from '../../src/store/contract.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';

const HOUR = 3_600_000;
/** A token bucket of 10 refilled 1 an hour, cost 3, a check of one leg. */
const LEG = [0, 1, HOUR, 10, 3, 1];

describe('strict script: expiry and new keys', () => {
  let redis: SharedRedis;
  let rs: RedisStore;
  beforeAll(async () => {
    redis = await sharedRedis();
    rs = RedisStore.create({ url: redis.url, timeoutMs: 5000 });
    await rs.connected(2000);
  });
  afterAll(async () => {
    await rs?.close();
    await redis?.stop();
  });

  it.each([
    ['through its slot', 0, ['sluice:x:a', 'sluice:x:b', 'sluice:x:c']],
    ['marked UNIQUE_KEY', UNIQUE_KEY, ['sluice:x:ua', 'sluice:x:ub']],
  ])('a written key expires at the decision\'s Redis time plus its resetAfterMs rounded up to a whole second, new or written before (%s)', async (_, mark, keys) => {
    const leg = [LEG[0] + mark, ...LEG.slice(1)];
    for (const round of [1, 2]) {
      const wide = await rs.decideWide(keys, keys.flatMap(() => leg), 0);
      for (let j = 0; j < keys.length; j++) {
        const [code, remaining, reset, , t] = wide.slice(j * LEG_WIDE, j * LEG_WIDE + 5);
        expect([code, remaining], `round ${round}, ${keys[j]}`).toStrictEqual([0, round === 1 ? 7 : 4]);
        // 3 (then 6, less what refilled) tokens at 1 an hour
        expect(reset).toBeGreaterThan(0);
        expect(await redis.client.pexpiretime(keys[j]), `round ${round}, ${keys[j]}`).toBe(Math.ceil((t + reset) / 1000) * 1000);
      }
    }
  });

  it('a key two checks of one call name gets the same rule, once, from its last state', async () => {
    const keys = ['sluice:x:twice', 'sluice:x:once', 'sluice:x:twice'];
    const wide = await rs.decideWide(keys, keys.flatMap(() => LEG), 0);
    const row = (j: number) => wide.slice(j * LEG_WIDE, j * LEG_WIDE + 5);
    expect(row(0).slice(0, 2)).toStrictEqual([0, 7]);
    expect(row(1).slice(0, 2)).toStrictEqual([0, 7]);
    expect(row(2).slice(0, 2)).toStrictEqual([0, 4]);
    const [, , reset, , t] = row(2);
    expect(await redis.client.pexpiretime('sluice:x:twice')).toBe(Math.ceil((t + reset) / 1000) * 1000);
    expect(await redis.client.pexpiretime('sluice:x:once')).toBe(Math.ceil((row(1)[4] + row(1)[2]) / 1000) * 1000);
  });

  it('on the caller\'s clock, a key expires after its resetAfterMs rounded up to a whole second of Redis\'s own time', async () => {
    const own = RedisStore.create({ url: redis.url, timeoutMs: 5000, clock: 'limiter' });
    try {
      await own.connected(2000);
      // 3 tokens of a bucket refilled 7 every 10 s: full again in 4286 ms, so the key lives 5 s
      const leg = [0, 7, 10_000, 10, 3, 1];
      const before = await redis.client.time();
      const wide = await own.decideWide(['sluice:x:rel'], leg, 1_000_500);
      const after = await redis.client.time();
      expect(wide.slice(0, 3)).toStrictEqual([0, 7, 4286]);
      // TIME: [seconds, microseconds]
      const ms = (tm: ReadonlyArray<string | number>) => Number(tm[0]) * 1000 + Math.floor(Number(tm[1]) / 1000);
      const at = await redis.client.pexpiretime('sluice:x:rel');
      expect(at).toBeGreaterThanOrEqual(ms(before) + 5000);
      expect(at).toBeLessThanOrEqual(ms(after) + 5000);
    } finally {
      await own.close();
    }
  });

  it('tells new keys from keys of another type: only the check on the other type is unreadable', async () => {
    await redis.client.hset('sluice:y:hash', 'f', '1');
    await redis.client.set('sluice:y:written', Buffer.alloc(24)); // a valid state: w0 = w1 = lastSeen = 0
    const cases: Array<{ keys: string[]; bad: number[] }> = [
      // new keys only: one EXISTS answers 0 for all of them
      { keys: ['sluice:y:n1', 'sluice:y:n2', 'sluice:y:n3'], bad: [] },
      // the other type between new keys: that EXISTS answers 1, then one per key
      { keys: ['sluice:y:n4', 'sluice:y:hash', 'sluice:y:n5', 'sluice:y:written', 'sluice:y:n6'], bad: [1] },
      // the other type the only key read as false, first and last
      { keys: ['sluice:y:hash', 'sluice:y:written'], bad: [0] },
      { keys: ['sluice:y:written', 'sluice:y:hash'], bad: [1] },
      // a new key named twice, after the other type
      { keys: ['sluice:y:hash', 'sluice:y:n7', 'sluice:y:n7'], bad: [0] },
    ];
    // tokens left per key ('written' holds a state last seen at time 0: full, as a new key)
    const left = new Map<string, number>();
    for (const { keys, bad } of cases) {
      const wide = await rs.decideWide(keys, keys.flatMap(() => LEG), 0);
      for (let j = 0; j < keys.length; j++) {
        const row = wide.slice(j * LEG_WIDE, j * LEG_WIDE + 2);
        const where = `${keys.join(',')}: leg ${j}`;
        if (bad.includes(j)) {
          expect(row, where).toStrictEqual([NaN, NaN]);
          continue;
        }
        left.set(keys[j], (left.get(keys[j]) ?? 10) - 3);
        expect(row, where).toStrictEqual([0, left.get(keys[j])]);
        expect(await redis.client.exists(keys[j]), where).toBe(1);
      }
    }
    expect(left.get('sluice:y:written')).toBe(1);
    expect(left.get('sluice:y:n7')).toBe(4);
    expect(await redis.client.type('sluice:y:hash')).toBe('hash');
  });
});
