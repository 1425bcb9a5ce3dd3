/**
 * A Redis Cluster master's idle breaker probe (src/store/breaker.ts probeWrite, src/store/cluster-calls.ts)
 * after the slot its probe key was chosen in has moved to another master: the probe must still reach a slot
 * its master serves. A key of a slot the master no longer serves is answered MOVED before Redis looks at its
 * memory, which, taken as "Redis answered", closed the breaker of a master out of memory while every check
 * there was refused.
 */
import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { clusterSuite } from '../helpers/redis-cluster.js';
import { sleep } from '../helpers/clock.js';

const policies = { api: { algorithm: 'token_bucket', limit: 100, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: idle probe after its slot moved', () => {
  const suite = clusterSuite();

  it('a master out of memory keeps its breaker open while idle, though the slot it first served a check for moved away', async () => {
    const prefix = 'moved:';
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 200 } });
    // the first check on master 0 makes its breaker, its probe key in that check's slot
    const ids = await Promise.all(c.clients.map(async (x) => String(await x.cluster('MYID'))));
    const where = async (k: string): Promise<{ node: number; slot: number; key: string }> => {
      const found = (await c.keysUnder(prefix)).find((x) => x.key.includes(`:${k}}`))!;
      return { node: found.node, slot: calculateSlot(found.key), key: found.key };
    };
    let first: { node: number; slot: number; key: string } | null = null;
    for (let i = 0; first === null; i++) {
      await l.check({ policy: 'api', key: `a${i}`, cost: 1 });
      const w = await where(`a${i}`);
      if (w.node === 0) first = w;
      else await c.clients[w.node].del(w.key);
    }
    // another key of master 0, in another slot
    let other: string | null = null;
    for (let i = 0; other === null; i++) {
      await l.check({ policy: 'api', key: `b${i}`, cost: 1 });
      const w = await where(`b${i}`);
      if (w.node === 0 && w.slot !== first.slot) other = `b${i}`;
    }
    // the first slot moves to master 1 (emptied first, so it can be handed over as it is)
    await c.clients[0].del(first.key);
    for (const x of [c.clients[1], c.clients[0], c.clients[2]]) await x.cluster('SETSLOT', first.slot, 'NODE', ids[1]);
    expect(await c.clients[2].cluster('COUNTKEYSINSLOT', first.slot)).toBe(0);
    // master 0 out of memory: its checks are refused, its breaker opens
    await c.clients[0].config('SET', 'maxmemory', '1');
    try {
      for (let i = 0; i < 6; i++) expect((await l.check({ policy: 'api', key: other, cost: 1 })).degraded).toBe(true);
      expect((await l.stats()).store!.breaker).not.toBe('closed');
      // idle: every probe is refused as the checks are, so master 0's breaker never closes
      const seen = new Set<string>();
      for (let i = 0; i < 20; i++) {
        await sleep(100);
        seen.add((await l.stats()).store!.breaker);
      }
      expect(seen.has('closed')).toBe(false);
    } finally {
      await c.clients[0].config('SET', 'maxmemory', '0');
    }
    // memory back, still idle: a probe closes it
    let state = (await l.stats()).store!.breaker;
    for (let i = 0; i < 40 && state !== 'closed'; i++) {
      await sleep(100);
      state = (await l.stats()).store!.breaker;
    }
    expect(state).toBe('closed');
    expect((await c.keysUnder(`${prefix}breaker-probe`)).length).toBe(0);
    expect((await l.check({ policy: 'api', key: other, cost: 0 })).degraded).toBeUndefined();
  }, 60_000);
});
