/**
 * Shared case 12: a denied check changes nothing, so a client retrying once per second against 5 per 10 s
 * gets a steady trickle through instead of a permanent lockout. Limit 5, period 10 000 ms, one call per
 * second from t = 0 to t = 30 000 (31 calls).
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable, withSession } from './table.js';

const TABLE: Array<[t: number, fixed: string, sliding: string, bucket: string]> = [
  [0, 'allow r=4 reset=10_000', 'allow r=4', 'allow r=4 reset=2000'],
  [1000, 'allow r=3 reset=9000', 'allow r=3', 'allow r=3 reset=3000'],
  [2000, 'allow r=2 reset=8000', 'allow r=2', 'allow r=3 reset=4000'],
  [3000, 'allow r=1 reset=7000', 'allow r=1', 'allow r=2 reset=5000'],
  [4000, 'allow r=0 reset=6000', 'allow r=0', 'allow r=2 reset=6000'],
  [5000, 'deny r=0 retry=5000 reset=5000', 'deny r=0 retry=7000', 'allow r=1 reset=7000'],
  [6000, 'deny r=0 retry=4000 reset=4000', 'deny r=0 retry=6000', 'allow r=1 reset=8000'],
  [7000, 'deny r=0 retry=3000 reset=3000', 'deny r=0 retry=5000', 'allow r=0 reset=9000'],
  [8000, 'deny r=0 retry=2000 reset=2000', 'deny r=0 retry=4000', 'allow r=0 reset=10_000'],
  [9000, 'deny r=0 retry=1000 reset=1000', 'deny r=0 retry=3000', 'deny r=0 retry=1000 reset=9000'],
  [10_000, 'allow r=4 reset=10_000', 'deny r=0 retry=2000', 'allow r=0 reset=10_000'],
  [11_000, 'allow r=3 reset=9000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [12_000, 'allow r=2 reset=8000', 'allow r=0', 'allow r=0 reset=10_000'],
  [13_000, 'allow r=1 reset=7000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [14_000, 'allow r=0 reset=6000', 'allow r=0', 'allow r=0 reset=10_000'],
  [15_000, 'deny r=0 retry=5000 reset=5000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [16_000, 'deny r=0 retry=4000 reset=4000', 'allow r=0', 'allow r=0 reset=10_000'],
  [17_000, 'deny r=0 retry=3000 reset=3000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [18_000, 'deny r=0 retry=2000 reset=2000', 'allow r=0', 'allow r=0 reset=10_000'],
  [19_000, 'deny r=0 retry=1000 reset=1000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [20_000, 'allow r=4 reset=10_000', 'allow r=0', 'allow r=0 reset=10_000'],
  [21_000, 'allow r=3 reset=9000', 'deny r=0 retry=1500', 'deny r=0 retry=1000 reset=9000'],
  [22_000, 'allow r=2 reset=8000', 'deny r=0 retry=500', 'allow r=0 reset=10_000'],
  [23_000, 'allow r=1 reset=7000', 'allow r=0', 'deny r=0 retry=1000 reset=9000'],
  [24_000, 'allow r=0 reset=6000', 'deny r=0 retry=1000', 'allow r=0 reset=10_000'],
  [25_000, 'deny r=0 retry=5000 reset=5000', 'allow r=0', 'deny r=0 retry=1000 reset=9000'],
  [26_000, 'deny r=0 retry=4000 reset=4000', 'deny r=0 retry=1500', 'allow r=0 reset=10_000'],
  [27_000, 'deny r=0 retry=3000 reset=3000', 'deny r=0 retry=500', 'deny r=0 retry=1000 reset=9000'],
  [28_000, 'deny r=0 retry=2000 reset=2000', 'allow r=0', 'allow r=0 reset=10_000'],
  [29_000, 'deny r=0 retry=1000 reset=1000', 'deny r=0 retry=1000', 'deny r=0 retry=1000 reset=9000'],
  [30_000, 'allow r=4 reset=10_000', 'allow r=0', 'allow r=0 reset=10_000'],
];

/** Column and the admitted count (of 31) the case states. */
const COLUMNS = [
  ['fixed_window', 1, 16],
  ['sliding_window', 2, 14],
  ['token_bucket', 3, 20],
  ['gcra', 3, 20],
] as const;

describe.each(SHARDS)('12 denied checks consume nothing, shards: %i', (shards) => {
  it.each(COLUMNS)('%s: a call per second against 5 per 10 s', async (algorithm, col, admitted) => {
    expect(TABLE).toHaveLength(31);
    const ds = await runTable(main(algorithm, 5, 10_000), shards, TABLE.map((r) => ({ t: r[0], expect: r[col] })), algorithm);
    expect(ds.filter((d) => d.allowed)).toHaveLength(admitted);
  });

  // Also check (metamorphic): drop every denied call and replay the rest on a fresh limiter — every remaining
  // call gets exactly the same decision. (Random sequences: test/property/invariants.test.ts.)
  it.each(COLUMNS)('%s: the admitted calls alone get the same answers', async (algorithm) => {
    const all = await withSession(main(algorithm, 5, 10_000), shards, async (s) => {
      const out = [];
      for (const [t] of TABLE) out.push({ t, d: await s.check(t, { policy: 'main', key: 'k', cost: 1 }) });
      return out;
    });
    const kept = all.filter((x) => x.d.allowed);
    await withSession(main(algorithm, 5, 10_000), shards, async (s) => {
      for (const x of kept) expect(await s.check(x.t, { policy: 'main', key: 'k', cost: 1 }), `t=${x.t}`).toStrictEqual(x.d);
    });
  });
});
