/**
 * A key's checks keep their order on a Redis Cluster when its slot moves to another master while a check of it
 * waits for its resend behind a library reload (src/store/cluster-calls.ts: the order is kept per slot). The
 * key's master loses the library (FUNCTION FLUSH) and freezes mid-reload (its FUNCTION LOAD held by a proxy,
 * test/helpers/hold-proxy.ts); meanwhile the slot is migrated to another master (CLUSTER SETSLOT, MIGRATE) and the
 * limiter's slot map learns it. The key's next check goes to the new master; it must not be decided ahead of the
 * earlier check's resend. With the order kept per master it was: the new master's calls had no gate to wait
 * behind, and the later check took the earlier one's remaining. And a check sent to the master a moved slot left,
 * redirected (MOVED) to one without the library, has the library loaded where it was redirected, where its
 * resend goes: loaded where it was sent, the resend found none again and the check failed.
 */
import calculateSlot from 'cluster-key-slot';
import { afterAll, describe, expect, it } from 'vitest';
import type { Limiter } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { startHoldProxy, type HoldProxy } from '../helpers/hold-proxy.js';
import { announcePort, checksAcrossMove, clusterSuite, keysByMaster, migrateHalfWay, moveSlot } from '../helpers/redis-cluster.js';

// a bucket that refills one token in 86 s: each check of cost 1 takes exactly one from what the set-up left
const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'strict', onStoreError: 'closed' } } as const;
/** FUNCTION LOAD as ioredis writes it. */
const LOAD = '*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n';

describe('Redis Cluster: a slot moved while its master reloads the library', () => {
  let proxy: HoldProxy | undefined;
  const suite = clusterSuite(() => proxy?.release());
  afterAll(async () => {
    await proxy?.close();
  });

  it('the key\'s next check, sent to the new master, is decided after the earlier check\'s resend', async () => {
    const prefix = 'mrl:';
    const c = suite.cluster();
    proxy = await startHoldProxy(c.ports[0]);
    await announcePort(c, 0, proxy.port);
    // a long deadline: the earlier check waits for its resend across the move, and must be decided by Redis
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 20_000 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const key = byNode[0][0];
    const stored = (await c.keysUnder(prefix)).filter((k) => k.key.includes(`:${key}}`));
    expect(stored.map((k) => k.node)).toEqual([0]);
    const slot = calculateSlot(stored[0].key);
    const held = proxy.holdAt(LOAD);
    await c.clients[0].call('FUNCTION', 'FLUSH');
    // master 0 answers "Function not found" and freezes (to the limiter) once sent FUNCTION LOAD; the slot, and
    // the key, go to master 1, and the key's next check is made there while the first waits for its resend
    const both = await checksAcrossMove(c, proxy, held, l.check({ policy: 'api', key, cost: 1 }), slot, 0, 1, () => l.check({ policy: 'api', key, cost: 1 }));
    expect(both.map(brief)).toEqual(['allow r=998', 'allow r=997']);
  }, 60_000);

  /**
   * A limiter on the suite's Cluster with keys under `prefix` on every master, one of master 1's keys (`key`,
   * its state `stateKey` in `slot`), and master 2 without the library (a master added to the Cluster, or
   * restarted without it), where the slot goes next.
   */
  async function keyOfMaster1(prefix: string): Promise<{ l: Limiter; key: string; slot: number; stateKey: string }> {
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 5000 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const key = byNode[1][0];
    const stored = (await c.keysUnder(prefix)).filter((k) => k.key.includes(`:${key}}`));
    await c.clients[2].call('FUNCTION', 'FLUSH');
    return { l, key, slot: calculateSlot(stored[0].key), stateKey: stored[0].key };
  }

  it('a check redirected (MOVED) to a master without the library has it loaded there, not where it was sent', async () => {
    const c = suite.cluster();
    const { l, key, slot } = await keyOfMaster1('mrm:');
    await moveSlot(c, slot, 1, 2);
    // sent to master 1 by the slot map the limiter had (unless it re-read it meanwhile), answered MOVED, then
    // "Function not found" by master 2
    expect(brief(await l.check({ policy: 'api', key, cost: 1 }))).toBe('allow r=998');
  }, 60_000);

  it('a check redirected (ASK) mid-migration to a master without the library has it loaded there too', async () => {
    const c = suite.cluster();
    const { l, key, slot, stateKey } = await keyOfMaster1('mra:');
    // the slot half-way from master 1 to master 2 (a resharding under way): the key is on master 2 already, so
    // master 1, which the slot map still names, answers ASK, and master 2 "Function not found"
    await migrateHalfWay(c.clients[1], { client: c.clients[2], port: c.ports[2] }, slot, [stateKey]);
    try {
      expect(brief(await l.check({ policy: 'api', key, cost: 1 }))).toBe('allow r=998');
    } finally {
      // the migration finished (the slot holds the other tests' keys too: same hash tags)
      await moveSlot(c, slot, 1, 2);
    }
  }, 60_000);
});
