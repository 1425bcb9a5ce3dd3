/**
 * Shared case 08: retry and reset times are rounded UP, and only when there is a remainder. `retryAfterMs`
 * is a promise: the same check exactly that long later is admitted (nothing else happening), 1 ms earlier
 * it is denied. Admitted answers wait 0; denials that can succeed later wait ≥ 1 ms.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable, withSession, type Row } from './table.js';

interface Table {
  name: string;
  algorithms: readonly string[];
  limit: number;
  period: number;
  burst?: number;
  rows: Array<[t: number, expect: string]>;
}

const BUCKETS = ['token_bucket', 'gcra'] as const;

const TABLES: Table[] = [
  {
    name: 'one token per 1 500 ms, burst 1',
    algorithms: BUCKETS,
    limit: 1,
    period: 1500,
    rows: [
      [0, 'allow r=0 reset=1500'],
      [100, 'deny r=0 retry=1400 reset=1400'],
      [1100, 'deny r=0 retry=400 reset=400'],
      [1500, 'allow r=0 reset=1500'],
    ],
  },
  {
    name: 'exact whole values stay exact: one token per 2 000 ms',
    algorithms: BUCKETS,
    limit: 1,
    period: 2000,
    rows: [
      [0, 'allow r=0 reset=2000'],
      [0, 'deny r=0 retry=2000 reset=2000'],
    ],
  },
  {
    name: '30 per minute, burst 16: the first call reports 15 left and a reset of exactly 2 000 ms',
    algorithms: BUCKETS,
    limit: 30,
    period: 60_000,
    burst: 16,
    rows: [
      [0, 'allow r=15 reset=2000'],
      [0, 'allow r=14 reset=4000'],
    ],
  },
  {
    name: '6 per minute: nothing before t = 10 000 after the burst, the wait counting down exactly',
    algorithms: BUCKETS,
    limit: 6,
    period: 60_000,
    rows: [
      [0, 'allow r=5 reset=10_000'],
      [0, 'allow r=4 reset=20_000'],
      [0, 'allow r=3 reset=30_000'],
      [0, 'allow r=2 reset=40_000'],
      [0, 'allow r=1 reset=50_000'],
      [0, 'allow r=0 reset=60_000'],
      [0, 'deny r=0 retry=10_000 reset=60_000'],
      [4000, 'deny r=0 retry=6000 reset=56_000'],
      [9999, 'deny r=0 retry=1 reset=50_001'],
      [10_000, 'allow r=0 reset=60_000'],
    ],
  },
  {
    name: '3 per second (a token every 333⅓ ms): an exact wait of ⅓ ms is reported as 1, never 0',
    algorithms: BUCKETS,
    limit: 3,
    period: 1000,
    rows: [
      [0, 'allow r=2 reset=334'],
      [0, 'allow r=1 reset=667'],
      [0, 'allow r=0 reset=1000'],
      [0, 'deny r=0 retry=334 reset=1000'],
      [333, 'deny r=0 retry=1 reset=667'],
      [334, 'allow r=0 reset=1000'],
    ],
  },
  {
    name: 'sliding window, 3 per second: estimate 2.001 at 1 333 (denied), 1.998 at 1 334 (admitted)',
    algorithms: ['sliding_window'],
    limit: 3,
    period: 1000,
    rows: [
      [0, 'allow r=2'],
      [0, 'allow r=1'],
      [0, 'allow r=0'],
      [0, 'deny r=0 retry=1334'],
      [1000, 'deny r=0 retry=334'],
      [1333, 'deny r=0 retry=1'],
      [1334, 'allow r=0'],
    ],
  },
  {
    name: "the fixed window's last millisecond",
    algorithms: ['fixed_window'],
    limit: 1,
    period: 1000,
    rows: [
      [0, 'allow r=0 reset=1000'],
      [999, 'deny r=0 retry=1 reset=1'],
      [1000, 'allow r=0 reset=1000'],
    ],
  },
];

const CASES = TABLES.flatMap((table) => table.algorithms.map((algorithm) => [`${table.name} — ${algorithm}`, table, algorithm] as const));

describe.each(SHARDS)('08 wait rounding, shards: %i', (shards) => {
  it.each(CASES)('%s', async (_name, table, algorithm) => {
    const rows: Row[] = table.rows.map(([t, expect]) => ({ t, key: 'k', cost: 1, expect }));
    await runTable(main(algorithm, table.limit, table.period, table.burst), shards, rows, algorithm);
  });

  // The promise behind each denial of the tables: replay the rows up to the denial on a key of its own, then
  // the same check 1 ms before the promised time (denied, which changes nothing) and exactly at it (admitted).
  it.each(CASES)('%s: every denial keeps its retry promise', async (_name, table, algorithm) => {
    await withSession(main(algorithm, table.limit, table.period, table.burst), shards, async (s) => {
      let probes = 0;
      for (const [i, [t, text]] of table.rows.entries()) {
        if (!text.startsWith('deny')) continue;
        const key = `promise-${i}`;
        for (const [u] of table.rows.slice(0, i)) await s.check(u, { policy: 'main', key, cost: 1 });
        const d = await s.check(t, { policy: 'main', key, cost: 1 });
        expect(d.allowed).toBe(false);
        const retry = d.retryAfterMs as number;
        expect(retry).toBeGreaterThanOrEqual(1);
        expect((await s.check(t + retry - 1, { policy: 'main', key, cost: 1 })).allowed, `row ${i + 1}: at t + ${retry - 1}`).toBe(false);
        expect((await s.check(t + retry, { policy: 'main', key, cost: 1 })).allowed, `row ${i + 1}: at t + ${retry}`).toBe(true);
        probes++;
      }
      expect(probes).toBe(table.rows.filter(([, text]) => text.startsWith('deny')).length);
    });
  });
});
