/**
 * Library reloads on a Redis Cluster whose slots move (src/store/cluster-calls.ts): a check sent to the master a
 * moved slot left, redirected (MOVED) to one without the library, has the library loaded where it was
 * redirected, where its resend goes. Loaded on the master it was sent to, its resend found none again and the
 * check failed (when the library was loaded on every master, the new one had it too).
 */
import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite, keysByMaster, moveSlot } from '../helpers/redis-cluster.js';

// a bucket that refills one token in 86 s: each check of cost 1 takes exactly one from what the set-up left
const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: a slot moved while its master reloads the library', () => {
  const suite = clusterSuite();

  it('a check redirected (MOVED) to a master without the library has it loaded there, not where it was sent', async () => {
    const prefix = 'mrm:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 5000 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const key = byNode[1][0];
    const stored = (await c.keysUnder(prefix)).filter((k) => k.key.includes(`:${key}}`));
    const slot = calculateSlot(stored[0].key);
    // the new master has no library (a master added to the Cluster, or restarted without it)
    await c.clients[2].call('FUNCTION', 'FLUSH');
    await moveSlot(c, slot, 1, 2);
    // sent to master 1 by the slot map the limiter had (unless it re-read it meanwhile), answered MOVED, then
    // "Function not found" by master 2
    expect(brief(await l.check({ policy: 'api', key, cost: 1 }))).toBe('allow r=998');
  }, 60_000);
});
