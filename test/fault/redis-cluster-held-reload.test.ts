/**
 * A Redis Cluster master that freezes mid-reload (its FUNCTION LOAD held, never answered) while another master
 * loses the library (FUNCTION FLUSH), twice: the other master's checks are still decided by Redis
 * (src/store/cluster-calls.ts, src/store/library-way.ts ResendTurn). Resends are made in the order the calls
 * failed, per hash slot now: with one order for the whole Cluster, the healthy master's resends came after the
 * frozen master's, which waited for its load, and behind its gate (src/store/call-gate.ts) every new call to
 * the healthy master waited too: all its checks took their failure rule. A proxy in front of the frozen master
 * (test/helpers/hold-proxy.ts) holds the limiter's connection from its FUNCTION LOAD on: the master answered
 * the call that found no library, then stopped, which SIGSTOP cannot time.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { brief } from '../helpers/assert.js';
import { startHoldProxy, type HoldProxy } from '../helpers/hold-proxy.js';
import { announcePort, clusterSuite, keysByMaster } from '../helpers/redis-cluster.js';

// a bucket that refills one token in 86 s: a check of cost 0 answers exactly what the set-up left
const policies = { api: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'strict', onStoreError: 'closed' } } as const;
/** FUNCTION LOAD as ioredis writes it. */
const LOAD = '*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n';

describe('Redis Cluster: FUNCTION FLUSH on a master while another is frozen mid-reload', () => {
  let proxy: HoldProxy | undefined;
  const suite = clusterSuite(() => proxy?.release());
  afterAll(async () => {
    await proxy?.close();
  });

  it('the flushed master\'s checks are decided by Redis, after each of two flushes', async () => {
    const prefix = 'hrl:';
    const c = suite.cluster();
    proxy = await startHoldProxy(c.ports[0]);
    await announcePort(c, 0, proxy.port);
    const l = await suite.limiter({ policies, redis: { prefix, timeoutMs: 1000 } });
    const byNode = await keysByMaster(c, l, 'api', prefix);
    const held = proxy.holdAt(LOAD);
    for (const x of c.clients.slice(0, 2)) await x.call('FUNCTION', 'FLUSH');
    // master 0 answers this check "Function not found", and freezes once the limiter sends it FUNCTION LOAD
    const frozen = l.check({ policy: 'api', key: byNode[0][0], cost: 0 });
    await held;
    try {
      for (let flush = 0; flush < 2; flush++) {
        if (flush > 0) await c.clients[1].call('FUNCTION', 'FLUSH');
        const got: string[] = [];
        for (let i = 0; i < 6; i++) got.push(brief(await l.check({ policy: 'api', key: byNode[1][i % byNode[1].length], cost: 0 })));
        expect(got, `after flush ${flush + 1}`).toEqual(new Array<string>(6).fill('allow r=999'));
      }
    } finally {
      proxy.release();
      await frozen;
    }
  }, 60_000);
});
