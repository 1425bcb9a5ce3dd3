/**
 * Policy reload in the library (limiter.reload): what happens to each key's state, atomicity under load, and
 * rejected sets leaving the old rules in force. The clock is controlled, so every count is exact.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../../src/index.js';
import { LimitTable } from '../../../src/engine/limits.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { ManualClock } from '../../helpers/clock.js';
import { spend } from '../../helpers/limiter.js';
import { MemoryStore } from '../../../src/store/memory.js';
import type { Store } from '../../../src/store/contract.js';
import { LIMIT_CAPACITY } from '../../../src/shard/kernel.js';

const FREE: PolicySpec = { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 100 };
const PAID: PolicySpec = { algorithm: 'token_bucket', limit: 10_000, period: '1m', burst: 2000 };
const WINDOW: PolicySpec = { algorithm: 'fixed_window', limit: 10, period: '1m' };

let limiter: Limiter | undefined;
afterEach(async () => {
  await limiter?.close();
  limiter = undefined;
});

describe.each([0, 2])('limiter.reload with %i shards', (shards) => {
  it('keeps the state of a policy whose numbers did not change, exactly', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { free: FREE, window: WINDOW }, shards, clock: clock.now });
    expect(await spend(limiter, 'free', 'acme', 30)).toBe(30);
    expect(await spend(limiter, 'window', 'acme', 4)).toBe(4);
    const r = await limiter.reload({ free: FREE, window: WINDOW, paid: PAID });
    expect(r).toEqual({ version: limiter.version, added: ['paid'], removed: [], changed: [] });
    expect(await limiter.check({ policy: 'free', key: 'acme', cost: 1 })).toEqual({
      allowed: true, limit: 100, remaining: 69, resetAfterMs: 31 * 600, retryAfterMs: 0, policy: 'free',
    });
    expect((await limiter.check({ policy: 'window', key: 'acme', cost: 1 })).remaining).toBe(5);
  });

  it('starts a policy whose numbers changed from fresh state', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { free: FREE, window: WINDOW }, shards, clock: clock.now });
    expect(await spend(limiter, 'free', 'acme', 100)).toBe(100);
    expect(await spend(limiter, 'window', 'acme', 10)).toBe(10);
    const r = await limiter.reload({ free: { ...FREE, limit: 200, burst: 50 }, window: { ...WINDOW, limit: 20 } });
    expect(r.changed).toEqual(['free', 'window']);
    // fresh: a full bucket of the new burst, a window with nothing counted
    expect(await limiter.check({ policy: 'free', key: 'acme', cost: 1 })).toEqual({
      allowed: true, limit: 200, remaining: 49, resetAfterMs: 300, retryAfterMs: 0, policy: 'free',
    });
    expect((await limiter.check({ policy: 'window', key: 'acme', cost: 1 })).remaining).toBe(19);
  });

  it('starts afresh when a given version is bumped, even with the same numbers', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { free: { ...FREE, version: 1 } }, shards, clock: clock.now });
    expect(await spend(limiter, 'free', 'acme', 100)).toBe(100);
    await limiter.reload({ free: { ...FREE, version: 1 } });
    expect((await limiter.check({ policy: 'free', key: 'acme', cost: 1 })).allowed).toBe(false);
    await limiter.reload({ free: { ...FREE, version: 2 } });
    expect((await limiter.check({ policy: 'free', key: 'acme', cost: 1 })).remaining).toBe(99);
  });

  it('carries a token bucket\'s consumed amount over, capped by the new burst, with carryOver: true', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { t: FREE }, shards, clock: clock.now });
    expect(await spend(limiter, 't', 'up', 100)).toBe(100); // empty: 100 consumed
    expect(await spend(limiter, 't', 'down', 30)).toBe(30); // 30 consumed
    clock.advance(1500); // 2.5 tokens back: 97.5 and 27.5 consumed, rounded up to 98 and 28
    await limiter.reload({ t: { ...PAID, carryOver: true } });
    // burst 2000: 2000 − 98 = 1902 tokens, one spent
    expect(await limiter.check({ policy: 't', key: 'up', cost: 1 })).toEqual({
      allowed: true, limit: 10_000, remaining: 1901, resetAfterMs: 594, retryAfterMs: 0, policy: 't',
    });
    // a tenant that never spent gets the full new burst
    expect((await limiter.check({ policy: 't', key: 'new', cost: 1 })).remaining).toBe(1999);
    // down to burst 20: 28 consumed is capped at 20, so the bucket is empty and refills at 1/600 ms
    await limiter.reload({ t: { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 20, carryOver: true } });
    expect(await limiter.check({ policy: 't', key: 'down', cost: 1 })).toEqual({
      allowed: false, limit: 100, remaining: 0, resetAfterMs: 12_000, retryAfterMs: 600, policy: 't',
    });
    clock.advance(600);
    expect((await limiter.check({ policy: 't', key: 'down', cost: 1 })).allowed).toBe(true);
  });

  it('without carryOver, the same change starts the bucket full', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { t: FREE }, shards, clock: clock.now });
    expect(await spend(limiter, 't', 'up', 100)).toBe(100);
    await limiter.reload({ t: PAID });
    expect((await limiter.check({ policy: 't', key: 'up', cost: 1 })).remaining).toBe(1999);
  });

  it('rejects an invalid set, naming the policy and field, and keeps the old rules', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { free: FREE }, shards, clock: clock.now });
    const before = limiter.version;
    expect(await spend(limiter, 'free', 'acme', 10)).toBe(10);
    await expect(limiter.reload({ free: { ...FREE, period: -5 } })).rejects.toMatchObject({
      code: 'CONFIG', field: 'period', message: expect.stringContaining('policy "free": period: must be a positive integer of ms'),
    });
    await expect(limiter.reload({ free: FREE, paid: { ...PAID, consistency: 'strict' } })).rejects.toMatchObject({
      code: 'CONFIG', field: 'consistency', message: expect.stringContaining('this limiter has no Redis'),
    });
    expect(limiter.version).toBe(before);
    expect((await limiter.check({ policy: 'free', key: 'acme', cost: 1 })).remaining).toBe(89);
    await expect(limiter.check({ policy: 'paid', key: 'acme', cost: 1 })).rejects.toMatchObject({ code: 'UNKNOWN_POLICY' });
  });

  it('refuses checks of a removed policy, and decides a guard added by the reload', async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { free: FREE, old: WINDOW }, shards, clock: clock.now });
    const r = await limiter.reload({ free: { ...FREE, guard: 'global' }, global: { algorithm: 'token_bucket', limit: 3, period: '1m' } });
    expect(r).toMatchObject({ added: ['global'], removed: ['old'], changed: ['free'] });
    await expect(limiter.check({ policy: 'old', key: 'k', cost: 1 })).rejects.toMatchObject({ code: 'UNKNOWN_POLICY' });
    expect(await spend(limiter, 'free', 'a', 2) + await spend(limiter, 'free', 'b', 2)).toBe(3);
  });

  it('decides every check whole under one set while checks and reloads interleave', async () => {
    const clock = new ManualClock();
    const v = (limit: number): Record<string, PolicySpec> => ({
      p: { limits: [{ algorithm: 'token_bucket', limit, period: '1m', name: 'a' }, { algorithm: 'fixed_window', limit: limit + 1, period: '1m', name: 'b' }] },
    });
    limiter = await createLimiter({ policies: v(1000), shards, clock: clock.now });
    const pending: Array<Promise<{ limit: number }>> = [];
    const issuedUnder: number[] = [];
    for (let round = 0; round < 40; round++) {
      const limit = 1000 + (round % 4) * 1000;
      if (round > 0) void limiter.reload(v(limit));
      for (let i = 0; i < 25; i++) {
        pending.push(limiter.check({ policy: 'p', key: `k${i % 5}`, cost: 1 }));
        issuedUnder.push(limit);
      }
      if (round % 3 === 0) await Promise.resolve();
    }
    const ds = await Promise.all(pending);
    // the binding limit is the bucket (its limit is one below the window's): a check under set L reports L
    expect(ds.map((d) => d.limit)).toEqual(issuedUnder);
  });
});

describe.each([0, 2])('a strict check waiting on the store across reloads that free limit ids, shards %i', (shards) => {
  it('falls back (onStoreError: local) under its own set\'s numbers: the ids it names are not freed and set again meanwhile', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock: clock.now, time: 'limiter' });
    // the store holds the first call it is given until the test fails it
    let fail: ((e: Error) => void) | null = null;
    let hold = true;
    const held = Object.create(store) as Store;
    held.decideWide = (keys, args, now) => {
      if (!hold) return store.decideWide(keys, args, now);
      hold = false;
      return new Promise((_, reject) => (fail = reject));
    };
    const strict = (limit: number): PolicySpec => ({ algorithm: 'token_bucket', limit, period: '1d', consistency: 'strict', onStoreError: 'local' });
    const window = (limit: number): PolicySpec => ({ algorithm: 'fixed_window', limit, period: '1s' });
    limiter = await createLimiter({ policies: { s: strict(5), api: window(3) }, store: held, shards, clock: clock.now, maxKeys: 1024 });
    const waiting = limiter.check({ policy: 's', key: 'k', cost: 1 });
    await until(() => fail !== null);
    // its set is replaced, then more than half the limit table is taken: the reloads free what no key needs
    // (ids under which no kernel holds state, as the waiting check's), and the next ones take freed ids
    for (let i = 0; i < LIMIT_CAPACITY / 2 + 16; i++) {
      await limiter.reload({ s: strict(6), api: window(10 + i) });
      clock.advance(1000);
      await new Promise((r) => setImmediate(r));
    }
    fail!(new Error('store down'));
    expect(await waiting).toStrictEqual({
      allowed: true, limit: 5, remaining: 4, resetAfterMs: 86_400_000 / 5, retryAfterMs: 0, policy: 's', degraded: true, degradedBy: 'local',
    });
    // settled: the replaced sets' ids are freed from now on, and reloads go on with new numbers
    for (let i = 0; i < LIMIT_CAPACITY; i++) await limiter.reload({ s: strict(6), api: window(5000 + i) });
    expect(await spend(limiter, 'api', 'k', 5000 + LIMIT_CAPACITY)).toBe(5000 + LIMIT_CAPACITY - 1);
  }, 120_000);
});

async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i > 1000) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('policy set version', () => {
  it('is the same for the same rules, and changes with any field', async () => {
    const a = await createLimiter({ policies: { free: FREE, paid: PAID } });
    const b = await createLimiter({ policies: { paid: PAID, free: FREE } });
    const c = await createLimiter({ policies: { free: FREE, paid: { ...PAID, onStoreError: 'closed' } } });
    expect(a.version).toMatch(/^[0-9a-f]{12}$/);
    expect(b.version).toBe(a.version);
    expect(c.version).not.toBe(a.version);
    await c.reload({ free: FREE, paid: PAID });
    expect(c.version).toBe(a.version);
    await Promise.all([a.close(), b.close(), c.close()]);
  });
});

describe('LimitTable', () => {
  it('gives equal numbers one id, new numbers new ids, and never reuses one', () => {
    const t = new LimitTable(3);
    const first = t.plan(compilePolicies({ a: FREE, b: FREE, c: WINDOW }));
    expect(Object.fromEntries(first.ids)).toEqual({ a: [0], b: [0], c: [1] });
    t.commit(first);
    const second = t.plan(compilePolicies({ a: PAID, c: WINDOW }));
    expect(Object.fromEntries(second.ids)).toEqual({ a: [2], c: [1] });
    expect(second.added.map((x) => x.id)).toEqual([2]);
    t.commit(second);
    // back to FREE: its old id, whose meaning never changed
    expect(Object.fromEntries(t.plan(compilePolicies({ a: FREE })).ids)).toEqual({ a: [0] });
    expect(() => t.plan(compilePolicies({ a: { ...FREE, limit: 7 } }))).toThrow(/no room for more distinct limits \(3 ids/);
  });
});

describe('reload with the redis option', () => {
  it('adds a strict policy to a limiter that started with local policies only', async () => {
    const { sharedRedis, keysUnder } = await import('../../helpers/redis.js');
    const redis = await sharedRedis();
    try {
      const clock = new ManualClock();
      limiter = await createLimiter({ policies: { free: FREE }, clock: clock.now, redis: { url: redis.url, prefix: 'rl:', clock: 'limiter' } });
      expect(limiter.storeStatus()).toBe('connected');
      await limiter.reload({ free: FREE, shared: { algorithm: 'token_bucket', limit: 3, period: '1m', consistency: 'strict' } });
      expect(await spend(limiter, 'shared', 'acme', 5)).toBe(3);
      expect((await keysUnder(redis.client, 'rl:')).length).toBe(1);
      await limiter.close();
      limiter = undefined;
    } finally {
      await redis.stop();
    }
  });
});
