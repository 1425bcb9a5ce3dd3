/**
 * onLimit: delay in the kernel: a token bucket or GCRA leg carrying maxDelayMs (IN_LIMIT's DELAY_SHIFT part)
 * that is short of tokens, but refills enough within maxDelayMs, is admitted now in debt with its wait in the
 * retry field. Hand-computed: L 10 per 1000 ms, B 10, so x = tokens·P refills 10 per ms and one token is 100 ms.
 */
import { describe, expect, it } from 'vitest';
import { allow, deny, FIXED_WINDOW, GCRA, group, later, lim, never, newKernel, readOut, TOKEN_BUCKET, writeLeg } from './harness.js';
import type { Kernel } from '../../../src/shard/kernel.js';

const t0 = 1_000_000;

function run(k: Kernel, key: number, limit: number, cost: number, now: number, delay: number): ReturnType<typeof readOut> {
  writeLeg(k, 0, { key, limit, cost, delay });
  k.decide(1, now);
  return readOut(k, 0);
}

for (const [name, code] of [['token_bucket', TOKEN_BUCKET], ['gcra', GCRA]] as const) {
  describe(`${name}: onLimit delay`, () => {
    const fresh = () => newKernel([lim(code, 10, 1000), lim(FIXED_WINDOW, 2, 1000)]);

    it('admits in debt within maxDelay, FIFO per key, then denies with the earliest admitted retry', () => {
      const k = fresh();
      expect(run(k, 1, 0, 10, t0, 250)).toStrictEqual(allow(0, 1000)); // spends the bucket, no delay needed
      // one token short: 100 ms of refill; the debt makes the next one wait 200, then 300 (> 250: denied)
      expect(run(k, 1, 0, 1, t0, 250)).toStrictEqual(later(1100, 100));
      expect(run(k, 1, 0, 1, t0, 250)).toStrictEqual(later(1200, 200));
      expect(run(k, 1, 0, 1, t0, 250)).toStrictEqual(deny(0, 1200, 50)); // 300 − 250: retry at t0 + 50
      // a denied check changed nothing: at t0 + 50 the same check waits exactly maxDelay, due at t0 + 300
      expect(run(k, 1, 0, 1, t0 + 49, 250)).toStrictEqual(deny(0, 1151, 1));
      expect(run(k, 1, 0, 1, t0 + 50, 250)).toStrictEqual(later(1250, 250));
      // a peek in debt reports the state, no delay
      expect(run(k, 1, 0, 0, t0 + 50, 250)).toStrictEqual(allow(0, 1250));
      // the debt is repaid at t0 + 300 (3 tokens · 100 ms after t0, less the 0.5 s... exactly: x = −3000 + 3000)
      expect(run(k, 1, 0, 0, t0 + 300, 0)).toStrictEqual(allow(0, 1000));
      expect(run(k, 1, 0, 1, t0 + 399, 0)).toStrictEqual(deny(0, 901, 1));
      expect(run(k, 1, 0, 1, t0 + 400, 0)).toStrictEqual(allow(0, 1000));
    });

    it('maxDelay 0 (no wait place) denies as ever; a cost above the burst never waits', () => {
      const k = fresh();
      expect(run(k, 2, 0, 10, t0, 0)).toStrictEqual(allow(0, 1000));
      expect(run(k, 2, 0, 1, t0, 0)).toStrictEqual(deny(0, 1000, 100));
      expect(run(k, 2, 0, 11, t0, 100_000)).toStrictEqual(never(0, 1000));
      // a wait of exactly maxDelay is admitted; one more ms is not
      expect(run(k, 2, 0, 3, t0, 299)).toStrictEqual(deny(0, 1000, 1));
      expect(run(k, 2, 0, 3, t0, 300)).toStrictEqual(later(1300, 300));
    });

    it('the largest maxDelay the ABI carries, on a large cost', () => {
      const k = newKernel([lim(code, 1, 2 ** 29 - 1, 1)]);
      expect(run(k, 3, 0, 1, t0, 2 ** 29 - 1)).toStrictEqual(allow(0, 2 ** 29 - 1));
      // one token refills in 2^29 − 1 ms: admitted with that delay, due when the bucket is back at 0
      expect(run(k, 3, 0, 1, t0, 2 ** 29 - 1)).toStrictEqual(later(2 * (2 ** 29 - 1), 2 ** 29 - 1));
      expect(run(k, 3, 0, 1, t0, 2 ** 29 - 1)).toStrictEqual(deny(0, 2 * (2 ** 29 - 1), 2 ** 29 - 1));
    });

    it('in a group, a delayed leg commits only if every leg admits', () => {
      const k = fresh();
      expect(run(k, 4, 0, 10, t0, 0)).toStrictEqual(allow(0, 1000));
      // the window leg (limit 2) admits twice; the bucket leg is delayed 100, then 200
      expect(group(k, [{ key: 4, limit: 0, cost: 1, delay: 500 }, { key: 40, limit: 1, cost: 1 }], t0)).toStrictEqual([later(1100, 100), allow(1, 1000)]);
      expect(group(k, [{ key: 4, limit: 0, cost: 1, delay: 500 }, { key: 40, limit: 1, cost: 1 }], t0)).toStrictEqual([later(1200, 200), allow(0, 1000)]);
      // the window is full: the check is denied and the bucket leg reports its state untouched (no debt added; legs of one check use distinct keys, as the engine salts them)
      expect(group(k, [{ key: 4, limit: 0, cost: 1, delay: 500 }, { key: 40, limit: 1, cost: 1 }], t0)).toStrictEqual([allow(0, 1200), deny(0, 1000, 1000)]);
      expect(run(k, 4, 0, 1, t0, 500)).toStrictEqual(later(1300, 300));
    });
  });
}
