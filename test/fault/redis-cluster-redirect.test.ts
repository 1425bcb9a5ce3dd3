/**
 * Redirections on a Redis Cluster that ioredis does not follow, followed (src/store/cluster-redirect.ts). Every
 * command sluice sends a Cluster is auto-pipelined, one pipeline per master and turn, and ioredis follows a MOVED
 * or ASK there only when every command of the pipeline got the same one: a check (or a sync merge) whose slot is
 * being migrated, or moved before the slot map was read again, next to calls of the master's other slots got
 * the redirection as its error, and took its failure rule (`deny r=0 degraded:closed`). And an ASK to a master
 * added for a resharding, which serves no slot yet, was not followed at all (ioredis looks the node up in the
 * pool it built from the slot map).
 */
import calculateSlot from 'cluster-key-slot';
import { afterAll, describe, expect, it } from 'vitest';
import type { Limiter, PolicySpec } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { sleep } from '../helpers/clock.js';
import { startHoldProxy, type HoldProxy } from '../helpers/hold-proxy.js';
import { addMaster, announcePort, checksAcrossMove, clusterSuite, keysByMaster, migrateHalfWay, moveSlot } from '../helpers/redis-cluster.js';

// a bucket that refills one token in 86 s: each check of cost 1 takes exactly one from what the set-up left
const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('Redis Cluster: redirections ioredis leaves unfollowed', () => {
  let proxy: HoldProxy | undefined;
  const suite = clusterSuite(() => proxy?.release());
  afterAll(async () => {
    await proxy?.close();
  });
  /** The proxy master 0 is reached through from the first call on (test/helpers/hold-proxy.ts). */
  async function proxied(): Promise<HoldProxy> {
    if (proxy === undefined) {
      const c = suite.cluster();
      proxy = await startHoldProxy(c.ports[0]);
      await announcePort(c, 0, proxy.port);
    }
    return proxy;
  }

  /**
   * A limiter with keys under `prefix` on every master (one spent of each), and two keys of master `i`: `key`,
   * its state `stateKey` in `slot`, and `other`, in another slot.
   */
  async function keyOf(i: number, prefix: string): Promise<{ l: Limiter; key: string; other: string; slot: number; stateKey: string }> {
    const c = suite.cluster();
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 5000 } });
    const [key, other] = (await keysByMaster(c, l, 'api', prefix))[i];
    const stored = (await c.keysUnder(prefix)).filter((k) => k.key.includes(`:${key}}`));
    return { l, key, other, slot: calculateSlot(stored[0].key), stateKey: stored[0].key };
  }

  it('a check, an admin read and a reset answered ASK in a pipeline whose other calls were decided are followed to where the key went', async () => {
    const c = suite.cluster();
    const { l, key: moved, other: stays, slot, stateKey } = await keyOf(1, 'rdp:');
    await migrateHalfWay(c.clients[1], { client: c.clients[2], port: c.ports[2] }, slot, [stateKey]);
    try {
      // one turn: a call per slot, both to master 1 in one pipeline; one answered ASK, the other decided
      const both = await Promise.all([l.check({ policy: 'api', key: moved, cost: 1 }), l.check({ policy: 'api', key: stays, cost: 1 })]);
      expect(both.map(brief)).toEqual(['allow r=998', 'allow r=998']);
      // an admin read and reset of each (a GET, a DEL per key: one pipeline to master 1 again)
      const seen = await Promise.all([l.inspect({ policy: 'api', key: moved }), l.inspect({ policy: 'api', key: stays })]);
      expect(seen.map((k) => k.limits[0].remaining)).toEqual([998, 998]);
      expect(await Promise.all([l.reset({ policy: 'api', key: moved }), l.reset({ policy: 'api', key: stays })])).toEqual([{ removed: 1 }, { removed: 1 }]);
    } finally {
      await moveSlot(c, slot, 1, 2);
    }
  }, 60_000);

  it('a check answered MOVED in a pipeline whose other calls were decided is sent to the slot\'s new master', async () => {
    const c = suite.cluster();
    const { l, key: moved, other: stays, slot } = await keyOf(1, 'rdv:');
    // the slot to master 2 for good; the limiter's slot map names master 1 until it is next read (1 s)
    await moveSlot(c, slot, 1, 2);
    const both = await Promise.all([l.check({ policy: 'api', key: moved, cost: 1 }), l.check({ policy: 'api', key: stays, cost: 1 })]);
    expect(both.map(brief)).toEqual(['allow r=998', 'allow r=998']);
  }, 60_000);

  it('a sync merge answered MOVED in a pipeline whose other merges were applied is sent to the slot\'s new master', async () => {
    const c = suite.cluster();
    const sync = { sy: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'sync' } } as const;
    const l = await suite.limiter({ policies: sync, redis: { prefix: 'rds:', timeoutMs: 5000, syncIntervalMs: 20 } });
    // each key's state is written by its first merge: spent once and merged before keysByMaster reads them
    for (let i = 0; i < 30; i++) await l.check({ policy: 'sy', key: `k${i}`, cost: 1 });
    await sleep(200);
    const byNode = await keysByMaster(c, l, 'sy', 'rds:');
    await sleep(200);
    const [moved, stays] = byNode[1];
    const stored = (await c.keysUnder('rds:')).filter((k) => k.key.includes(`:${moved}}`));
    const before = (await l.stats()).store?.sync?.failures;
    // the slot to master 2 for good; the limiter's slot map names master 1 until it is next read (1 s), and the
    // two keys' deltas go in the next merge (20 ms), a part per slot, both to master 1 in one pipeline
    await moveSlot(c, calculateSlot(stored[0].key), 1, 2);
    await Promise.all([l.check({ policy: 'sy', key: moved, cost: 1 }), l.check({ policy: 'sy', key: stays, cost: 1 })]);
    await sleep(300);
    expect((await l.stats()).store?.sync).toMatchObject({ failures: before, pendingKeys: 0 });
    // the moved key's state, on master 2, holds its three spends: another instance spends a fourth and, at its
    // merge, learns the other three
    const back = await suite.limiter({ policies: sync, redis: { prefix: 'rds:', timeoutMs: 5000, syncIntervalMs: 20 } });
    await back.check({ policy: 'sy', key: moved, cost: 1 });
    await sleep(300);
    expect(brief(await back.check({ policy: 'sy', key: moved, cost: 0 }))).toBe('allow r=996');
  }, 60_000);

  it('a lease call answered MOVED in a pipeline whose other calls were decided is sent to the slot\'s new master', async () => {
    const c = suite.cluster();
    const lease: Record<string, PolicySpec> = {
      ls: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'lease', onStoreError: 'closed', lease: { ttlMs: 60_000, idleMs: 60_000 } },
    };
    const l = await suite.limiter({ policies: lease, redis: { prefix: 'rdl:', timeoutMs: 5000 } });
    const [moved, stays] = (await keysByMaster(c, l, 'ls', 'rdl:'))[1];
    const stored = (await c.keysUnder('rdl:')).filter((k) => k.key.includes(`:${moved}}`));
    // another instance, holding no lease yet: its first check of each key is a lease call
    const other = await suite.limiter({ policies: lease, redis: { prefix: 'rdl:', timeoutMs: 5000 } });
    // the slot to master 2 for good; that instance's slot map names master 1 until it is next read (1 s)
    await moveSlot(c, calculateSlot(stored[0].key), 1, 2);
    const both = await Promise.all([other.check({ policy: 'ls', key: moved, cost: 1 }), other.check({ policy: 'ls', key: stays, cost: 1 })]);
    expect(both.map((d) => [d.allowed, d.degraded])).toEqual([[true, undefined], [true, undefined]]);
    expect((await other.stats()).lease?.failedCalls).toBe(0);
  }, 60_000);

  it('a check of two limits whose keys a migration has split is sent again until they have all moved', async () => {
    const c = suite.cluster();
    const two: Record<string, PolicySpec> = {
      two: { limits: [{ algorithm: 'token_bucket', limit: 1000, period: '1d' }, { algorithm: 'gcra', limit: 500, period: '1d' }], consistency: 'strict', onStoreError: 'closed' },
    };
    const l = await suite.limiter({ policies: two, redis: { prefix: 'rdt:', timeoutMs: 2000 } });
    const [key, other] = (await keysByMaster(c, l, 'two', 'rdt:'))[1];
    const states = (await c.keysUnder('rdt:')).filter((k) => k.key.includes(`:${key}}`)).map((k) => k.key);
    expect(states).toHaveLength(2);
    const slot = calculateSlot(states[0]);
    // half of the key's states moved: master 1 and master 2 each refuse the check TRYAGAIN
    await migrateHalfWay(c.clients[1], { client: c.clients[2], port: c.ports[2] }, slot, [states[0]]);
    try {
      // one turn: the key's call and another slot's, both to master 1 in one pipeline; the other state moves 50 ms on
      const checks = Promise.all([l.check({ policy: 'two', key, cost: 1 }), l.check({ policy: 'two', key: other, cost: 1 })]);
      await sleep(50);
      await c.clients[1].call('MIGRATE', '127.0.0.1', String(c.ports[2]), '', '0', '5000', 'KEYS', states[1]);
      expect((await checks).map(brief)).toEqual(['allow r=498', 'allow r=498']);
    } finally {
      await moveSlot(c, slot, 1, 2);
    }
  }, 60_000);

  it('a check redirected (ASK) to a master added after the limiter started, which it never called, is decided by Redis', async () => {
    const c = suite.cluster();
    const { l, key, slot, stateKey } = await keyOf(1, 'rdn:');
    // a node joined for a resharding: no slot, no library, and no connection from the limiter until master 1's
    // ASK names it; its "Function not found" comes on that new connection, and the resend is redirected there again
    const added = await addMaster(c);
    try {
      await migrateHalfWay(c.clients[1], added, slot, [stateKey]);
      expect(brief(await l.check({ policy: 'api', key, cost: 1 }))).toBe('allow r=998');
    } finally {
      // the migration called off (the key goes with the node; no other test names it): the slot master 1's alone
      await c.clients[1].cluster('SETSLOT', slot, 'STABLE');
      await added.remove();
    }
  }, 60_000);

  // from here on, master 0 is reached through a proxy
  it('a check made after its slot moved waits for the earlier check still on its way to the old master', async () => {
    const c = suite.cluster();
    const proxy = await proxied();
    const { l, key, slot, stateKey } = await keyOf(0, 'rdo:');
    // the first check reaches master 0's connection and is held there (master 0 frozen to this limiter, just
    // before reading it); meanwhile the slot moves to master 1 and the limiter reads the slot map again
    const held = proxy.holdAt(stateKey);
    const both = await checksAcrossMove(c, proxy, held, l.check({ policy: 'api', key, cost: 1 }), slot, 0, 1, () => l.check({ policy: 'api', key, cost: 1 }));
    // the first is answered MOVED by master 0 and sent to master 1; the second must come after it
    expect(both.map(brief)).toEqual(['allow r=998', 'allow r=997']);
  }, 60_000);

  it('a check made after its slot moved away from a master that does not answer waits one deadline at most', async () => {
    const c = suite.cluster();
    const proxy = await proxied();
    // a deadline long enough for the slot map to be read again while the first check waits, short enough for
    // the test
    const { key, slot, stateKey } = await keyOf(0, 'rdf:');
    const l = await suite.limiter({ policies, redis: { prefix: 'rdf:', timeoutMs: 4000 } });
    const held = proxy.holdAt(stateKey);
    const first = l.check({ policy: 'api', key, cost: 1 });
    await held;
    let second: ReturnType<typeof l.check> | undefined;
    try {
      await moveSlot(c, slot, 0, 1);
      await sleep(2500);
      // made while the first waits on master 0, which sends nothing: it goes to master 1 once the first is given
      // up (4 s after it was made), not when ioredis gives the command up (60 s)
      second = l.check({ policy: 'api', key, cost: 1 });
      expect(brief(await first)).toBe('deny r=0 degraded:closed');
      expect(brief(await second)).toBe('allow r=998');
    } finally {
      proxy.release();
    }
    // the first, read by master 0 once released, is answered MOVED and sent on to master 1 by ioredis (a
    // pipeline of one command: ioredis's own redirection), where it spends after its check took its rule: a
    // late spend, counted as one
    await sleep(500);
    expect(brief(await l.check({ policy: 'api', key, cost: 0 }))).toBe('allow r=997');
    expect((await l.stats()).store).toMatchObject({ lateCalls: 1, lateSpentTokens: 1 });
  }, 60_000);
});
