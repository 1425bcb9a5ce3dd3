/**
 * Limiter.checkSync (src/engine/sync-check.ts): check() as a function call for shards 0 and policies decided
 * in this process. It must decide exactly what check() decides on the same checks at the same times, throw
 * what check() rejects with, and refuse with NOT_SYNCHRONOUS what it cannot decide on the calling thread.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import type { CheckRequest, Decision } from '../../../src/types/decision.js';
import type { Limiter } from '../../../src/types.js';
import type { PolicySpec } from '../../../src/config/policy-spec.js';
import { ManualClock } from '../../helpers/clock.js';

const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

async function limiter(policies: Record<string, PolicySpec>, clock: ManualClock, extra: object = {}): Promise<Limiter> {
  const l = await createLimiter({ policies, clock: clock.now, maxKeys: 64, ...extra });
  open.push(l);
  return l;
}

/** Every algorithm, several limits, a guard, descriptors, lists (the front's path) and a tiny table (evictions). */
const POLICIES: Record<string, PolicySpec> = {
  tb: { algorithm: 'token_bucket', limit: 5, period: 1_000, burst: 7 },
  gcra: { algorithm: 'gcra', limit: 3, period: 900, burst: 2 },
  fw: { algorithm: 'fixed_window', limit: 4, period: 2_000 },
  sw: { algorithm: 'sliding_window', limit: 6, period: 1_500 },
  log: { algorithm: 'sliding_log', limit: 3, period: 1_000 },
  multi: { limits: [{ algorithm: 'token_bucket', limit: 10, period: 10_000 }, { algorithm: 'fixed_window', limit: 3, period: 1_000 }] },
  tenant: { algorithm: 'token_bucket', limit: 4, period: 1_000, descriptors: ['tenant', 'action'], guard: 'global' },
  global: { algorithm: 'token_bucket', limit: 9, period: 1_000 },
  listed: { algorithm: 'fixed_window', limit: 2, period: 1_000, allow: ['vip'], deny: ['bad'] },
};
const NAMES = Object.keys(POLICIES);
const KEYS = ['a', 'b', 'c', 'vip', 'bad', 'k-é', 'tenant-42'];

function xorshift(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
}

function randomCheck(next: () => number): CheckRequest {
  const policy = NAMES[next() % NAMES.length];
  const cost = next() % 5 === 0 ? 0 : 1 + (next() % 3);
  if (policy === 'tenant') {
    return { policy, descriptors: { tenant: KEYS[next() % KEYS.length], action: next() % 2 === 0 ? 'read' : 'a:b' }, cost };
  }
  // 120 distinct keys over a 64-key table: evictions happen in both limiters alike
  return { policy, key: next() % 3 === 0 ? `n${next() % 120}` : KEYS[next() % KEYS.length], cost };
}

describe('checkSync decides exactly what check() decides', () => {
  it('on 4,000 seeded checks over every algorithm, a guard, lists, evictions and a moving clock', async () => {
    const ca = new ManualClock(), cb = new ManualClock();
    const a = await limiter(POLICIES, ca), b = await limiter(POLICIES, cb);
    const next = xorshift(0x5eed);
    for (let i = 0; i < 4_000; i++) {
      const step = next() % 4 === 0 ? next() % 700 : 0;
      ca.advance(step);
      cb.advance(step);
      const req = randomCheck(next);
      const expected = await a.check(req);
      expect(b.checkSync(req), `check ${i}: ${JSON.stringify(req)}`).toStrictEqual(expected);
    }
    const [sa, sb] = [await a.stats(), await b.stats()];
    expect(sb.keys).toBe(sa.keys);
    expect(sb.evictions).toBe(sa.evictions);
    expect(sa.evictions).toBeGreaterThan(0);
  });

  it('a hot key decided again and again (the hash is reused) and after a reload (it is not)', async () => {
    const ca = new ManualClock(), cb = new ManualClock();
    const p = { tb: { algorithm: 'token_bucket', limit: 3, period: 3_000 } } as const;
    const a = await limiter(p, ca), b = await limiter(p, cb);
    const hot = { policy: 'tb', key: 'hot', cost: 1 };
    const got: Decision[] = [];
    for (let i = 0; i < 5; i++) got.push(b.checkSync(hot));
    expect(got.map((d) => [d.allowed, d.remaining, d.retryAfterMs])).toStrictEqual([[true, 2, 0], [true, 1, 0], [true, 0, 0], [false, 0, 1_000], [false, 0, 1_000]]);
    for (let i = 0; i < 5; i++) await a.check(hot);
    // same limits, a pinned version bumped: every key starts afresh, under another hash seed
    const next = { tb: { ...p.tb, version: '2' } };
    await a.reload(next);
    await b.reload(next);
    for (const t of [0, 400, 1_000, 2_500]) {
      ca.advance(t);
      cb.advance(t);
      expect(b.checkSync(hot)).toStrictEqual(await a.check(hot));
    }
  });

  it('after the check()s already queued this turn, in order', async () => {
    const l = await limiter({ fw: { algorithm: 'fixed_window', limit: 2, period: 60_000 } }, new ManualClock());
    const first = l.check({ policy: 'fw', key: 'k', cost: 1 });
    expect(l.checkSync({ policy: 'fw', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(l.checkSync({ policy: 'fw', key: 'k', cost: 1 })).toMatchObject({ allowed: false, remaining: 0 });
    expect(await first).toMatchObject({ allowed: true, remaining: 1 });
  });
});

describe('checkSync errors', () => {
  it('throws what check() rejects with, and changes nothing', async () => {
    const l = await limiter(POLICIES, new ManualClock());
    for (const req of [
      null,
      { policy: 'nope', key: 'k', cost: 1 },
      { policy: 7, key: 'k', cost: 1 },
      { policy: 'tb', key: '', cost: 1 },
      { policy: 'tb', key: 'x'.repeat(1_025), cost: 1 },
      { policy: 'tb', key: '\ud800', cost: 1 },
      { policy: 'tb', key: 'k', cost: -1 },
      { policy: 'tb', key: 'k', cost: 1.5 },
      { policy: 'tb', cost: 1 },
      { policy: 'tenant', descriptors: { tenant: 'x' }, cost: 1 },
      { policy: 'tenant', descriptors: { tenant: 'x', action: 'y', extra: 'z' }, cost: 1 },
    ] as unknown as CheckRequest[]) {
      let thrown: unknown;
      try {
        l.checkSync(req);
      } catch (e) {
        thrown = e;
      }
      const rejected = await l.check(req).then(() => undefined, (e: unknown) => e);
      expect(thrown, JSON.stringify(req)).toBeInstanceOf(Error);
      expect({ ...(thrown as object), message: (thrown as Error).message })
        .toStrictEqual({ ...(rejected as object), message: (rejected as Error).message });
    }
    expect(l.checkSync({ policy: 'tb', key: 'k', cost: 0 })).toMatchObject({ allowed: true, remaining: 7 });
  });

  it('throws CLOCK when the clock misbehaves, as check() rejects', async () => {
    let t: number = 1_000;
    const l = await createLimiter({ policies: POLICIES, clock: () => t });
    open.push(l);
    t = 1.5;
    expect(() => l.checkSync({ policy: 'tb', key: 'k', cost: 1 })).toThrow(expect.objectContaining({ code: 'CLOCK' }));
    await expect(l.check({ policy: 'tb', key: 'k', cost: 1 })).rejects.toMatchObject({ code: 'CLOCK' });
  });

  it('refuses a limiter with shards with NOT_SYNCHRONOUS (field shards)', async () => {
    const l = await createLimiter({ policies: POLICIES, shards: 1 });
    open.push(l);
    expect(() => l.checkSync({ policy: 'tb', key: 'k', cost: 1 })).toThrow(expect.objectContaining({ code: 'NOT_SYNCHRONOUS', field: 'shards', status: 500 }));
    expect(await l.check({ policy: 'tb', key: 'k', cost: 0 })).toMatchObject({ remaining: 7 });
  });

  it('refuses a strict policy with NOT_SYNCHRONOUS (field policy), after validating the request', async () => {
    const { sharedRedis } = await import('../../helpers/redis.js');
    const redis = await sharedRedis();
    try {
      const l = await createLimiter({
        policies: { ...POLICIES, shared: { algorithm: 'token_bucket', limit: 3, period: '1m', consistency: 'strict' } },
        redis: { url: redis.url, prefix: 'cs:' },
      });
      open.push(l);
      expect(() => l.checkSync({ policy: 'shared', key: 'k', cost: 1 })).toThrow(expect.objectContaining({ code: 'NOT_SYNCHRONOUS', field: 'policy' }));
      expect(() => l.checkSync({ policy: 'shared', key: 'k', cost: -1 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'cost' }));
      // the local policies of the same limiter are decided
      expect(l.checkSync({ policy: 'tb', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 6 });
      await l.close();
    } finally {
      await redis.stop();
    }
  });

  it('throws CLOSED after close()', async () => {
    const l = await createLimiter({ policies: POLICIES });
    await l.close();
    expect(() => l.checkSync({ policy: 'tb', key: 'k', cost: 1 })).toThrow(expect.objectContaining({ code: 'CLOSED' }));
  });
});
