/**
 * Shared case 13: zero, huge, fractional and malformed parameters. Limit 0 is a valid policy that denies
 * every cost for good; the exact arithmetic stays exact at the ends of the allowed ranges (or the policy is
 * refused at load, naming the field); invalid checks are errors that name the field and change nothing;
 * invalid policies fail createLimiter naming the policy and the field; duration strings parse exactly.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { MAX, NONE, SHARDS, main, runTable, type Policies, type Row } from './table.js';

const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const;

/** "Sluice may either pass the rows exactly, or refuse the policy at load with an error naming `field`." */
async function rowsOrConfigError(policies: Policies, shards: number, rows: Row[], field: string, where: string): Promise<void> {
  let refused: unknown;
  try {
    const probe = await createLimiter({ policies, shards, clock: () => 0 });
    await probe.close();
  } catch (e) {
    refused = e;
  }
  if (refused !== undefined) {
    expect(refused, where).toBeInstanceOf(Error);
    expect((refused as Error).message.toLowerCase(), `${where}: the load error must name ${field}`).toContain(field);
    return;
  }
  await runTable(policies, shards, rows, where);
}

describe.each(SHARDS)('13 degenerate parameters, shards: %i', (shards) => {
  it.each(ALGORITHMS)('limit 0 denies everything, for good: %s', async (algorithm) => {
    const ds = await runTable(main(algorithm, 0, 1000), shards, [
      { t: 0, cost: 1, expect: 'deny r=0 retry=null' },
      { t: 1_000_000_000, cost: 1, expect: 'deny r=0 retry=null' },
      { t: 1_000_000_000, cost: 5, expect: 'deny r=0 retry=null' },
    ], algorithm);
    for (const d of ds) expect(d.reason).toEqual(expect.any(String));
  });

  describe.each(['token_bucket', 'gcra'])('%s at the edge of exactness', (algorithm) => {
    it('a period near 2^53 ms: one token per 2^53 − 1 ms', async () => {
      await rowsOrConfigError(main(algorithm, 1, MAX), shards, [
        { t: 0, cost: 1, expect: `allow r=0 reset=${MAX}` },
        { t: 1, cost: 1, expect: 'deny r=0 retry=9_007_199_254_740_990 reset=9_007_199_254_740_990' },
        { t: 1000, cost: 1, expect: 'deny r=0 retry=9_007_199_254_739_991 reset=9_007_199_254_739_991' },
      ], 'period', algorithm);
    });

    it('a limit near 2^53 per second (burst = limit), idle for 10^12 ms', async () => {
      await rowsOrConfigError(main(algorithm, MAX, 1000), shards, [
        { t: 0, cost: MAX, expect: 'allow r=0 reset=1000' },
        { t: 1, cost: 0, expect: 'allow r=9_007_199_254_740 reset=999' },
        { t: 1000, cost: 0, expect: `allow r=${MAX} reset=0` },
        { t: 1000, cost: MAX, expect: 'allow r=0 reset=1000' },
        { t: 1001, cost: MAX, expect: 'deny r=9_007_199_254_740 retry=999 reset=999' },
        { t: 1_000_000_000_000, cost: 0, expect: `allow r=${MAX} reset=0` },
        { t: 1_000_000_000_000, cost: 1, expect: 'allow r=9_007_199_254_740_990 reset=1' },
      ], 'limit', algorithm);
    });
  });

  it('fixed_window, limit 2^53 − 1 per second', async () => {
    await rowsOrConfigError(main('fixed_window', MAX, 1000), shards, [
      { t: 0, cost: MAX, expect: 'allow r=0 reset=1000' },
      { t: 1, cost: 1, expect: 'deny r=0 retry=999 reset=999' },
      { t: 1000, cost: 1, expect: 'allow r=9_007_199_254_740_990 reset=1000' },
    ], 'limit', 'fixed_window');
  });

  it('sliding_window, limit 2^53 − 1 per second: an estimate of (2^53 − 1)/2, exactly', async () => {
    await rowsOrConfigError(main('sliding_window', MAX, 1000), shards, [
      { t: 0, cost: MAX, expect: 'allow r=0' },
      { t: 1500, cost: 1, expect: 'allow r=4_503_599_627_370_494' },
      { t: 1500, cost: MAX, expect: 'deny r=4_503_599_627_370_494 retry=1500' },
      { t: 2999, cost: 0, expect: 'allow r=9_007_199_254_740_990' },
      { t: 3000, cost: 0, expect: `allow r=${MAX}` },
    ], 'limit', 'sliding_window');
  });

  describe('invalid checks are errors naming the field, and change nothing (limit 5 per 1 000 ms)', () => {
    type Line = [policy: string, key: unknown, cost: unknown, fixed: string, sliding: string, bucket: string];
    const E = (field: string) => `error (${field})`;
    const TABLE: Line[] = [
      ['main', 'k', 0, 'allow r=5 reset=1000', 'allow r=5', 'allow r=5 reset=0'],
      ['main', 'k', -1, E('cost'), E('cost'), E('cost')],
      ['main', 'k', 1.5, E('cost'), E('cost'), E('cost')],
      ['main', 'k', Number.NaN, E('cost'), E('cost'), E('cost')],
      ['main', 'k', Number.POSITIVE_INFINITY, E('cost'), E('cost'), E('cost')],
      ['main', 'k', Number.NEGATIVE_INFINITY, E('cost'), E('cost'), E('cost')],
      ['main', 'k', 2 ** 53, E('cost'), E('cost'), E('cost')],
      ['main', 'k', '1', E('cost'), E('cost'), E('cost')],
      ['main', 'k', null, E('cost'), E('cost'), E('cost')],
      ['main', 'k', true, E('cost'), E('cost'), E('cost')],
      ['main', 'k', NONE, E('cost'), E('cost'), E('cost')],
      ['main', 'k', 1, 'allow r=4 reset=1000', 'allow r=4', 'allow r=4 reset=200'],
      ['main', 'k', 6, 'deny r=4 retry=null reset=1000', 'deny r=4 retry=null', 'deny r=4 retry=null reset=200'],
      ['main', 'k', MAX, 'deny r=4 retry=null reset=1000', 'deny r=4 retry=null', 'deny r=4 retry=null reset=200'],
      ['main', '', 1, E('key'), E('key'), E('key')],
      ['main', NONE, 1, E('key'), E('key'), E('key')],
      ['main', 42, 1, E('key'), E('key'), E('key')],
      ['nope', 'k', 1, E('policy'), E('policy'), E('policy')],
      ['main', 'k', 0, 'allow r=4 reset=1000', 'allow r=4', 'allow r=4 reset=200'],
    ];
    const COLUMN = { fixed_window: 3, sliding_window: 4, token_bucket: 5, gcra: 5 } as const;

    it.each(ALGORITHMS)('%s', async (algorithm) => {
      expect(TABLE).toHaveLength(19);
      const rows = TABLE.map((l): Row => ({ t: 0, policy: l[0], key: l[1], cost: l[2], expect: l[COLUMN[algorithm]] }));
      await runTable(main(algorithm, 5, 1000), shards, rows, algorithm);
    });
  });

  describe('invalid policies fail createLimiter, naming the policy and the field', () => {
    const base = { algorithm: 'token_bucket', limit: 10, period: 1000 };
    const without = (field: string) => Object.fromEntries(Object.entries(base).filter(([k]) => k !== field));
    const BAD: Array<[name: string, policy: Record<string, unknown>, field: string]> = [
      ['period-zero', { ...base, period: 0 }, 'period'],
      ['period-negative', { ...base, period: -1000 }, 'period'],
      ['period-fraction', { ...base, period: 1.5 }, 'period'],
      ['period-nan', { ...base, period: Number.NaN }, 'period'],
      ['period-word', { ...base, period: 'abc' }, 'period'],
      ['period-unit', { ...base, period: '10x' }, 'period'],
      ['period-empty', { ...base, period: '' }, 'period'],
      ['period-zero-string', { ...base, period: '0s' }, 'period'],
      ['period-missing', without('period'), 'period'],
      ['limit-negative', { ...base, limit: -1 }, 'limit'],
      ['limit-fraction', { ...base, limit: 2.5 }, 'limit'],
      ['limit-nan', { ...base, limit: Number.NaN }, 'limit'],
      ['limit-infinite', { ...base, limit: Number.POSITIVE_INFINITY }, 'limit'],
      ['limit-unsafe', { ...base, limit: 2 ** 53 }, 'limit'],
      ['limit-string', { ...base, limit: '10' }, 'limit'],
      ['limit-missing', without('limit'), 'limit'],
      ['burst-negative', { ...base, burst: -1 }, 'burst'],
      ['burst-fraction', { ...base, burst: 2.5 }, 'burst'],
      ['algorithm-unknown', { ...base, algorithm: 'leaky_queue' }, 'algorithm'],
      ['algorithm-missing', without('algorithm'), 'algorithm'],
    ];

    it.each(BAD)('%s', async (_name, policy, field) => {
      const attempt = createLimiter({ policies: { tenantA: policy } as unknown as Policies, shards, clock: () => 0 });
      const err = await attempt.then(
        async (l) => {
          await l.close();
          return undefined;
        },
        (e: unknown) => e,
      );
      expect(err, 'createLimiter must reject').toBeInstanceOf(Error);
      const message = (err as Error).message;
      expect(message).toContain('tenantA');
      expect(message.toLowerCase()).toContain(field);
    });
  });

  it('duration strings parse to the documented number of ms', async () => {
    const policies = {
      ms500: { algorithm: 'token_bucket', limit: 1, period: '500ms' },
      s1: { algorithm: 'token_bucket', limit: 1, period: '1s' },
      m1: { algorithm: 'token_bucket', limit: 1, period: '1m' },
      h1: { algorithm: 'token_bucket', limit: 1, period: '1h' },
      d1: { algorithm: 'token_bucket', limit: 1, period: '1d' },
      fw1m: { algorithm: 'fixed_window', limit: 1, period: '1m' },
    } as Policies;
    const TABLE: Array<[policy: string, expect: string]> = [
      ['ms500', 'allow r=0 reset=500'],
      ['ms500', 'deny r=0 retry=500 reset=500'],
      ['s1', 'allow r=0 reset=1000'],
      ['s1', 'deny r=0 retry=1000 reset=1000'],
      ['m1', 'allow r=0 reset=60_000'],
      ['m1', 'deny r=0 retry=60_000 reset=60_000'],
      ['h1', 'allow r=0 reset=3_600_000'],
      ['h1', 'deny r=0 retry=3_600_000 reset=3_600_000'],
      ['d1', 'allow r=0 reset=86_400_000'],
      ['d1', 'deny r=0 retry=86_400_000 reset=86_400_000'],
      ['fw1m', 'allow r=0 reset=60_000'],
      ['fw1m', 'deny r=0 retry=60_000 reset=60_000'],
    ];
    await runTable(policies, shards, TABLE.map(([policy, expect]) => ({ t: 0, policy, key: 'k', cost: 1, expect })), 'durations');
  });
});
