/**
 * ADVERSARIAL (expected to FAIL on 3b83af1): a brand-new key is dated at the latest eviction, not at `now`.
 *
 * README (Semantics): t' = max(t, the key's last-seen time); a new key has none, so t' = t. The kernel
 * (assembly/index.ts evaluate) uses `floor = exists ? last : evictedAt` for every absent key. After a single
 * forward clock excursion during which the (full) table evicted, every key created later (never seen before)
 * is pinned to the excursion's time: its bucket does not refill until real time catches up, and the
 * retryAfterMs it is given is a lie (waiting it does not help).
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';

describe('a new key starts at now', () => {
  it('a never-seen key refills normally after an eviction that happened at a later clock reading', async () => {
    let now = 1_700_000_000_000;
    const limiter = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 10, period: 1000 } }, maxKeys: 2, clock: () => now });
    try {
      await limiter.check({ policy: 'p', key: 'a', cost: 1 });
      await limiter.check({ policy: 'p', key: 'b', cost: 1 });
      now += 3_600_000; // the clock jumps an hour ahead for one check...
      await limiter.check({ policy: 'p', key: 'c', cost: 1 }); // ...which evicts (the table holds 2 keys)
      now -= 3_600_000; // and comes back
      for (let i = 0; i < 10; i++) await limiter.check({ policy: 'p', key: 'fresh', cost: 1 });
      const denied = await limiter.check({ policy: 'p', key: 'fresh', cost: 1 });
      expect({ allowed: denied.allowed, retryAfterMs: denied.retryAfterMs }).toStrictEqual({ allowed: false, retryAfterMs: 100 });
      now += denied.retryAfterMs!; // wait exactly what we were told
      const retried = await limiter.check({ policy: 'p', key: 'fresh', cost: 1 });
      // actual on 3b83af1: { allowed: false, retryAfterMs: 100 } (and so on for an hour)
      expect({ allowed: retried.allowed, retryAfterMs: retried.retryAfterMs }).toStrictEqual({ allowed: true, retryAfterMs: 0 });
    } finally {
      await limiter.close();
    }
  });
});
