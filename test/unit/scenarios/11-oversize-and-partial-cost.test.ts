/**
 * Shared case 11: a cost above capacity is a definite "never" (retryAfterMs null, with a reason) that
 * leaves the key untouched; a cost above what is left is an ordinary denial with the exact wait, and takes
 * nothing; a cost equal to the capacity fits a fresh key.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable, withSession, type Row } from './table.js';

type Line = [t: number, key: string, cost: number, expect: string];
const rows = (table: Line[]): Row[] => table.map(([t, key, cost, expect]) => ({ t, key, cost, expect }));

/** Limit 5 per 5 000 ms (one token per second), burst 5. */
const BUCKET = rows([
  [0, 'k', 6, 'deny r=5 retry=null reset=0'],
  [0, 'k', 5, 'allow r=0 reset=5000'],
  [1000, 'k', 3, 'deny r=1 retry=2000 reset=4000'],
  [1000, 'k', 1, 'allow r=0 reset=5000'],
  [3000, 'k', 2, 'allow r=0 reset=5000'],
  [3000, 'k', 1, 'deny r=0 retry=1000 reset=5000'],
]);

/** 10 per second, burst 2: the failed oversize call at 150 leaves no trace (not even its time). */
const SMALL_BURST = rows([
  [100, 'k', 2, 'allow r=0 reset=200'],
  [150, 'k', 3, 'deny r=0 retry=null reset=150'],
  [200, 'k', 1, 'allow r=0 reset=200'],
]);

/** Windows, limit 10 per 1 000 ms. */
const WEIGHTED: Array<[t: number, key: string, cost: number, fixed: string, sliding: string]> = [
  [0, 'k', 9, 'allow r=1 reset=1000', 'allow r=1'],
  [0, 'k', 2, 'deny r=1 retry=1000 reset=1000', 'deny r=1 retry=1112'],
  [0, 'k', 1, 'allow r=0 reset=1000', 'allow r=0'],
  [0, 'k', 11, 'deny r=0 retry=null reset=1000', 'deny r=0 retry=null'],
  [0, 'k2', 10, 'allow r=0 reset=1000', 'allow r=0'],
  [0, 'k3', 11, 'deny r=10 retry=null reset=1000', 'deny r=10 retry=null'],
  [0, 'k3', 10, 'allow r=0 reset=1000', 'allow r=0'],
];

describe.each(SHARDS)('11 oversize and partial cost, shards: %i', (shards) => {
  describe.each(['token_bucket', 'gcra'])('%s', (algorithm) => {
    it('limit 5 per 5 000 ms: 6 > burst is "never" and the bucket stays full; 3 of 1 left waits for 2 more', async () => {
      const ds = await runTable(main(algorithm, 5, 5000), shards, BUCKET, algorithm);
      // "Never" is told apart from an ordinary denial.
      expect(ds[0].reason).toEqual(expect.any(String));
      expect(ds[2].reason).toBeUndefined();
      expect(ds[5].reason).toBeUndefined();
    });

    it('10 per second, burst 2: the oversize call at 150 changes nothing', async () => {
      await runTable(main(algorithm, 10, 1000, 2), shards, SMALL_BURST, algorithm);
    });
  });

  it.each([
    ['fixed_window', 3],
    ['sliding_window', 4],
  ] as const)('%s, limit 10 per 1 000 ms: the check includes its own cost; cost = limit fits a fresh key', async (algorithm, col) => {
    const ds = await runTable(
      main(algorithm, 10, 1000),
      shards,
      WEIGHTED.map((r) => ({ t: r[0], key: r[1], cost: r[2], expect: r[col] })),
      algorithm,
    );
    expect(ds.map((d) => d.reason !== undefined)).toStrictEqual([false, false, false, true, false, true, false]);
  });

  // Also check: stored state never goes negative — after a run of oversize and too-large checks the key
  // holds exactly what it held before (peeks report the same numbers).
  it.each(['token_bucket', 'gcra', 'fixed_window', 'sliding_window'])(
    '%s: 20 oversize and too-large checks between two peeks change nothing',
    async (algorithm) => {
      await withSession(main(algorithm, 10, 1000), shards, async (s) => {
        await s.check(0, { policy: 'main', key: 'k', cost: 7 });
        const before = await s.check(500, { policy: 'main', key: 'k', cost: 0 });
        for (let i = 0; i < 10; i++) {
          expect((await s.check(500, { policy: 'main', key: 'k', cost: 11 + i })).retryAfterMs).toBeNull();
          const tooLarge = await s.check(500, { policy: 'main', key: 'k', cost: 10 });
          expect(tooLarge.allowed).toBe(false);
          expect(tooLarge.retryAfterMs).toBeGreaterThanOrEqual(1);
        }
        expect(await s.check(500, { policy: 'main', key: 'k', cost: 0 })).toStrictEqual(before);
      });
    },
  );
});
