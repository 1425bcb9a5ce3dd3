/**
 * The held strict call (src/engine/deciders/strict.ts, StrictDecider.held) on a Redis Cluster with one master
 * frozen (SIGSTOP). A Cluster splits each call by slot, each master on its own connection with its own
 * liveness: a call that waited behind one to a frozen master says nothing of the other masters, and a slot
 * that failed comes back as NaN rows (the call resolves), not as a rejection.
 */
import { describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { clusterSuite } from '../helpers/redis-cluster.js';
import type { Decision } from '../../src/types/decision.js';
import type { Limiter } from '../../src/index.js';

const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;
const TIMEOUT = 200;

const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('Redis Cluster: a held call behind one to a frozen master', () => {
  let frozen = 0;
  const suite = clusterSuite(() => {
    if (frozen > 0) process.kill(frozen, 'SIGCONT');
  });

  /** A limiter on the Cluster, its keys k0…k29 sorted by the master that holds them, and master 0 frozen. */
  async function frozenMaster(prefix: string): Promise<{ l: Limiter; byNode: string[][]; pid: number }> {
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: TIMEOUT } });
    for (let i = 0; i < 30; i++) await l.check({ policy: 'api', key: `k${i}`, cost: 1 });
    const byNode: string[][] = [[], [], []];
    for (const { key, node } of await c.keysUnder(prefix)) {
      const m = /:(k\d+)\}/.exec(key);
      if (m) byNode[node].push(m[1]);
    }
    expect(byNode.map((ks) => ks.length > 2)).toStrictEqual([true, true, true]);
    const pid = Number(/process_id:(\d+)/.exec(await c.clients[0].info('server'))?.[1]);
    process.kill(pid, 'SIGSTOP');
    frozen = pid;
    return { l, byNode, pid };
  }

  it('a timeout of a call to the frozen master does not fail a held check on a healthy master', async () => {
    const { l, byNode, pid } = await frozenMaster('hold1:');
    try {
      // a check on the frozen master goes out; a check on a healthy one, made next turn, is not its business
      const lost = l.check({ policy: 'api', key: byNode[0][0], cost: 1 });
      await nextTurn();
      const healthy = l.check({ policy: 'api', key: byNode[1][0], cost: 1 });
      await nextTurn();
      expect(brief(await lost)).toBe('deny r=0 degraded:closed');
      expect(brief(await healthy)).toMatch(/^allow r=99[0-9]$/);
    } finally {
      process.kill(pid, 'SIGCONT');
      frozen = 0;
    }
  }, 60_000);

  it('a check on the frozen master held behind a call whose slot there failed is answered within timeoutMs', async () => {
    const { l, byNode, pid } = await frozenMaster('hold2:');
    try {
      // a call with a slot on each side: the frozen one's legs come back NaN, the call resolves. A check on the
      // frozen master made 100 ms later is answered (by its rule) within timeoutMs of it, plus a loop turn
      const both = [l.check({ policy: 'api', key: byNode[0][1], cost: 1 }), l.check({ policy: 'api', key: byNode[2][0], cost: 1 })];
      await nextTurn();
      await new Promise((r) => setTimeout(r, 100));
      const at = performance.now();
      const late: Promise<Decision> = l.check({ policy: 'api', key: byNode[0][2], cost: 1 });
      await nextTurn();
      expect((await Promise.all(both)).map(brief)).toEqual(['deny r=0 degraded:closed', expect.stringMatching(/^allow r=99[0-9]$/)]);
      expect(brief(await late)).toBe('deny r=0 degraded:closed');
      expect(performance.now() - at).toBeLessThan(TIMEOUT + 60);
    } finally {
      process.kill(pid, 'SIGCONT');
      frozen = 0;
    }
  }, 60_000);
});
