/**
 * A Redis Cluster master restarted without its data while the over-limit cache holds a denial learned from it.
 * The Cluster as a whole stays 'ready' throughout, so only the master's own connection tells (its loss: the
 * store's onConnect, src/store/redis.ts): the denial must go, as after a single Redis's reconnection, and the
 * next check is Redis's (the key is gone there: a full bucket). Before, the cache kept answering the hour's
 * denial, and never sent the key's checks to the new server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { connected } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: the over-limit cache across a master restarted empty', () => {
  let c: TestCluster;
  const limiters: Limiter[] = [];
  beforeAll(async () => {
    c = await startCluster();
  }, 60_000);
  afterAll(async () => {
    await Promise.all(limiters.map((l) => l.close()));
    await c?.stop();
  });

  it('drops the denials learned from it: the next check of the key is decided by the new server', async () => {
    const prefix = 'rst:';
    const l = await createLimiter({ policies, redis: { cluster: c.nodes, prefix, timeoutMs: 1000 } });
    limiters.push(l);
    await connected(l);
    const check = async (): Promise<string> => brief(await l.check({ policy: 'api', key: 'k', cost: 1 }));
    expect(await check()).toBe('allow r=0');
    expect(await check()).toBe('deny r=0');
    // answered by the cache
    expect(await check()).toBe('deny r=0');
    expect((await l.stats()).store!.overLimitAnswers).toBe(1);
    const [{ node }, ...others] = await c.keysUnder(prefix);
    expect(others).toStrictEqual([]);
    await c.kill(node);
    await c.restart(node);
    expect(await c.keysUnder(prefix)).toStrictEqual([]);
    // until the client reaches the restarted master, checks take the failure rule (closed); none is the cache's
    let d = await l.check({ policy: 'api', key: 'k', cost: 1 });
    for (let i = 0; i < 100 && d.degraded === true; i++) {
      await new Promise((r) => setTimeout(r, 100));
      d = await l.check({ policy: 'api', key: 'k', cost: 1 });
    }
    expect(brief(d)).toBe('allow r=0');
    expect((await l.stats()).store!.overLimitAnswers).toBe(1);
    expect((await c.keysUnder(prefix)).map((k) => k.node)).toStrictEqual([node]);
  }, 60_000);
});
