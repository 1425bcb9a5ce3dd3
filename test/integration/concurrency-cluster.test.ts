/**
 * Strict concurrency leases on a 3-master Redis Cluster: each key's sorted set lives on the master of its hash
 * tag `{<policy>:<key>}`, acquires and releases of keys on every master answer exactly, and the store counts
 * no failed call (a CROSSSLOT or a MOVED not followed would be one).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { connected } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';

let c: TestCluster;
let l: Limiter;
const prefix = `leasecl${process.pid}:`;

beforeAll(async () => {
  c = await startCluster();
  l = await createLimiter({
    policies: { jobs: { algorithm: 'concurrency', limit: 1, leaseTtl: '1m', consistency: 'strict' } },
    maxKeys: 4096, redis: { cluster: c.nodes, prefix, timeoutMs: 1000 },
  });
  await connected(l);
}, 60_000);
afterAll(async () => {
  await l?.close();
  await c?.stop();
});

describe('concurrency leases on a Redis Cluster', () => {
  it('one sorted set per key, on its tag\'s master; every master answers', async () => {
    const keys = Array.from({ length: 12 }, (_, i) => `tenant-${i}`);
    const leases = await Promise.all(keys.map((key) => l.acquire({ policy: 'jobs', key })));
    expect(leases.map((d) => [d.allowed, d.remaining])).toEqual(keys.map(() => [true, 0]));
    expect((await Promise.all(keys.map((key) => l.acquire({ policy: 'jobs', key })))).map((d) => d.allowed)).toEqual(keys.map(() => false));
    const held = await c.keysUnder(prefix);
    expect(held.map((k) => k.key)).toEqual(keys.map((k) => `${prefix}{jobs:${k}}:lease`).sort());
    // 12 tags spread over 3 masters: more than one master holds leases
    expect(new Set(held.map((k) => k.node)).size).toBeGreaterThan(1);
    const released = await Promise.all(keys.map((key, i) => l.release({ policy: 'jobs', key, leaseId: leases[i].leaseId! })));
    expect(released.map((r) => r.remaining)).toEqual(keys.map(() => 1));
    expect(await c.keysUnder(prefix)).toEqual([]);
    expect((await l.stats()).store).toMatchObject({ storeErrors: 0, breaker: 'closed', connected: true });
  });
});
