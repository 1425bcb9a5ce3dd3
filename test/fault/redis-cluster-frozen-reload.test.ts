/**
 * A Redis Cluster with one master frozen (SIGSTOP) while another loses the library (FUNCTION FLUSH), twice: the
 * flushed master's checks are still decided by Redis (src/store/cluster-calls.ts). A call that found no library
 * has it loaded on its own master and is resent once that load is answered. The library used to be loaded on
 * every master and each resend waited for all of those loads, the frozen master's included (no answer before
 * ioredis's 60 s command timeout); behind the flushed master's gate (src/store/call-gate.ts) every new call to it
 * waited too, and all its checks took their failure rule. Waiting for the own master's load only, with the load
 * still sent to every master (a730fc7, reverted), passed the first flush but not the second: the load hung on
 * the frozen master was taken for the new one, so no load followed the second flush and every resend failed.
 */
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite, keysByMaster, masterPid } from '../helpers/redis-cluster.js';

// a bucket that refills one token in 86 s: a check of cost 0 answers exactly what the set-up left
const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: FUNCTION FLUSH on a master while another is frozen', () => {
  let frozen = 0;
  const suite = clusterSuite(() => {
    if (frozen > 0) process.kill(frozen, 'SIGCONT');
  });

  it('the flushed master\'s checks are decided by Redis, after each of two flushes', async () => {
    const prefix = 'frl:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 1000 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const pid = await masterPid(c, 0);
    process.kill(pid, 'SIGSTOP');
    frozen = pid;
    try {
      for (let flush = 0; flush < 2; flush++) {
        await c.clients[1].call('FUNCTION', 'FLUSH');
        const got: string[] = [];
        for (let i = 0; i < 6; i++) got.push(brief(await l.check({ policy: 'api', key: byNode[1][i % byNode[1].length], cost: 0 })));
        expect(got, `after flush ${flush + 1}`).toEqual(new Array<string>(6).fill('allow r=999'));
      }
    } finally {
      process.kill(pid, 'SIGCONT');
      frozen = 0;
    }
  }, 60_000);
});
