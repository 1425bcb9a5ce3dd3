/**
 * UNIQUE_KEY (src/store/contract.ts): the strict decider adds it to the algorithm code of a check of one leg
 * whose key no other check of the same script call names, and to nothing else; lua/check.lua's UNIQUE is the
 * same number, above every algorithm code. The calls are caught on a MemoryStore (which decides a marked leg
 * as an unmarked one): each check of a turn, in order, with the algorithm codes the store was handed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { UNIQUE_KEY, type Store } from '../../../src/store/contract.js';
import { ALGORITHM_CODES, CALENDAR_WINDOW_CODE } from '../../../src/config/policy-spec.js';
import { packageRoot } from '../../../src/util/paths.js';

const tb = { algorithm: 'token_bucket' as const, limit: 10, period: 60_000, consistency: 'strict' as const };

/** A limiter on a MemoryStore that records the algorithm codes of every script call's legs. */
async function recording(): Promise<{ l: Limiter; calls: number[][] }> {
  const store = new MemoryStore({ clock: () => 1_000_000, overLimitCache: false });
  const calls: number[][] = [];
  const spy = Object.create(store) as Store;
  spy.decideWide = (keys, args, now) => {
    calls.push(keys.map((_, j) => args[6 * j]));
    return store.decideWide(keys, args, now);
  };
  const l = await createLimiter({
    policies: {
      one: tb,
      other: { ...tb, algorithm: 'gcra' },
      two: { limits: [{ algorithm: 'token_bucket', limit: 10, period: 60_000 }, { algorithm: 'fixed_window', limit: 100, period: 3_600_000 }], consistency: 'strict' },
      all: tb,
      guarded: { ...tb, guard: 'all' },
    },
    store: spy, clock: () => 1_000_000,
  });
  return { l, calls };
}

describe('UNIQUE_KEY', () => {
  it('is lua/check.lua\'s UNIQUE, above every algorithm code', () => {
    const lua = readFileSync(join(packageRoot(), 'lua', 'check.lua'), 'utf8');
    expect(Number(/^local UNIQUE = (\d+)$/m.exec(lua)?.[1])).toBe(UNIQUE_KEY);
    expect(UNIQUE_KEY).toBe(16);
    for (const code of [...Object.values(ALGORITHM_CODES), CALENDAR_WINDOW_CODE]) expect(code).toBeLessThan(UNIQUE_KEY);
  });

  it('marks each check of one leg on a key no other check of the call names, whatever its algorithm', async () => {
    const { l, calls } = await recording();
    try {
      const checks = [['one', 'a'], ['one', 'b'], ['other', 'a']].map(([policy, key]) => l.check({ policy, key, cost: 1 }));
      expect((await Promise.all(checks)).map((d) => d.allowed)).toEqual([true, true, true]);
      // token bucket 0, GCRA 1: a key of another policy is another key
      expect(calls).toEqual([[16, 16, 17]]);
    } finally {
      await l.close();
    }
  });

  it('marks no check of a key named twice in the call, nor a third time', async () => {
    const { l, calls } = await recording();
    try {
      const checks = [['one', 'a'], ['one', 'b'], ['one', 'a'], ['one', 'c'], ['one', 'a']].map(([policy, key]) => l.check({ policy, key, cost: 1 }));
      expect((await Promise.all(checks)).map((d) => d.remaining)).toEqual([9, 9, 8, 9, 7]);
      expect(calls).toEqual([[0, 16, 0, 16, 0]]);
      // the next call starts afresh
      expect((await l.check({ policy: 'one', key: 'a', cost: 1 })).remaining).toBe(6);
      expect(calls[1]).toEqual([16]);
    } finally {
      await l.close();
    }
  });

  it('marks no leg of a check of several limits, of a guarded check, nor a check on the guard itself', async () => {
    const { l, calls } = await recording();
    try {
      const checks = [['two', 'x'], ['guarded', 'y'], ['all', '*'], ['one', 'z']].map(([policy, key]) => l.check({ policy, key, cost: 1 }));
      expect((await Promise.all(checks)).every((d) => d.allowed)).toBe(true);
      // two: token bucket + fixed window (2); guarded: its own leg + the guard's; all on '*': the guard's key
      expect(calls).toEqual([[0, 2, 0, 0, 0, 16]]);
    } finally {
      await l.close();
    }
  });
});
