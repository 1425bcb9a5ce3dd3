import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';

describe('eviction and a clock that steps back', () => {
  it('a key evicted as idle and seen again at an earlier time is not granted its window twice', async () => {
    let t = 0;
    const limiter = await createLimiter({
      policies: { p: { algorithm: 'fixed_window', limit: 1, period: 1000 } }, maxKeys: 1, clock: () => t,
    });
    try {
      const check = (key: string, at: number) => { t = at; return limiter.check({ policy: 'p', key, cost: 1 }); };
      expect(await check('A', 5999)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 1 });
      // B needs A's slot; A's window [5000, 6000) has ended at 6000, so A carries no information then
      expect(await check('B', 6000)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 1000 });
      expect((await limiter.stats()).evictions).toBe(1);
      // A again at 5999: a new key now starts no earlier than the eviction (6000), so this grant belongs
      // to window [6000, 7000), not a second grant in [5000, 6000)
      expect(await check('A', 5999)).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: 1000 });
      expect(await check('A', 5999)).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    } finally {
      await limiter.close();
    }
  });
});
