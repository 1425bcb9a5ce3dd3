/**
 * ADVERSARIAL (expected to FAIL on 3b83af1): maxKeys with guarded policies and shards > 0.
 *
 * Every check of a guarded policy is routed to the guard's shard (front.ts dispatch: rt.guardHashes[1]), but
 * each shard's table is sized Math.ceil(maxKeys / shards) (limiter.ts). With the built-in default config
 * (free and paid both guarded by global) and shards: 4, the limiter holds only maxKeys/4 keys: tenants'
 * state is evicted (and their usage forgotten) long before `maxKeys` keys exist.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { defaultConfig } from '../../../src/config/default.js';

describe('maxKeys is the number of keys held, whatever the shard count (guarded policies)', () => {
  it.each([0, 4])('shards %i: 6,001 keys under maxKeys 10,000 are all kept', async (shards) => {
    const limiter = await createLimiter({ policies: defaultConfig().policies, shards, maxKeys: 10_000, clock: () => 1_700_000_000_000 });
    try {
      for (let b = 0; b < 6; b++) {
        await limiter.checkMany(Array.from({ length: 1000 }, (_, i) => ({
          policy: 'free', descriptors: { tenant: `t${b * 1000 + i}`, action: 'read' }, cost: 1,
        })));
      }
      const st = await limiter.stats();
      const again = await limiter.check({ policy: 'free', descriptors: { tenant: 't0', action: 'read' }, cost: 1 });
      // actual on 3b83af1 with shards 4: { keys: 2500, evictions: 3503, remaining: 99 }
      expect({ keys: st.keys, evictions: st.evictions, remaining: again.remaining }).toStrictEqual({ keys: 6001, evictions: 0, remaining: 98 });
    } finally {
      await limiter.close();
    }
  }, 60_000);
});
