/**
 * A quota lease call given up on at its deadline (Redis silent: here a proxy holding the connection, so the
 * call reaches Redis only later) reports the spends made under the lease; Redis settles them when it runs it.
 * The next call reports them again (the instance cannot know the first ran), so lua/lease.lua takes a running
 * total and settles only what it adds (r:<id>): no token is settled twice. Before, each such call lost its
 * reported spends for good (99 of a day's 1,000 here: 701 left after 200 admitted).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { startHoldProxy, type HoldProxy } from '../helpers/hold-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';

let redis: TestRedis;
let proxy: HoldProxy;
let l: Limiter | undefined;
beforeAll(async () => {
  redis = await startRedis();
  proxy = await startHoldProxy(redis.port);
});
afterAll(async () => {
  await l?.close();
  await proxy?.close();
  await redis?.stop();
});

const DAY = 86_400_000;

describe('a lease call that Redis runs after its deadline', () => {
  it('settles the spends it reported once: the next call reports them again and nothing is lost', async () => {
    const prefix = 'll:';
    l = await createLimiter({
      policies: {
        tb: {
          algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'lease', onStoreError: 'closed',
          lease: { ttlMs: 60_000, idleMs: 30_000, maxShare: 0.25 },
        },
      },
      redis: { url: `redis://127.0.0.1:${proxy.port}`, prefix, timeoutMs: 200 },
    });
    const check = (cost: number) => l!.check({ policy: 'tb', key: 'k', cost });
    for (let i = 0; i < 100; i++) expect((await check(1)).allowed).toBe(true);
    const [state] = await redis.client.keys(`${prefix}*:lease`);
    // one lease of a quarter of the bucket, its first token reported with the call that took it
    const lease = async (): Promise<Record<string, string>> => redis.client.hgetall(state!);
    expect((await lease()).o).toBe('250');

    // a check that needs more than is held: a lease call reporting the 99 spent since, held at the proxy
    const held = proxy.holdAt('evalsha');
    const denied = check(240);
    await held;
    expect(await denied).toMatchObject({ allowed: false, degraded: true, degradedBy: 'closed' });
    proxy.release();
    // Redis runs it now: the 100 spent so far are settled (r:<id>, the running total) and the lease topped up to
    // a quarter again, 100 more taken from the bucket (650 left): a grant this instance learns of at its next call
    const settled = async (): Promise<string | undefined> => Object.entries(await lease()).find(([f]) => f.startsWith('r:'))?.[1];
    const end = Date.now() + 5000;
    while ((await settled()) !== '100' && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    const late = await lease();
    expect([await settled(), late.o, Math.floor(Number(late.x) / DAY)]).toStrictEqual(['100', '250', 650]);
    // counted as the store's: a timeout, then a late call once its reply is in
    while ((await l.stats()).store?.lateCalls !== 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    const st = (await l.stats()).store!;
    expect([st.timeouts, st.storeErrors, st.lateCalls]).toStrictEqual([1, 1, 1]);

    for (let i = 0; i < 100; i++) expect((await check(1)).allowed).toBe(true);
    await l.close(); // returns what is left of the lease: its report takes the total to 200, settled once
    l = undefined;
    const after = await lease();
    expect(after.o).toBe('0');
    // 1,000 − 200 admitted, plus the refill of the seconds this took (1,000 a day: well under one token)
    expect(Math.floor(Number(after.x) / DAY)).toBe(800);
    expect(Object.keys(after).filter((f) => f.startsWith('n:') || f.startsWith('r:'))).toStrictEqual([]);
  });
});
