/**
 * The store failure rule (src/engine/failure.ts) for a cost no state could ever admit: denied for good under
 * `open` and `closed` alike (`retryAfterMs: null`, the reason, the leg that can never pass), as the store
 * would deny it, and marked degraded; a cost within capacity still takes the rule. On a MemoryStore whose
 * decisions fail on demand, on a controlled clock.
 */
import { describe, expect, it } from 'vitest';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');

describe('a store failure and a cost that can never pass', () => {
  it('open and closed deny it for good, naming the leg; within capacity the rule applies', async () => {
    const { l, fail } = await flakyLimiter({
      open: { algorithm: 'token_bucket', limit: 5, period: '1m', burst: 10, consistency: 'strict', onStoreError: 'open' },
      closed: { algorithm: 'fixed_window', limit: 4, period: '1m', consistency: 'strict', onStoreError: 'closed' },
      guarded: { algorithm: 'token_bucket', limit: 100, period: '1m', consistency: 'strict', onStoreError: 'open', guard: 'small' },
      small: { algorithm: 'gcra', limit: 3, period: '1m', burst: 2, consistency: 'strict', onStoreError: 'open' },
      none: { algorithm: 'token_bucket', limit: 0, period: '1m', consistency: 'strict', onStoreError: 'open' },
    }, T0);
    try {
      fail(true);
      const never = (policy: string, limit: number, reason: string, rule: string) => ({
        allowed: false, limit, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy, reason, degraded: true, degradedBy: rule,
      });
      expect(await l.check({ policy: 'open', key: 'k', cost: 11 })).toStrictEqual(never('open', 5, 'cost exceeds the limit\'s capacity', 'open'));
      expect(await l.check({ policy: 'open', key: 'k', cost: 10 })).toMatchObject({ allowed: true, degraded: true, degradedBy: 'open' });
      expect(await l.check({ policy: 'closed', key: 'k', cost: 5 })).toStrictEqual(never('closed', 4, 'cost exceeds the limit\'s capacity', 'closed'));
      expect(await l.check({ policy: 'closed', key: 'k', cost: 4 })).toMatchObject({ allowed: false, retryAfterMs: 1000, degradedBy: 'closed' });
      // the guard's burst of 2 is the leg that can never pass 3
      expect(await l.check({ policy: 'guarded', key: 'k', cost: 3 })).toStrictEqual(never('small', 3, 'cost exceeds the limit\'s capacity', 'open'));
      expect(await l.check({ policy: 'none', key: 'k', cost: 1 })).toStrictEqual(never('none', 0, 'limit is 0', 'open'));
      expect(await l.check({ policy: 'none', key: 'k', cost: 0 })).toMatchObject({ allowed: true, degradedBy: 'open' });
      fail(false);
      // the store's own answer to the same check: denied for good, with the same reason
      expect(await l.check({ policy: 'open', key: 'k', cost: 11 })).toMatchObject({ allowed: false, retryAfterMs: null, reason: 'cost exceeds the limit\'s capacity' });
    } finally {
      await l.close();
    }
  });
});
