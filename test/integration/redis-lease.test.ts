/**
 * Lease mode against a real redis-server: checks decided from leased tokens, leases in Redis, renewal,
 * return on idle and close(), expiry of a dead instance's lease, guards and several limits, windows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { insideWindow, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { manualClock, EPOCH_MINUTE } from '../helpers/clock.js';
import { createMetrics } from '../../src/metrics/registry.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { send, spawnServe } from '../helpers/server.js';

let redis: SharedRedis;
beforeAll(async () => { redis = await sharedRedis(); });
afterAll(async () => { await redis?.stop(); });

async function counts(l: Limiter, policy = 'p') {
  return (await l.stats()).lease!.policies[policy];
}

/** Waits (up to 5 s) until `ok` holds: the idle sweep runs on a timer (reading the test's clock). */
async function until(ok: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 5000;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error('condition not met within 5 s');
    await sleep(10);
  }
}

async function instance(policies: Record<string, PolicySpec>, prefix: string, clock: () => number): Promise<Limiter> {
  return createLimiter({ policies, clock, redis: { url: redis.url, prefix, clock: 'limiter' } });
}

/** The lease state HASH of leg j of `key` (test keys have no characters to escape). */
async function leaseState(prefix: string, policy: string, key: string, j = 0): Promise<Record<string, string>> {
  const keys = await redis.client.keys(`${prefix}{${policy}:*:${key}}:${j}:lease`);
  expect(keys).toHaveLength(1);
  return redis.client.hgetall(keys[0]);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('lease mode', () => {
  it('a cold key leases its check\'s cost, a hot one larger leases; admitted never passes the limit', async () => {
    const clock = manualClock();
    const l = await instance({ p: { algorithm: 'token_bucket', limit: 100, period: 3_600_000, consistency: 'lease' } }, 'l1:', clock.now);
    try {
      expect(await l.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 99 });
      let s = await leaseState('l1:', 'p', 'k');
      // one lease of 1 token, spent here, not reported yet: outstanding 1, bucket 99 tokens (x = tokens·P)
      expect(s.o).toBe('1');
      expect(Number(s.x)).toBe(99 * 3_600_000);
      const lease = Object.entries(s).filter(([f]) => f.startsWith('n:'));
      expect(lease).toHaveLength(1);
      expect(lease[0][1]).toBe(`1 ${EPOCH_MINUTE + 2000} ${Math.floor(EPOCH_MINUTE / 3_600_000)}`);
      let allowed = 0;
      for (let i = 0; i < 200; i++) {
        clock.advance(1);
        if ((await l.check({ policy: 'p', key: 'k', cost: 1 })).allowed) allowed++;
      }
      expect(allowed).toBe(99);
      s = await leaseState('l1:', 'p', 'k');
      // no refill to speak of in 200 ms at 100 per hour: (x + o·P) ≤ B·P, and everything was spent
      expect(Number(s.x) + Number(s.o) * 3_600_000).toBeLessThanOrEqual(100 * 3_600_000);
      const c = await counts(l);
      expect(c.acquiredTokens).toBeLessThanOrEqual(100);
      expect(c.acquired).toBeLessThan(99); // leases grew with the rate: fewer calls than checks
    } finally {
      await l.close();
    }
  });

  it('with one instance whose spends reach Redis before time moves, every decision equals strict\'s (remaining, resetAfterMs, retryAfterMs)', async () => {
    const clock = manualClock();
    for (const algorithm of ['token_bucket', 'gcra'] as const) {
      const spec: PolicySpec = { algorithm, limit: 50, period: 3_600_000, burst: 5 };
      const lease = await instance({ p: { ...spec, consistency: 'lease' } }, `l9${algorithm}:`, clock.now);
      const strict = await instance({ p: { ...spec, consistency: 'strict' } }, `s9${algorithm}:`, clock.now);
      try {
        // The burst of 5 spent at one instant (resetAfterMs 72 s more a token: 72 k, 144 k ... 360 k), the 6th
        // denied; a token refilled (72 s) and spent, the next denied; half a token, then a check of 2 denied
        // (108 s to wait), then admitted. Each leased token is reported in Redis by the next lease call, made
        // at the same instant (the lease holds 1 token: maxShare 0.25 of 5), so Redis refills from the spend,
        // as an exact bucket does. (A spend reported later refills later: lease's reset is then later than
        // strict's, never earlier; the next test.)
        const steps: Array<[advanceMs: number, cost: number]> = [[0, 1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1], [72_000, 1], [0, 1], [36_000, 2], [108_000, 2], [0, 1]];
        const resets: number[] = [];
        for (const [i, [advance, cost]] of steps.entries()) {
          clock.advance(advance);
          const [a, b] = [await lease.check({ policy: 'p', key: 'k', cost }), await strict.check({ policy: 'p', key: 'k', cost })];
          expect({ i, algorithm, ...a }).toStrictEqual({ i, algorithm, ...b });
          resets.push(a.resetAfterMs);
        }
        expect(resets).toStrictEqual([72_000, 144_000, 216_000, 288_000, 360_000, 360_000, 360_000, 360_000, 324_000, 360_000, 360_000]);
      } finally {
        await lease.close();
        await strict.close();
      }
    }
  });

  it('several instances on one key admit exactly the limit', async () => {
    const clock = manualClock();
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'gcra', limit: 50, period: 3_600_000, consistency: 'lease' } };
    const ls = await Promise.all([0, 1, 2].map(() => instance(policies, 'l2:', clock.now)));
    try {
      let allowed = 0;
      for (let i = 0; i < 100; i++) {
        const ds = await Promise.all(ls.map((l) => l.check({ policy: 'p', key: 'k', cost: 1 })));
        allowed += ds.filter((d) => d.allowed).length;
        clock.advance(1);
      }
      expect(allowed).toBe(50);
    } finally {
      await Promise.all(ls.map((l) => l.close()));
    }
  });

  it('an idle key returns its unused tokens; close() returns the rest', async () => {
    const clock = manualClock();
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 1000, period: 3_600_000, consistency: 'lease', lease: { ttlMs: 10_000, idleMs: 500 } } };
    const a = await instance(policies, 'l3:', clock.now);
    const b = await instance(policies, 'l3:', clock.now);
    try {
      for (let i = 0; i < 300; i++) {
        await a.check({ policy: 'p', key: 'k', cost: 1 });
        if (i % 10 === 0) clock.advance(1);
      }
      let s = await leaseState('l3:', 'p', 'k');
      const countBefore = Number(s.x);
      expect(countBefore).toBeGreaterThan(300); // a lease ahead of need
      clock.advance(600);
      await until(async () => (await counts(a)).returnedTokens > 0);
      s = await leaseState('l3:', 'p', 'k');
      // the window's count is what was spent: the unused tokens came back into the same window
      expect(Number(s.x)).toBe(300);
      expect(s.o).toBe('0');
      expect((await counts(a)).returnedTokens).toBe(countBefore - 300);
      await b.check({ policy: 'p', key: 'k', cost: 5 });
      await b.close();
      s = await leaseState('l3:', 'p', 'k');
      expect(Number(s.x)).toBe(305);
      expect(Object.keys(s).filter((f) => f.startsWith('n:'))).toEqual([]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a dead instance\'s lease expires after ttlMs and counts as all used', async () => {
    const clock = manualClock();
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'token_bucket', limit: 10, period: 3_600_000, consistency: 'lease', lease: { ttlMs: 1000, maxShare: 1 } } };
    const a = await instance(policies, 'l4:', clock.now);
    const b = await instance(policies, 'l4:', clock.now);
    try {
      for (let i = 0; i < 5; i++) {
        await a.check({ policy: 'p', key: 'k', cost: 1 });
        clock.advance(1);
      }
      // `a` dies holding its lease (no close): simulated by never calling it again
      await until(async () => (await a.stats()).lease!.callsInFlight === 0);
      const before = await leaseState('l4:', 'p', 'k');
      // what a holds (granted, not reported used) plus what is left in the bucket: never more than the burst
      const left = Math.floor(Number(before.x) / 3_600_000);
      expect(Number(before.o) + left).toBeLessThanOrEqual(10);
      expect(Number(before.o)).toBeGreaterThanOrEqual(1);
      // before the expiry, b gets only what is left
      let got = 0;
      for (let i = 0; i < 20; i++) if ((await b.check({ policy: 'p', key: 'k', cost: 1 })).allowed) got++;
      expect(got).toBe(left);
      // b was told to ask again by a's lease's expiry (other instances' tokens may come back by then), not
      // by the bucket's refill (a token in 6 min at 10 per hour)
      const told = await b.check({ policy: 'p', key: 'k', cost: 1 });
      expect(told.allowed).toBe(false);
      expect(told.retryAfterMs).toBeGreaterThan(0);
      expect(told.retryAfterMs).toBeLessThanOrEqual(1000);
      clock.advance(1000);
      // b's next lease call reaps a's lease: its tokens count as used (the bucket does not get them back);
      // 1000 ms at 10 per hour refill nothing
      expect(await b.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: false });
      const s = await leaseState('l4:', 'p', 'k');
      expect(Object.keys(s).filter((f) => f.startsWith('n:'))).toEqual([]);
      expect(s.o).toBe('0');
      expect((await counts(b)).expired).toBe(1);
    } finally {
      await b.close();
      (a as unknown as { close(): Promise<void> }).close().catch(() => undefined);
    }
  });

  it('a guarded policy of two limits: every leg leased, the tightest binds; inspect shows the leases; metrics count them', async () => {
    const clock = manualClock();
    const policies: Record<string, PolicySpec> = {
      all: { algorithm: 'token_bucket', limit: 7, period: 3_600_000, consistency: 'lease' },
      t: { limits: [{ algorithm: 'sliding_window', limit: 5, period: 3_600_000 }, { algorithm: 'gcra', limit: 100, period: 3_600_000 }], guard: 'all', consistency: 'lease' },
    };
    const a = await instance(policies, 'l5:', clock.now);
    const b = await instance(policies, 'l5:', clock.now);
    try {
      const got = { a1: 0, b1: 0, b2: 0 };
      for (let i = 0; i < 10; i++) {
        if ((await a.check({ policy: 't', key: 'one', cost: 1 })).allowed) got.a1++;
        if ((await b.check({ policy: 't', key: 'one', cost: 1 })).allowed) got.b1++;
        if ((await b.check({ policy: 't', key: 'two', cost: 1 })).allowed) got.b2++;
        clock.advance(1);
      }
      // key one: its own sliding window of 5 binds; the guard's 7 tokens across both keys
      expect(got.a1 + got.b1).toBe(5);
      expect(got.a1 + got.b1 + got.b2).toBe(7);
      const st = await a.inspect({ policy: 't', key: 'one' });
      expect(st.source).toBe('redis');
      expect(st.limits.map((l) => l.name)).toStrictEqual(['t#0', 't#1']);
      const [sw] = st.limits;
      // the window counts what was granted (spent or held): all 5
      expect(sw.count).toBe(5);
      expect(sw.remaining).toBe(0);
      expect(sw.lease!.outstanding).toBe(sw.lease!.leases.reduce((n, l) => n + l.count, 0));
      expect(sw.lease!.here).toMatchObject({ leaseId: expect.stringMatching(/^[0-9a-f]{12}\.\d+$/) });
      const text = await createMetrics(a).render();
      expect(text).toMatch(/sluice_lease_acquired_total\{policy="t"\} [1-9]/);
      expect(text).toMatch(/sluice_lease_acquired_total\{policy="all"\} [1-9]/);
      expect(text).toMatch(/sluice_lease_waits_total\{policy="t"\} [1-9]/);
      expect(text).toContain('sluice_lease_tokens_held{policy="t"}');
      // reset forgets the key's lease states: a fresh window for key one (the guard keeps its count)
      expect(await a.reset({ policy: 't', key: 'one' })).toStrictEqual({ removed: 2 });
      expect((await a.inspect({ policy: 't', key: 'one' })).limits[0]).toMatchObject({ held: false, count: 0, remaining: 5 });
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('sluice serve gives its unused leased tokens back on SIGTERM (runs the BUILT dist/)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-lease-term-'));
    const file = path.join(dir, 'policies.yaml');
    writeFileSync(file, JSON.stringify({ policies: { p: { algorithm: 'fixed_window', limit: 1000, period: '1h', consistency: 'lease', lease: { ttlMs: 60_000, idleMs: 60_000 } } } }));
    // the leased count of one hour's fixed window (epoch-aligned) read exactly after 60 checks and a SIGTERM
    // (~1 s): all in one hour, or the key expires before it is read
    await insideWindow(redis.client, 3_600_000, 10_000);
    const proc = await spawnServe(['--config', file, '--redis', redis.url, '--redis-prefix', 'term:']);
    try {
      for (let i = 0; i < 60; i++) expect((await send(`${proc.url}/v1/check?policy=p&key=k&cost=1`)).status).toBe(200);
      const held = await leaseState('term:', 'p', 'k');
      // the window counts what was leased: more than the 60 spent while this instance holds a lease
      expect(Number(held.x)).toBeGreaterThan(60);
      proc.child.kill('SIGTERM');
      await proc.exited;
      const s = await leaseState('term:', 'p', 'k');
      expect(Number(s.x)).toBe(60);
      expect(s.o).toBe('0');
      expect(Object.keys(s).filter((f) => f.startsWith('n:'))).toEqual([]);
    } finally {
      await proc.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000 + 10_000); // and insideWindow's longest wait
});
