/**
 * A Redis Cluster's check calls (src/store/cluster-calls.ts) when the check library cannot be used:
 *
 * - every master refuses FCALL and FUNCTION (the default user's ACL `-function -fcall`; a Cluster older than
 *   Redis 7 answers "unknown command" alike): the calls go by EVALSHA, so no check is degraded and no error is
 *   counted (before: every check a script error, for good);
 * - the library is flushed on every master and memory is full: the FCALL's "Function not found" is answered by a
 *   FUNCTION LOAD on its master, refused OOM; the check fails with that OOM, counted as unavailable (not as a
 *   script error), and the breaker opens; with memory back, Redis decides again.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { sleep } from '../helpers/clock.js';
import { clusterSuite } from '../helpers/redis-cluster.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];


const policies = {
  p: { algorithm: 'token_bucket', limit: 100, period: 60_000, consistency: 'strict', onStoreError: 'closed' },
} as unknown as Policies;


describe('Redis Cluster: the check library refused or lost', () => {
  const suite = clusterSuite();

  function limiter(prefix: string): Promise<Limiter> {
    return suite.limiter({ policies, maxKeys: 4096, redis: { prefix, timeoutMs: 1000, breaker: { resetMs: 200, maxResetMs: 400 } } });
  }

  it('every master refuses FUNCTION and FCALL: by EVALSHA, no check degraded, no error', async () => {
    const c = suite.cluster();
    await Promise.all(c.clients.map((x) => x.call('ACL', 'SETUSER', 'default', '-function', '-fcall')));
    try {
      const l = await limiter('acl:');
      const got: string[] = [];
      // keys on every master
      for (let i = 0; i < 12; i++) got.push(brief(await l.check({ policy: 'p', key: `k${i % 6}`, cost: 1 })));
      expect(got).toStrictEqual([...Array(6).fill('allow r=99'), ...Array(6).fill('allow r=98')]);
      const s = (await l.stats()).store!;
      expect(s.storeErrors, JSON.stringify(s)).toBe(0);
      expect(s.breaker).toBe('closed');
    } finally {
      await Promise.all(c.clients.map((x) => x.call('ACL', 'SETUSER', 'default', '+@all')));
    }
  }, 30_000);

  it('FUNCTION FLUSH then OOM on every master: the FUNCTION LOAD\'s OOM fails the check, counted as unavailable; the breaker opens', async () => {
    const c = suite.cluster();
    const l = await limiter('oom:');
    expect(brief(await l.check({ policy: 'p', key: 'a', cost: 1 }))).toBe('allow r=99');
    for (const x of c.clients) {
      await x.call('FUNCTION', 'FLUSH');
      await x.config('SET', 'maxmemory', '1');
    }
    try {
      // each master has its own breaker: enough checks that every master meets 5 failures in a row
      const got: string[] = [];
      for (let i = 0; i < 30; i++) got.push(brief(await l.check({ policy: 'p', key: `oom${i}`, cost: 1 })));
      expect(got).toStrictEqual(Array(30).fill('deny r=0 degraded:closed'));
      const s = (await l.stats()).store!;
      expect(s.scriptErrors, JSON.stringify(s)).toBe(0);
      expect(s.unavailable, JSON.stringify(s)).toBeGreaterThanOrEqual(12);
      expect(s.unavailable + s.breakerRejections, JSON.stringify(s)).toBe(30);
      expect(s.breaker).toBe('open');
    } finally {
      for (const x of c.clients) await x.config('SET', 'maxmemory', '0');
    }
    let last = await l.check({ policy: 'p', key: 'a', cost: 1 });
    for (let i = 0; i < 40 && last.degraded === true; i++) {
      await sleep(100);
      last = await l.check({ policy: 'p', key: 'a', cost: 1 });
    }
    expect(brief(last)).toBe('allow r=98');
  }, 30_000);
});
