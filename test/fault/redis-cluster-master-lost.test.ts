/**
 * A Redis Cluster with one master frozen (SIGSTOP), then killed: each master has its own circuit breaker
 * (src/store/cluster-calls.ts), so the lost master's checks take their failure rule (within the deadline, then
 * at once once its breaker opens) while the other masters' checks keep being decided by Redis, exactly. One
 * breaker for the whole Cluster opened on the lost master's timeouts and failed every master's checks with it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { connected } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: one master lost', () => {
  let c: TestCluster;
  let frozen = 0;
  const limiters: Limiter[] = [];
  beforeAll(async () => {
    c = await startCluster();
  });
  afterAll(async () => {
    if (frozen > 0) process.kill(frozen, 'SIGCONT');
    await Promise.all(limiters.map((l) => l.close()));
    await c?.stop();
  });

  it('fails only its own slots\' checks: the other masters\' are decided by Redis, frozen or killed', async () => {
    const prefix = 'lost:';
    const l = await createLimiter({ policies, redis: { cluster: c.nodes, prefix, timeoutMs: 200 } });
    limiters.push(l);
    await connected(l);
    for (let i = 0; i < 30; i++) await l.check({ policy: 'api', key: `k${i}`, cost: 1 });
    const byNode: string[][] = [[], [], []];
    for (const { key, node } of await c.keysUnder(prefix)) {
      const m = /:(k\d+)\}/.exec(key);
      if (m) byNode[node].push(m[1]);
    }
    expect(byNode.map((ks) => ks.length > 1)).toStrictEqual([true, true, true]);
    const pid = Number(/process_id:(\d+)/.exec(await c.clients[0].info('server'))?.[1]);
    expect(pid).toBeGreaterThan(1);
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
