/**
 * How the strict decider cuts a turn into script calls (README, "Redis: one quota across instances"): while
 * fewer than `redis.pipelineCalls` calls are in flight, a turn is split into that many calls of at least 16
 * checks (a turn of 64 into 2 of 32); a turn too small for two such calls goes as one. The calls are caught
 * on a MemoryStore given the Redis store's default of 2 calls in flight (its own is 1).
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import type { Store } from '../../../src/store/contract.js';

const tb = { algorithm: 'token_bucket' as const, limit: 10, period: 60_000, consistency: 'strict' as const };

/** The checks of each script call made for one turn of `n` checks on distinct keys, `calls` in flight at most. */
async function split(n: number, calls: number): Promise<number[]> {
  const store = new MemoryStore({ clock: () => 1_000_000, overLimitCache: false });
  const sizes: number[] = [];
  const spy = Object.create(store) as Store;
  Object.defineProperty(spy, 'pipelineCalls', { value: calls });
  spy.decideWide = (keys, args, now) => {
    sizes.push(keys.length);
    return store.decideWide(keys, args, now);
  };
  const l = await createLimiter({ policies: { p: tb }, store: spy, clock: () => 1_000_000 });
  try {
    const ds = await Promise.all(Array.from({ length: n }, (_, i) => l.check({ policy: 'p', key: `k${i}`, cost: 1 })));
    expect(ds.every((d) => d.allowed && !d.degraded)).toBe(true);
    return sizes;
  } finally {
    await l.close();
  }
}

describe('a turn of strict checks split into script calls', () => {
  it('splits a turn into pipelineCalls calls of at least 16 checks', async () => {
    expect(await split(64, 2)).toEqual([32, 32]);
    expect(await split(40, 2)).toEqual([20, 20]);
    expect(await split(33, 2)).toEqual([17, 16]);
    expect(await split(32, 2)).toEqual([16, 16]);
    expect(await split(48, 3)).toEqual([16, 16, 16]);
    expect(await split(64, 3)).toEqual([22, 22, 20]);
  });

  it('sends a turn too small for two calls of 16 as one call, never a call under 16 beside another', async () => {
    for (const n of [16, 17, 20, 31]) expect(await split(n, 2), `a turn of ${n}`).toEqual([n]);
    // three calls of 16 do not fit in 47 or 49 without a short last one: two
    expect(await split(47, 3)).toEqual([24, 23]);
    expect(await split(49, 3)).toEqual([25, 24]);
    for (const n of [1, 16, 17, 64]) expect(await split(n, 1), `a turn of ${n}, one call allowed`).toEqual([n]);
  });
});
