/**
 * The limit-id table cannot be exhausted by reloads (issue #20, item 4): ids no policy uses are freed once no
 * key's state under them carries information (Kernel.purgeLimit), and an id whose keys still hold state keeps
 * its meaning. Exact counts on a controlled clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type PolicySpec } from '../../../src/index.js';
import { LimitTable } from '../../../src/engine/limits.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { Kernel, kernelModule, LIMIT_CAPACITY, STATE_ROW } from '../../../src/shard/kernel.js';
import { ManualClock } from '../../helpers/clock.js';
import { spend } from '../../helpers/limiter.js';

const window = (limit: number): PolicySpec => ({ algorithm: 'fixed_window', limit, period: '1s' });

let limiter: Limiter | undefined;
afterEach(async () => {
  await limiter?.close();
  limiter = undefined;
});

describe.each([0, 2])('reloads with new numbers, shards %i', (shards) => {
  it(`${2 * LIMIT_CAPACITY} reloads, each with numbers never seen, all apply; decisions stay exact`, async () => {
    const clock = new ManualClock();
    limiter = await createLimiter({ policies: { api: window(3) }, shards, clock: clock.now, maxKeys: 1024 });
    for (let i = 0; i < 2 * LIMIT_CAPACITY; i++) {
      await limiter.reload({ api: window(10 + i) });
      expect(await spend(limiter, 'api', 'k', 2)).toBe(2);
      clock.advance(1000); // the window ends: the key's state under this id carries nothing any more
    }
    expect((await limiter.check({ policy: 'api', key: 'k', cost: 0 })).limit).toBe(10 + 2 * LIMIT_CAPACITY - 1);
  }, 120_000);
});

describe('a retired id whose keys hold state keeps its meaning', () => {
  it('is not freed while a key under it is over its limit, and is freed once that key is idle', () => {
    const t = new LimitTable(3);
    const kernel = new Kernel(kernelModule(), { maxKeys: 64, maxBatch: 64, limits: [], limitCapacity: 3 });
    const take = (policies: Record<string, PolicySpec>): Map<string, number[]> => {
      const p = t.plan(compilePolicies(policies));
      for (const { id, limit } of p.added) kernel.setLimit(id, limit);
      t.commit(p);
      return p.ids;
    };
    const a = take({ api: window(5) }).get('api')![0];
    // a key under id a, spent to its limit at t = 1,000,000 (state: count 5 in its window)
    kernel.legIn.set([1, 2, a, 5, 0, 1_000_000]);
    kernel.setState(1, 1_000_000);
    expect(STATE_ROW).toBe(6);
    const inUse = take({ api: window(6) }); // api moves to another id; a is retired
    const b = inUse.get('api')![0];
    take({ api: window(7) });
    expect(t.retired(new Map([['api', [2]]]))).toStrictEqual([a, b]);
    // at 1,000,500 the key's window is not over: a is not free, b (no keys) is
    expect([kernel.purgeLimit(a, 1_000_500), kernel.purgeLimit(b, 1_000_500)]).toStrictEqual([1, 0]);
    t.release(b);
    expect(Object.fromEntries(t.plan(compilePolicies({ api: window(8) })).ids)).toStrictEqual({ api: [b] });
    expect(() => t.plan(compilePolicies({ api: window(8), other: window(9) }))).toThrow(/no room for more distinct limits \(3 ids/);
    // back to the old numbers: the old id, and its key's state read under them
    expect(Object.fromEntries(t.plan(compilePolicies({ api: window(5) })).ids)).toStrictEqual({ api: [a] });
    // once the window is over, a is freed and the key under it removed
    expect(kernel.purgeLimit(a, 1_001_000)).toBe(0);
    expect(kernel.stats().keys).toBe(0);
  });
});
