/**
 * Shared case 09: refill is exact. No pattern of calls may lose (or gain) any fraction of a token: polls
 * more often than one token's worth of time still see the bucket refill at the configured rate.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ReferenceModel } from '../../helpers/model.js';
import { SHARDS, main, runTable, withSession, type Row } from './table.js';

const BUCKETS = ['token_bucket', 'gcra'] as const;

const rows = (table: Array<[t: number, cost: number, expect: string]>): Row[] =>
  table.map(([t, cost, expect]) => ({ t, cost, expect }));

/** 2 per second, burst 4, polled every 250 ms after a drain: every second poll is admitted. */
const HALF_TOKENS = rows([
  [0, 1, 'allow r=3 reset=500'],
  [0, 1, 'allow r=2 reset=1000'],
  [0, 1, 'allow r=1 reset=1500'],
  [0, 1, 'allow r=0 reset=2000'],
  [0, 1, 'deny r=0 retry=500 reset=2000'],
  [250, 1, 'deny r=0 retry=250 reset=1750'],
  [500, 1, 'allow r=0 reset=2000'],
  [750, 1, 'deny r=0 retry=250 reset=1750'],
  [1000, 1, 'allow r=0 reset=2000'],
  [1250, 1, 'deny r=0 retry=250 reset=1750'],
  [1500, 1, 'allow r=0 reset=2000'],
]);

/** 2 per second, burst 10: 600 ms after spending one token, 1.2 came back (capped at the burst): 10 fit. */
const TO_FULL = rows([
  [0, 1, 'allow r=9 reset=500'],
  [600, 10, 'allow r=0 reset=5000'],
]);

/** 10 per second, burst 1, polled every ms: denied with retry = 100 − t from 1 to 99, admitted at 100. */
const PER_MS = rows([
  [0, 1, 'allow r=0 reset=100'],
  ...Array.from({ length: 99 }, (_, i): [number, number, string] => [i + 1, 1, `deny r=0 retry=${99 - i} reset=${99 - i}`]),
  [100, 1, 'allow r=0 reset=100'],
]);

/** 5 per second, drained at 0, then 40 calls at gaps 150, 350, 150, … ms: only the first is denied. */
const JITTER = rows([
  [0, 5, 'allow r=0 reset=1000'],
  [150, 1, 'deny r=0 retry=50 reset=850'],
  [500, 1, 'allow r=1 reset=700'],
  [650, 1, 'allow r=1 reset=750'],
  [1000, 1, 'allow r=2 reset=600'],
  [1150, 1, 'allow r=1 reset=650'],
  [1500, 1, 'allow r=2 reset=500'],
  [1650, 1, 'allow r=2 reset=550'],
  [2000, 1, 'allow r=3 reset=400'],
  [2150, 1, 'allow r=2 reset=450'],
  [2500, 1, 'allow r=3 reset=300'],
  [2650, 1, 'allow r=3 reset=350'],
  [3000, 1, 'allow r=4 reset=200'],
  [3150, 1, 'allow r=3 reset=250'],
  [3500, 1, 'allow r=4 reset=200'],
  [3650, 1, 'allow r=3 reset=250'],
  [4000, 1, 'allow r=4 reset=200'],
  [4150, 1, 'allow r=3 reset=250'],
  [4500, 1, 'allow r=4 reset=200'],
  [4650, 1, 'allow r=3 reset=250'],
  [5000, 1, 'allow r=4 reset=200'],
  [5150, 1, 'allow r=3 reset=250'],
  [5500, 1, 'allow r=4 reset=200'],
  [5650, 1, 'allow r=3 reset=250'],
  [6000, 1, 'allow r=4 reset=200'],
  [6150, 1, 'allow r=3 reset=250'],
  [6500, 1, 'allow r=4 reset=200'],
  [6650, 1, 'allow r=3 reset=250'],
  [7000, 1, 'allow r=4 reset=200'],
  [7150, 1, 'allow r=3 reset=250'],
  [7500, 1, 'allow r=4 reset=200'],
  [7650, 1, 'allow r=3 reset=250'],
  [8000, 1, 'allow r=4 reset=200'],
  [8150, 1, 'allow r=3 reset=250'],
  [8500, 1, 'allow r=4 reset=200'],
  [8650, 1, 'allow r=3 reset=250'],
  [9000, 1, 'allow r=4 reset=200'],
  [9150, 1, 'allow r=3 reset=250'],
  [9500, 1, 'allow r=4 reset=200'],
  [9650, 1, 'allow r=3 reset=250'],
  [10_000, 1, 'allow r=4 reset=200'],
]);

describe.each(SHARDS)('09 fractional refill is never lost, shards: %i', (shards) => {
  describe.each(BUCKETS)('%s', (algorithm) => {
    it('half tokens: 2 per second, burst 4, polled every 250 ms after a drain', async () => {
      const ds = await runTable(main(algorithm, 2, 1000, 4), shards, HALF_TOKENS, algorithm);
      expect(ds.map((d) => d.allowed)).toStrictEqual([true, true, true, true, false, false, true, false, true, false, true]);
    });

    it('to full: 2 per second, burst 10, cost 10 fits 600 ms after spending one token', async () => {
      await runTable(main(algorithm, 2, 1000, 10), shards, TO_FULL, algorithm);
    });

    it('per ms: 10 per second, burst 1, polled every millisecond (101 calls)', async () => {
      expect(PER_MS).toHaveLength(101);
      const ds = await runTable(main(algorithm, 10, 1000, 1), shards, PER_MS, algorithm);
      expect(ds.filter((d) => d.allowed)).toHaveLength(2);
    });

    it('jitter: 5 per second, drained, then 40 calls at uneven gaps; only the first is denied', async () => {
      expect(JITTER).toHaveLength(41);
      const ds = await runTable(main(algorithm, 5, 1000), shards, JITTER, algorithm);
      expect(ds.map((d, i) => (d.allowed ? -1 : i)).filter((i) => i >= 0)).toStrictEqual([1]);
      expect(ds.filter((d) => d.allowed)).toHaveLength(40);
    });
  });
});

// Also check: with random gaps, many shorter than one token's worth of time, every decision equals the
// exact rational model, so over a long run the admitted count is exactly the model's.
describe('09 random gaps against the exact model', () => {
  it.each(BUCKETS)('%s: 7 per second (142 6/7 ms a token), burst 3, 1 500 polls at gaps of 0..60 ms', async (algorithm) => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 1500, maxLength: 1500 }), async (gaps) => {
        const model = new ReferenceModel({ main: { algorithm, limit: 7, period: 1000, burst: 3 } });
        await withSession(main(algorithm, 7, 1000, 3), 0, async (s) => {
          let t = 0;
          let admitted = 0;
          let expected = 0;
          for (const gap of gaps) {
            t += gap;
            const d = await s.check(t, { policy: 'main', key: 'k', cost: 1 });
            const m = model.check('main', 'k', 1, t);
            expect({ allowed: d.allowed, remaining: d.remaining, resetAfterMs: d.resetAfterMs, retryAfterMs: d.retryAfterMs }, `t=${t}`).toStrictEqual(m);
            if (d.allowed) admitted++;
            if (m.allowed) expected++;
          }
          expect(admitted).toBe(expected);
          // The rate is the real rate: never more than burst + elapsed·L/P.
          expect(admitted).toBeLessThanOrEqual(3 + Math.floor((t * 7) / 1000));
        });
      }),
      { numRuns: 10 },
    );
  }, 60_000);
});
