/**
 * A reload while a strict call is held (src/engine/deciders/strict.ts, StrictDecider.held), on Redis: a guard
 * added to a policy keeps its version (a hash of its own limits) and so its keys, so a check made before the
 * reload and one made after it can name the same key in one call. The first was marked UNIQUE_KEY (one leg,
 * no other check of the call named its key then); lua/check.lua decides a marked leg from its MGET value, so
 * the guarded check after it read the key as it was before the call, and one spend was lost. The first call
 * waits until the test releases it (a spy over the RedisStore), so the checks after it are held.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { RedisStore } from '../../src/store/redis.js';
import type { Store } from '../../src/store/contract.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';

const tb = { algorithm: 'token_bucket' as const, limit: 10, period: 3_600_000, consistency: 'strict' as const, onStoreError: 'closed' as const };
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('a reload while a strict call is held (Redis)', () => {
  let redis: SharedRedis;
  beforeAll(async () => {
    redis = await sharedRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('every check of a key made across the reload spends from it', async () => {
    const store = RedisStore.create({ url: redis.url, prefix: 'hr:' });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let first = true;
    const spy = Object.create(store) as Store;
    // every turn may hold (the store's own holdTurn, 8, needs turns of 8 strict checks)
    Object.defineProperty(spy, 'holdTurn', { value: 0 });
    spy.decideWide = (keys, args, now, wire) => {
      const go = first ? gate : Promise.resolve();
      first = false;
      return go.then(() => store.decideWide(keys, args, now, wire));
    };
    const policies = { p: tb, g: { ...tb, limit: 1000 } };
    const l = await createLimiter({ policies, store: spy });
    try {
      const ds = [l.check({ policy: 'p', key: 'x', cost: 1 })];
      await nextTurn();
      ds.push(l.check({ policy: 'p', key: 'a', cost: 1 }));
      await nextTurn();
      await l.reload({ ...policies, p: { ...tb, guard: 'g' } });
      ds.push(l.check({ policy: 'p', key: 'a', cost: 1 }));
      await nextTurn();
      release();
      expect((await Promise.all(ds)).map((d) => [d.allowed, d.remaining])).toEqual([[true, 9], [true, 9], [true, 8]]);
      // two checks of a spent: 8 left
      expect((await l.check({ policy: 'p', key: 'a', cost: 0 })).remaining).toBe(8);
    } finally {
      await l.close();
      await store.close();
    }
  });
});
