/**
 * A key's checks reach Redis in the order they were made across FUNCTION FLUSHes (src/store/check-call.ts):
 * calls written before a flush find no library and are resent behind a new FUNCTION LOAD, and a call made
 * while one of them is still to be read waits for its resend. One instance, one key of a bucket that does not
 * refill, checks of cost 1 in turns of 20 with the library flushed by another client between turns: every
 * check is admitted, and the remaining each answer gives falls by exactly 1 in the order the checks were made
 * (a later check decided first would give an earlier one a lower remaining).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision } from '../../src/index.js';
import { startRedis, connected, type TestRedis } from '../helpers/redis.js';

const BURST = 100_000;
const policies = { p: { algorithm: 'token_bucket', limit: 1, period: '1d', burst: BURST, consistency: 'strict', onStoreError: 'closed' } } as const;
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('checks of one key across FUNCTION FLUSH', () => {
  let r: TestRedis;
  beforeAll(async () => {
    r = await startRedis();
  });
  afterAll(async () => {
    await r.client.quit().catch(() => undefined);
    await r.stop();
  });

  it('are decided in the order made: remaining falls by 1 from each check to the next', async () => {
    const l = await createLimiter({ policies, redis: { url: r.url, prefix: 'fo:', timeoutMs: 5_000 } });
    try {
      await connected(l);
      const all: Array<Promise<Decision>> = [];
      // three flushes, each while calls are in flight, each in its own phase (a phase's checks all answered
      // before the next flush: a flush that lands between a reload and its resends fails them, by design)
      for (let phase = 0; phase < 3; phase++) {
        for (let turn = 0; turn < 40; turn++) {
          for (let i = 0; i < 20; i++) all.push(l.check({ policy: 'p', key: 'k', cost: 1 }));
          if (turn === 10) void r.client.call('FUNCTION', 'FLUSH');
          await nextTurn();
        }
        await Promise.all(all);
      }
      const ds = await Promise.all(all);
      expect(ds.filter((d) => !d.allowed || d.degraded === true).slice(0, 3)).toEqual([]);
      const out = ds.map((d, i) => d.remaining - (BURST - 1 - i)).filter((x) => x !== 0);
      expect(out).toEqual([]);
    } finally {
      await l.close();
    }
  }, 60_000);
});
