/**
 * On a Redis Cluster, a key's checks reach its master in the order they were made across FUNCTION FLUSHes of
 * every master (src/store/cluster-calls.ts, one lane per hash slot): calls written before a flush find no library
 * and are resent once it is loaded again, and a call made while one of them is still to be read waits for its
 * resend. One key of a bucket that does not refill, checks of cost 1 in turns of 20, three flushes each while
 * calls are in flight: every check is admitted, and the remaining each answer gives falls by exactly 1 in the
 * order the checks were made. Before the lanes, 6 of 6 runs had a later call's 20 checks decided ahead of an
 * earlier call's.
 */
import { describe, expect, it } from 'vitest';
import type { Decision } from '../../src/index.js';
import { clusterSuite } from '../helpers/redis-cluster.js';

const BURST = 100_000;
const policies = { p: { algorithm: 'token_bucket', limit: 1, period: '1d', burst: BURST, consistency: 'strict', onStoreError: 'closed' } } as const;
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('Redis Cluster: checks of one key across FUNCTION FLUSH of every master', () => {
  const suite = clusterSuite();
  it('are decided in the order made: remaining falls by 1 from each check to the next', async () => {
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix: `cfo${Date.now()}:`, timeoutMs: 5_000 } });
    try {
      // the library loaded on every master first (a Cluster loads it at the first "Function not found")
      for (let i = 0; i < 3; i++) await l.check({ policy: 'p', key: 'warm', cost: 1 });
      const all: Array<Promise<Decision>> = [];
      // each flush in its own phase, whose checks are all answered before the next (a flush that lands between a
      // reload and its resends fails them, by design: one resend)
      for (let phase = 0; phase < 3; phase++) {
        for (let turn = 0; turn < 40; turn++) {
          for (let i = 0; i < 20; i++) all.push(l.check({ policy: 'p', key: 'k', cost: 1 }));
          if (turn === 10) for (const x of c.clients) void x.call('FUNCTION', 'FLUSH');
          await nextTurn();
        }
        await Promise.all(all);
      }
      const ds = await Promise.all(all);
      expect(ds.filter((d) => !d.allowed || d.degraded === true).slice(0, 3)).toEqual([]);
      const out = ds.map((d, i) => [i, d.remaining - (BURST - 1 - i)]).filter(([, x]) => x !== 0).slice(0, 5);
      expect(out).toEqual([]);
    } finally {
      await l.close();
    }
  }, 60_000);
});
