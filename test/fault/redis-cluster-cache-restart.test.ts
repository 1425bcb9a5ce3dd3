/**
 * A Redis Cluster master restarted without its data while the over-limit cache holds a denial learned from it.
 * The Cluster as a whole stays 'ready' throughout, so only the master's own connection tells (its loss: the
 * store's onConnect, src/store/redis.ts): the denial must go, as after a single Redis's reconnection, and the
 * next check is Redis's (the key is gone there: a full bucket). Before, the cache kept answering the hour's
 * denial, and never sent the key's checks to the new server.
 */
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite } from '../helpers/redis-cluster.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: the over-limit cache across a master restarted empty', () => {
  const suite = clusterSuite();

  it('drops the denials learned from it: the next check of the key is decided by the new server', async () => {
    const prefix = 'rst:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 1000 } });
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
