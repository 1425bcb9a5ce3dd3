/**
 * Shared case 02: the call that takes the last unit is admitted (not reported as a rejection), and
 * `remaining` is exact at the boundary and never negative.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable, withSession } from './table.js';

const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const;
type Algorithm = (typeof ALGORITHMS)[number];

describe.each(SHARDS)('02 last unit and remaining, shards: %i', (shards) => {
  describe('limit 1, period 10 000 ms', () => {
    const TABLE: Array<[t: number, bucketOrFixed: string, sliding: string]> = [
      [0, 'allow r=0 reset=10_000', 'allow r=0'],
      [1, 'deny r=0 retry=9999 reset=9999', 'deny r=0 retry=19_999'],
    ];
    it.each(ALGORITHMS)('%s', async (algorithm) => {
      const col = algorithm === 'sliding_window' ? 2 : 1;
      await runTable(main(algorithm, 1, 10_000), shards, TABLE.map((r) => ({ t: r[0], cost: 1, expect: r[col] })), algorithm);
    });
  });

  describe('limit 5, period 10 000 ms: seven unit calls on "k", then costs 2, 2, 2, 1 on "w"', () => {
    const TABLE: Array<[label: string, key: string, cost: number, fixed: string, sliding: string, bucket: string]> = [
      ['1', 'k', 1, 'allow r=4 reset=10_000', 'allow r=4', 'allow r=4 reset=2000'],
      ['2', 'k', 1, 'allow r=3 reset=10_000', 'allow r=3', 'allow r=3 reset=4000'],
      ['3', 'k', 1, 'allow r=2 reset=10_000', 'allow r=2', 'allow r=2 reset=6000'],
      ['4', 'k', 1, 'allow r=1 reset=10_000', 'allow r=1', 'allow r=1 reset=8000'],
      ['5', 'k', 1, 'allow r=0 reset=10_000', 'allow r=0', 'allow r=0 reset=10_000'],
      ['6', 'k', 1, 'deny r=0 retry=10_000 reset=10_000', 'deny r=0 retry=12_000', 'deny r=0 retry=2000 reset=10_000'],
      ['7', 'k', 1, 'deny r=0 retry=10_000 reset=10_000', 'deny r=0 retry=12_000', 'deny r=0 retry=2000 reset=10_000'],
      ['8', 'w', 2, 'allow r=3 reset=10_000', 'allow r=3', 'allow r=3 reset=4000'],
      ['9', 'w', 2, 'allow r=1 reset=10_000', 'allow r=1', 'allow r=1 reset=8000'],
      ['10', 'w', 2, 'deny r=1 retry=10_000 reset=10_000', 'deny r=1 retry=12_500', 'deny r=1 retry=2000 reset=8000'],
      ['11', 'w', 1, 'allow r=0 reset=10_000', 'allow r=0', 'allow r=0 reset=10_000'],
    ];
    const COLUMN: Record<Algorithm, 3 | 4 | 5> = { fixed_window: 3, sliding_window: 4, token_bucket: 5, gcra: 5 };

    it.each(ALGORITHMS)('%s', async (algorithm) => {
      const rows = TABLE.map((r) => ({ label: r[0], t: 0, key: r[1], cost: r[2], expect: r[COLUMN[algorithm]] }));
      const ds = await runTable(main(algorithm, 5, 10_000), shards, rows, algorithm);
      // remaining on "k": 4, 3, 2, 1, 0, 0, 0 — never negative.
      expect(ds.slice(0, 7).map((d) => d.remaining)).toStrictEqual([4, 3, 2, 1, 0, 0, 0]);
    });
  });

  // Also check: remaining is never negative, however many denied checks pile up.
  it.each(ALGORITHMS)('%s: 50 more denied checks at the boundary leave remaining at 0, and the last unit still goes through later', async (algorithm) => {
    await withSession(main(algorithm, 1, 10_000), shards, async (s) => {
      await s.row({ t: 0, expect: 'allow r=0' }, algorithm);
      for (let i = 0; i < 50; i++) await s.row({ t: 5000, expect: 'deny r=0' }, `${algorithm} denial #${i + 1}`);
      // Denials counted nothing: the next unit comes at 10 000 (buckets, fixed) or 20 000 (sliding).
      await s.row({ t: algorithm === 'sliding_window' ? 20_000 : 10_000, expect: 'allow r=0' }, algorithm);
    });
  });
});
