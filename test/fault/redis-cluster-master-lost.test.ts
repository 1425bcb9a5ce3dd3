/**
 * A Redis Cluster with one master frozen (SIGSTOP), then killed: each master has its own circuit breaker
 * (src/store/cluster-calls.ts), so the lost master's checks take their failure rule (within the deadline, then
 * at once once its breaker opens) while the other masters' checks keep being decided by Redis, exactly. One
 * breaker for the whole Cluster opened on the lost master's timeouts and failed every master's checks with it.
 */
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite, keysByMaster, masterPid } from '../helpers/redis-cluster.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: one master lost', () => {
  let frozen = 0;
  const suite = clusterSuite(() => {
    if (frozen > 0) process.kill(frozen, 'SIGCONT');
  });

  it('fails only its own slots\' checks: the other masters\' are decided by Redis, frozen or killed', async () => {
    const prefix = 'lost:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 200 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const pid = await masterPid(c, 0);
    process.kill(pid, 'SIGSTOP');
    frozen = pid;
    const healthy = async (): Promise<string[]> => {
      const got: string[] = [];
      for (let i = 0; i < 4; i++) got.push(brief(await l.check({ policy: 'api', key: byNode[1 + (i % 2)][i % byNode[1 + (i % 2)].length], cost: 0 })));
      return got;
    };
    try {
      // 8 checks on the frozen master's keys: its breaker opens at the 5th failure in a row
      for (let i = 0; i < 8; i++) expect(brief(await l.check({ policy: 'api', key: byNode[0][i % byNode[0].length], cost: 1 }))).toBe('deny r=0 degraded:closed');
      // the other masters' checks (peeks) are decided by Redis
      for (const d of await healthy()) expect(d).toMatch(/^allow r=99[0-9]$/);
      expect((await l.stats()).store!.breaker).toBe('halfOpen');
    } finally {
      process.kill(pid, 'SIGCONT');
      frozen = 0;
    }
    await c.kill(1);
    for (let i = 0; i < 8; i++) expect((await l.check({ policy: 'api', key: byNode[1][i % byNode[1].length], cost: 1 })).degraded).toBe(true);
    for (const key of byNode[2].slice(0, 3)) expect(brief(await l.check({ policy: 'api', key, cost: 0 }))).toMatch(/^allow r=99[0-9]$/);
  }, 60_000);
});
