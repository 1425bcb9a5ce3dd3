/**
 * Shared case 05 (engine part): a steady client is let in again. Limit 3, period 10 000 ms, one call every
 * 3 000 ms from t = 0 to t = 24 000. The fixed window is epoch-aligned (new windows at 10 000 and 20 000,
 * whatever the traffic); the sliding window admits again from 15 000; the bucket never denies. The buggy
 * behaviour, "deny from t = 9 000 on, for ever", fails every column.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable } from './table.js';

const TABLE: Array<[t: number, fixed: string, sliding: string, bucket: string]> = [
  [0, 'allow r=2 reset=10_000', 'allow r=2', 'allow r=2 reset=3334'],
  [3000, 'allow r=1 reset=7000', 'allow r=1', 'allow r=1 reset=3667'],
  [6000, 'allow r=0 reset=4000', 'allow r=0', 'allow r=1 reset=4000'],
  [9000, 'deny r=0 retry=1000 reset=1000', 'deny r=0 retry=4334', 'allow r=1 reset=4334'],
  [12_000, 'allow r=2 reset=8000', 'deny r=0 retry=1334', 'allow r=1 reset=4667'],
  [15_000, 'allow r=1 reset=5000', 'allow r=0', 'allow r=1 reset=5000'],
  [18_000, 'allow r=0 reset=2000', 'allow r=0', 'allow r=1 reset=5334'],
  [21_000, 'allow r=2 reset=9000', 'allow r=0', 'allow r=1 reset=5667'],
  [24_000, 'allow r=1 reset=6000', 'deny r=0 retry=1000', 'allow r=1 reset=6000'],
];

const COLUMNS = [
  ['fixed_window', 1, 8],
  ['sliding_window', 2, 6],
  ['token_bucket', 3, 9],
] as const;

describe.each(SHARDS)('05 steady traffic is let in again, shards: %i', (shards) => {
  it.each(COLUMNS)('%s: limit 3 per 10 000 ms, a call every 3 000 ms', async (algorithm, col, admittedCount) => {
    const ds = await runTable(main(algorithm, 3, 10_000), shards, TABLE.map((r) => ({ t: r[0], expect: r[col] })), algorithm);
    expect(ds.filter((d) => d.allowed)).toHaveLength(admittedCount);
    // Never locked out: something is admitted after the first denial.
    const firstDenial = ds.findIndex((d) => !d.allowed);
    if (firstDenial >= 0) expect(ds.slice(firstDenial).some((d) => d.allowed)).toBe(true);
  });

  // (The fixed window's reset above is the window end minus now, never pushed back by a hit: 7 000 after the
  // call at 3 000, 4 000 after the call at 6 000, not 10 000.) gcra gives the token bucket's numbers.
  it('gcra: the same calls give the token_bucket column', async () => {
    await runTable(main('gcra', 3, 10_000), shards, TABLE.map((r) => ({ t: r[0], expect: r[3] })), 'gcra');
  });
});
