/**
 * ADVERSARIAL (expected to FAIL on 3b83af1): the cost that is validated is not the cost that is decided.
 * front.ts check(): policyOf() reads and validates req.cost, then `this.costs.push(req.cost)` reads it again.
 * An accessor (or Proxy) returning 1 then -5 / NaN / 1.5 gets an unvalidated cost into the kernel, which
 * saturates it (-5, NaN -> 0: a peek reported as admitted, the caller charged nothing; 2^64 -> "never") instead of rejecting with INVALID_ARGUMENT.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';

describe('the validated cost is the decided cost', () => {
  it.each([-5, Number.NaN, 2 ** 64])('second read of cost = %s', async (bad) => {
    const limiter = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 10, period: 1000 } }, maxKeys: 64, clock: () => 1_700_000_000_000 });
    try {
      let reads = 0;
      const req = { policy: 'p', key: 'k', get cost() { return reads++ === 0 ? 1 : bad; } };
      const r = await limiter.check(req).then((d) => ({ allowed: d.allowed, remaining: d.remaining }), (e: { code: string }) => e.code);
      // with a single read of cost: admitted with cost 1 -> { allowed: true, remaining: 9 }
      expect(r).toStrictEqual({ allowed: true, remaining: 9 });
    } finally {
      await limiter.close();
    }
  });
});
