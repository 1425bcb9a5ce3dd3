/**
 * The engine's store-backed modes on the in-memory store (src/store/memory.ts), no redis-server: limiters that
 * share one MemoryStore share one quota in `strict` mode (exact numbers, a controlled clock), inspect and reset
 * go through the store contract, and `sync` policies merge their deltas into it behind the decisions.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { ManualClock } from '../../helpers/clock.js';

const open: Limiter[] = [];
afterEach(async () => {
  for (const l of open.splice(0)) await l.close();
});

async function limiter(store: MemoryStore, clock: ManualClock, consistency: 'strict' | 'sync'): Promise<Limiter> {
  const l = await createLimiter({
    policies: { api: { algorithm: 'fixed_window', limit: 5, period: '1m', consistency } },
    clock: clock.now, store, redis: { syncIntervalMs: 10 },
  });
  open.push(l);
  return l;
}

describe('strict mode on a MemoryStore', () => {
  it('two limiters sharing the store admit the limit once between them, and both see the denial', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ time: 'limiter', clock: clock.now });
    const [a, b] = [await limiter(store, clock, 'strict'), await limiter(store, clock, 'strict')];
    const check = (l: Limiter) => l.check({ policy: 'api', key: 't1', cost: 1 });
    const got = [];
    for (let i = 0; i < 4; i++) got.push(await check(a), await check(b));
    expect(got.map((d) => d.allowed)).toStrictEqual([true, true, true, true, true, false, false, false]);
    expect(got.map((d) => d.remaining)).toStrictEqual([4, 3, 2, 1, 0, 0, 0, 0]);
    expect(got[5]).toMatchObject({ allowed: false, resetAfterMs: 60_000, retryAfterMs: 60_000 });
    // the next window: a fresh quota
    clock.advance(60_000);
    expect(await check(b)).toMatchObject({ allowed: true, remaining: 4 });
  });

  it('inspect reads the state from the store; reset removes it there', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ time: 'limiter', clock: clock.now });
    const a = await limiter(store, clock, 'strict');
    await a.check({ policy: 'api', key: 't1', cost: 3 });
    const s = await a.inspect({ policy: 'api', key: 't1' });
    expect([s.source, s.limits[0].held, s.limits[0].count, s.limits[0].remaining]).toStrictEqual(['redis', true, 3, 2]);
    expect(await a.reset({ policy: 'api', key: 't1' })).toStrictEqual({ removed: 1 });
    expect((await a.inspect({ policy: 'api', key: 't1' })).limits[0]).toMatchObject({ held: false, count: 0, remaining: 5 });
  });
});

describe('sync mode on a MemoryStore', () => {
  it('merges each limiter\'s admitted cost into the store, and each learns the other\'s', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ time: 'limiter', clock: clock.now });
    const [a, b] = [await limiter(store, clock, 'sync'), await limiter(store, clock, 'sync')];
    expect((await a.check({ policy: 'api', key: 't1', cost: 2 })).remaining).toBe(3);
    expect((await b.check({ policy: 'api', key: 't1', cost: 1 })).remaining).toBe(4);
    // Each merges its delta every 10 ms of real time; the second to merge gets the shared count back: 3 of 5
    // spent (write-behind: a limiter learns the shared state when it merges a key it touched).
    let informed: Limiter | null = null;
    for (const end = Date.now() + 2000; informed === null && Date.now() < end;) {
      await new Promise((r) => setTimeout(r, 10));
      for (const l of [a, b]) if ((await l.inspect({ policy: 'api', key: 't1' })).limits[0].count === 3) informed = l;
    }
    expect(informed).not.toBeNull();
    expect(await informed!.check({ policy: 'api', key: 't1', cost: 2 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await informed!.check({ policy: 'api', key: 't1', cost: 1 })).toMatchObject({ allowed: false, remaining: 0 });
  });
});
