/**
 * Lease mode with Redis down: an instance spends the tokens it holds (not degraded: they were leased), then
 * each check that needs more takes the policy's onStoreError (closed: denied, open: admitted, local: this
 * instance's kernel), marked degraded. Held tokens are void past their lease's end, Redis or not.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';
import { manualClock } from '../helpers/clock.js';

let redis: TestRedis;
beforeEach(async () => { redis = await startRedis(); });
afterEach(async () => { await redis?.stop(); });

async function hold(l: Limiter, policy: string, n: number, clock: { advance(ms: number): void }): Promise<void> {
  // a hot key: its leases grow with its rate (one check a ms)
  for (let i = 0; i < n; i++) {
    expect((await l.check({ policy, key: 'k', cost: 1 })).allowed).toBe(true);
    clock.advance(1);
  }
  const until = Date.now() + 5000;
  while ((await l.stats()).lease!.callsInFlight > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
}

describe('lease mode, Redis down', () => {
  for (const rule of ['closed', 'open', 'local'] as const) {
    it(`spends what it holds, then onStoreError ${rule}`, async () => {
      const clock = manualClock();
      const policies: Record<string, PolicySpec> = {
        p: { algorithm: 'token_bucket', limit: 1000, period: 3_600_000, consistency: 'lease', onStoreError: rule, lease: { ttlMs: 60_000, idleMs: 60_000, maxShare: 0.1 } },
      };
      const l = await createLimiter({ policies, clock: clock.now, redis: { url: redis.url, clock: 'limiter', timeoutMs: 100 } });
      try {
        await hold(l, 'p', 20, clock);
        const held = (await l.stats()).lease!.tokensHeld;
        expect(held).toBeGreaterThan(0);
        await redis.kill();
        const ds = [];
        for (let i = 0; i < held + 3; i++) ds.push(await l.check({ policy: 'p', key: 'k', cost: 1 }));
        // the held tokens first, decided as usual
        expect(ds.slice(0, held).every((d) => d.allowed && d.degraded === undefined)).toBe(true);
        const after = ds.slice(held);
        expect(after.every((d) => d.degraded === true && d.degradedBy === rule)).toBe(true);
        expect(after.every((d) => d.allowed === (rule !== 'closed'))).toBe(true);
        expect((await l.stats()).degraded!.p[rule]).toBe(3);
      } finally {
        await l.close({ drainMs: 200 });
      }
    });
  }

  it('held tokens are void past the lease\'s end', async () => {
    const clock = manualClock();
    const policies: Record<string, PolicySpec> = {
      p: { algorithm: 'fixed_window', limit: 1000, period: 3_600_000, consistency: 'lease', onStoreError: 'closed', lease: { ttlMs: 500, idleMs: 500 } },
    };
    const l = await createLimiter({ policies, clock: clock.now, redis: { url: redis.url, clock: 'limiter', timeoutMs: 100 } });
    try {
      await hold(l, 'p', 20, clock);
      expect((await l.stats()).lease!.tokensHeld).toBeGreaterThan(0);
      await redis.kill();
      clock.advance(500);
      expect(await l.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: false, degraded: true, degradedBy: 'closed' });
    } finally {
      await l.close({ drainMs: 200 });
    }
  });
});
