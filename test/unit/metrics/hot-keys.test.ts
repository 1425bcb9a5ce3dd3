import { describe, expect, it } from 'vitest';
import { SpaceSaving } from '../../../src/metrics/hot-keys.js';
import { prng } from '../../helpers/prng.js';

describe('SpaceSaving (hot keys)', () => {
  it('counts exactly until the table is full, then a new key takes over the smallest entry', () => {
    const s = new SpaceSaving(3);
    for (const [k, denied] of [['a', false], ['a', true], ['a', false], ['b', false], ['b', true], ['c', true]] as const) s.add(k, denied);
    expect(s.minCount()).toBe(1);
    expect(s.top()).toStrictEqual([
      { key: 'a', checks: 3, denied: 1, error: 0, share: 3 / 6 },
      { key: 'b', checks: 2, denied: 1, error: 0, share: 2 / 6 },
      { key: 'c', checks: 1, denied: 1, error: 0, share: 1 / 6 },
    ]);
    s.add('d', false); // takes over c (count 1): 1 + 1 = 2, error 1, denials counted from now
    expect(s.top()).toStrictEqual([
      { key: 'a', checks: 3, denied: 1, error: 0, share: 3 / 7 },
      { key: 'b', checks: 2, denied: 1, error: 0, share: 2 / 7 },
      { key: 'd', checks: 2, denied: 0, error: 1, share: 2 / 7 },
    ]);
    expect(s.total).toBe(7);
    expect(s.minCount()).toBe(2);
    s.add('c', true); // evicted before: takes over the heap's root, d (count 2), as 3 with error 2
    expect(s.top()).toStrictEqual([
      { key: 'a', checks: 3, denied: 1, error: 0, share: 3 / 8 },
      { key: 'c', checks: 3, denied: 1, error: 2, share: 3 / 8 },
      { key: 'b', checks: 2, denied: 1, error: 0, share: 2 / 8 },
    ]);
    expect(s.top(1)).toStrictEqual([{ key: 'a', checks: 3, denied: 1, error: 0, share: 3 / 8 }]);
    expect(s.length).toBe(3);
  });

  it('keeps a heavy hitter through a flood of distinct keys', () => {
    const s = new SpaceSaving(4);
    for (let i = 0; i < 1000; i++) {
      s.add('hot', i % 2 === 0);
      s.add(`cold-${i}`, false);
    }
    const [first] = s.top(1);
    expect(first.key).toBe('hot');
    // hot was never evicted (its count stays above every other entry's): exact
    expect(first).toStrictEqual({ key: 'hot', checks: 1000, denied: 500, error: 0, share: 0.5 });
    expect(s.total).toBe(2000);
  });

  it('holds the Space-Saving bounds on a skewed random stream: true count in [checks - error, checks], error <= N/K, every key above N/K monitored', () => {
    const rand = prng(18);
    const K = 20;
    const s = new SpaceSaving(K);
    const truth = new Map<string, { checks: number; denied: number }>();
    const N = 20_000;
    for (let i = 0; i < N; i++) {
      // Zipf-like: key j with weight 1/(j+1) over 500 keys
      const u = rand();
      const j = Math.floor(500 ** u) - 1;
      const key = `k${j}`;
      const denied = rand() < 0.3;
      s.add(key, denied);
      const t = truth.get(key) ?? { checks: 0, denied: 0 };
      t.checks++;
      if (denied) t.denied++;
      truth.set(key, t);
    }
    expect(s.total).toBe(N);
    const top = s.top();
    expect(top.length).toBe(K);
    const monitored = new Set(top.map((h) => h.key));
    expect(monitored.size).toBe(K); // no key held twice
    for (const h of top) {
      const t = truth.get(h.key)!;
      expect(h.error).toBeLessThanOrEqual(s.minCount());
      expect(h.error).toBeLessThanOrEqual(N / K);
      expect(t.checks).toBeLessThanOrEqual(h.checks);
      expect(t.checks).toBeGreaterThanOrEqual(h.checks - h.error);
      expect(t.denied).toBeGreaterThanOrEqual(h.denied);
      expect(t.denied).toBeLessThanOrEqual(h.denied + h.error);
    }
    for (const [key, t] of truth) if (t.checks > N / K) expect(monitored.has(key)).toBe(true);
    // the sum of counts is N: Space-Saving's counts always add up to the stream length
    expect(top.reduce((a, h) => a + h.checks, 0)).toBe(N);
  });

  it('finds every key again through collisions, take-overs and backward-shift deletions (a long uniform churn)', () => {
    const rand = prng(7);
    for (const K of [1, 2, 3, 7, 64]) {
      const s = new SpaceSaving(K);
      const N = 30_000;
      for (let i = 0; i < N; i++) s.add(`key-${Math.floor(rand() * 5 * K)}-${'x'.repeat(i % 3 === 0 ? 40 : 0)}`, false);
      const top = s.top();
      expect(new Set(top.map((h) => h.key)).size).toBe(K);
      expect(top.reduce((a, h) => a + h.checks, 0)).toBe(N);
      // each monitored key is found (not inserted again) by its next check
      const before = new Map(top.map((h) => [h.key, h.checks]));
      const [k] = before.keys();
      s.add(k, false);
      expect(s.top().find((h) => h.key === k)!.checks).toBe(before.get(k)! + 1);
      expect(s.length).toBe(K);
    }
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(() => new SpaceSaving(0)).toThrow('hot keys capacity: must be a positive integer (got 0)');
    expect(() => new SpaceSaving(1.5)).toThrow(RangeError);
  });

  it('clear() forgets every key', () => {
    const s = new SpaceSaving(2);
    s.add('a', false);
    s.clear();
    s.add('b', true);
    expect(s.top()).toStrictEqual([{ key: 'b', checks: 1, denied: 1, error: 0, share: 1 }]);
  });
});
