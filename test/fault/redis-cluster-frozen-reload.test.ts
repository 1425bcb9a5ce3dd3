/**
 * A Redis Cluster with one master frozen (SIGSTOP) while another loses the library (FUNCTION FLUSH): the
 * healthy master's checks are still decided by Redis (src/store/cluster-calls.ts). Its calls that found no
 * library are resent once the library is loaded on their own master; they used to wait for the load on every
 * master, the frozen one's included (no answer before ioredis's 60 s command timeout), and since the gate of
 * b92b85c/5bacffb every new call to the healthy master waited behind them: all its checks timed out.
 */
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite, keysByMaster, masterPid } from '../helpers/redis-cluster.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: FUNCTION FLUSH on a master while another is frozen', () => {
  let frozen = 0;
  const suite = clusterSuite(() => {
    if (frozen > 0) process.kill(frozen, 'SIGCONT');
  });

  it('the flushed master\'s checks are decided by Redis, not held behind the frozen master\'s load', async () => {
    const prefix = 'frl:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 300 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const pid = await masterPid(c, 0);
    await c.clients[1].call('FUNCTION', 'FLUSH');
    process.kill(pid, 'SIGSTOP');
    frozen = pid;
    try {
      const got: string[] = [];
      for (let i = 0; i < 6; i++) got.push(brief(await l.check({ policy: 'api', key: byNode[1][i % byNode[1].length], cost: 0 })));
      for (const d of got) expect(d).toMatch(/^allow r=99[0-9]$/);
    } finally {
      process.kill(pid, 'SIGCONT');
      frozen = 0;
    }
  }, 60_000);
});
