/**
 * Shared case 10: time a bucket spends full earns nothing. After a drain, tokens come back only at the
 * configured rate, however long the bucket sat full before (here, created by a peek at t = 0).
 */
import { describe, it } from 'vitest';
import { SHARDS, main, runTable, type Row } from './table.js';

const rows = (table: Array<[t: number, cost: number, expect: string]>): Row[] =>
  table.map(([t, cost, expect]) => ({ t, cost, expect }));

/** 1 per minute, burst 5: full from 0 to 59 000, drained at 59 000; the next token is due at 119 000, not 60 000. */
const SLOW = rows([
  [0, 0, 'allow r=5 reset=0'],
  [59_000, 5, 'allow r=0 reset=300_000'],
  [60_000, 1, 'deny r=0 retry=59_000 reset=299_000'],
  [118_999, 1, 'deny r=0 retry=1 reset=240_001'],
  [119_000, 1, 'allow r=0 reset=300_000'],
]);

/** 20 per second, burst 100: full until 5 000, drained, then 0.02 token per ms (10 by 5 500, 20 by 6 000). */
const DRAIN = rows([
  [0, 0, 'allow r=100 reset=0'],
  [5000, 100, 'allow r=0 reset=5000'],
  [5000, 0, 'allow r=0 reset=5000'],
  [5500, 0, 'allow r=10 reset=4500'],
  [5999, 0, 'allow r=19 reset=4001'],
  [6000, 0, 'allow r=20 reset=4000'],
]);

describe.each(SHARDS)('10 idle time while full is not credited, shards: %i', (shards) => {
  describe.each(['token_bucket', 'gcra'])('%s', (algorithm) => {
    it('slow: 1 per minute, burst 5, drained after 59 s full', async () => {
      await runTable(main(algorithm, 1, 60_000, 5), shards, SLOW, algorithm);
    });

    it('drain: 20 per second, burst 100, drained after 5 s full; peeks report the floor of the tokens', async () => {
      await runTable(main(algorithm, 20, 1000, 100), shards, DRAIN, algorithm);
    });

    // The key first seen long after the limiter was built starts full and earns nothing for the time before:
    // the reference time is the key's first use, not the limiter's creation.
    it('a key first used at t = 10^12 starts full; draining it leaves nothing to spare', async () => {
      const T = 1_000_000_000_000;
      await runTable(main(algorithm, 20, 1000, 100), shards, rows([
        [T, 100, 'allow r=0 reset=5000'],
        [T, 1, 'deny r=0 retry=50 reset=5000'],
        [T + 50, 1, 'allow r=0 reset=5000'],
      ]), algorithm);
    });
  });
});
