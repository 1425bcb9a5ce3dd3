/**
 * A concurrency acquire given up on at its deadline (Redis silent: here a proxy holding the connection, so the
 * command reaches Redis only later) takes the policy's failure rule; when Redis runs it afterwards it adds a
 * lease nobody holds, which would keep a place for its whole leaseTtl. The store releases such a lease as soon
 * as the late reply comes back, and counts the call as late (src/store/redis.ts lateLease).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { startHoldProxy, type HoldProxy } from '../helpers/hold-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';

let redis: TestRedis;
let proxy: HoldProxy;
beforeAll(async () => {
  redis = await startRedis();
  proxy = await startHoldProxy(redis.port);
});
afterAll(async () => {
  await proxy?.close();
  await redis?.stop();
});

/** Polls `read` (real time, up to 5 s) until it gives `want`. */
async function until<T>(read: () => Promise<T>, want: T): Promise<T> {
  const end = Date.now() + 5000;
  let v = await read();
  while (v !== want && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 20));
    v = await read();
  }
  return v;
}

describe.each(['closed', 'open'] as const)('a concurrency acquire that Redis runs after its deadline (onStoreError %s)', (rule) => {
  let l: Limiter;
  afterAll(async () => {
    await l?.close();
  });

  it('answers by the rule, then releases the lease Redis added late: the key keeps no place nobody holds', async () => {
    const prefix = `cl${rule}:`;
    l = await createLimiter({
      policies: { jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '30s', consistency: 'strict', onStoreError: rule } },
      redis: { url: `redis://127.0.0.1:${proxy.port}`, prefix, timeoutMs: 200 },
    });
    const leases = `${prefix}{jobs:k}:lease`;
    // the script loaded and the connection up before the hold
    const first = await l.acquire({ policy: 'jobs', key: 'k' });
    expect(first).toMatchObject({ allowed: true, remaining: 1 });
    expect(await l.release({ policy: 'jobs', key: 'k', leaseId: first.leaseId! })).toMatchObject({ released: true });

    const held = proxy.holdAt('evalsha');
    const late = l.acquire({ policy: 'jobs', key: 'k' });
    await held;
    const d = await late;
    expect(d).toMatchObject(rule === 'closed'
      ? { allowed: false, leaseId: null, degraded: true, degradedBy: 'closed' }
      : { allowed: true, leaseId: null, degraded: true, degradedBy: 'open' });
    proxy.release();
    // Redis runs the acquire now (its lease added), then the release sent when its reply came back
    expect(await until(async () => (await l.stats()).store?.lateCalls, 1)).toBe(1);
    expect(await until(() => redis.client.zcard(leases), 0)).toBe(0);
    // both places are free again
    const [a, b] = [await l.acquire({ policy: 'jobs', key: 'k' }), await l.acquire({ policy: 'jobs', key: 'k' })];
    expect([a.allowed, b.allowed, b.remaining]).toStrictEqual([true, true, 0]);
  });
});
