/**
 * Shared case 01: a fixed window admits twice the limit across a window edge (by design); token_bucket,
 * gcra and sliding_window must not. Limit 10, period 1000 ms, one key, cost 1: ten calls at t = 999, ten at
 * t = 1000, then t = 1001, 1999, 2000 — the 23-row table, each algorithm on its own limiter.
 */
import { describe, expect, it } from 'vitest';
import { SHARDS, main, runTable, type Row } from './table.js';

type Line = [label: string, t: number, n: number, fixed: string, sliding: string, bucket: string];

// `{r}` counts down over a "(× n)" line.
const TABLE: Line[] = [
  ['1', 999, 1, 'allow r=9 reset=1', 'allow r=9', 'allow r=9 reset=100'],
  ['2', 999, 1, 'allow r=8 reset=1', 'allow r=8', 'allow r=8 reset=200'],
  ['3', 999, 1, 'allow r=7 reset=1', 'allow r=7', 'allow r=7 reset=300'],
  ['4', 999, 1, 'allow r=6 reset=1', 'allow r=6', 'allow r=6 reset=400'],
  ['5', 999, 1, 'allow r=5 reset=1', 'allow r=5', 'allow r=5 reset=500'],
  ['6', 999, 1, 'allow r=4 reset=1', 'allow r=4', 'allow r=4 reset=600'],
  ['7', 999, 1, 'allow r=3 reset=1', 'allow r=3', 'allow r=3 reset=700'],
  ['8', 999, 1, 'allow r=2 reset=1', 'allow r=2', 'allow r=2 reset=800'],
  ['9', 999, 1, 'allow r=1 reset=1', 'allow r=1', 'allow r=1 reset=900'],
  ['10', 999, 1, 'allow r=0 reset=1', 'allow r=0', 'allow r=0 reset=1000'],
  ['11–20', 1000, 10, 'allow r={r} reset=1000', 'deny r=0 retry=100', 'deny r=0 retry=99 reset=999'],
  ['21', 1001, 1, 'deny r=0 retry=999 reset=999', 'deny r=0 retry=99', 'deny r=0 retry=98 reset=998'],
  ['22', 1999, 1, 'deny r=0 retry=1 reset=1', 'allow r=8', 'allow r=9 reset=100'],
  ['23', 2000, 1, 'allow r=9 reset=1000', 'allow r=8', 'allow r=8 reset=199'],
];

const COLUMN = { fixed_window: 3, sliding_window: 4, token_bucket: 5, gcra: 5 } as const;

function rows(algorithm: keyof typeof COLUMN): Row[] {
  return TABLE.flatMap((line) => {
    const [label, t, n] = line;
    const text = line[COLUMN[algorithm]] as string;
    return Array.from({ length: n }, (_, i) => ({
      label: n === 1 ? label : `${label} (#${i + 1})`,
      t,
      key: 'k',
      cost: 1,
      expect: text.replace('{r}', String(9 - i)),
    }));
  });
}

/** Most calls admitted in any half-open span [s, s + P), over spans starting at an admission. */
function maxInSpan(times: number[], P: number): number {
  return Math.max(0, ...times.map((s) => times.filter((t) => t >= s && t < s + P).length));
}

describe.each(SHARDS)('01 window-boundary burst, shards: %i', (shards) => {
  // Admitted calls in the worst span of 1000 ms: fixed_window lets 2·L through in 2 ms; the others hold
  // L (sliding window) or B (bucket, which is also within its B + L bound).
  const worstSpan = { fixed_window: 20, sliding_window: 10, token_bucket: 10, gcra: 10 } as const;

  it.each(Object.keys(COLUMN) as Array<keyof typeof COLUMN>)('%s: limit 10 per 1000 ms', async (algorithm) => {
    const table = rows(algorithm);
    expect(table).toHaveLength(23);
    const decisions = await runTable(main(algorithm, 10, 1000), shards, table, algorithm);
    const admitted = table.filter((_, i) => decisions[i].allowed).map((r) => r.t);
    expect(maxInSpan(admitted, 1000)).toBe(worstSpan[algorithm]);
    if (algorithm === 'token_bucket' || algorithm === 'gcra') expect(maxInSpan(admitted, 1000)).toBeLessThanOrEqual(10 + 10);
  });
});
