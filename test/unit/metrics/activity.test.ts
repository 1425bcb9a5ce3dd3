import { describe, expect, it } from 'vitest';
import { Activity } from '../../../src/metrics/activity.js';

const known = (name: string): boolean => name === 'p' || name === 'q';

describe('Activity (per-policy rates, near-limit, hot keys)', () => {
  it('counts admitted, denied and degraded per second in a ring, oldest first', () => {
    let now = 60_000;
    const a = new Activity(known, { windowSeconds: 3, timer: false, clock: () => now });
    a.record('p', 'k1', true, false, 9, 10);
    a.record('p', 'k1', false, false, 0, 10);
    now += 1000;
    a.tick();
    a.record('p', 'k2', true, true, 0, 10); // degraded open: admitted, not near-limit (its 0 left says nothing)
    a.record('q', undefined, false, true, 0, 5);
    expect(a.snapshot()).toStrictEqual({
      at: 61_000,
      intervalMs: 1000,
      policies: {
        p: { admitted: [0, 1, 1], denied: [0, 1, 0], degraded: [0, 0, 1], checks: 3, deniedTotal: 1, nearLimit: 0 },
        q: { admitted: [0, 0, 0], denied: [0, 0, 1], degraded: [0, 0, 1], checks: 1, deniedTotal: 1, nearLimit: 0 },
      },
    });
    a.tick();
    a.tick(); // the first second falls out of the window
    expect(a.snapshot().policies.p).toStrictEqual({ admitted: [1, 0, 0], denied: [0, 0, 0], degraded: [1, 0, 0], checks: 3, deniedTotal: 1, nearLimit: 0 });
  });

  it('counts a check as near-limit when it leaves less than 20 % of the limit', () => {
    const a = new Activity(known, { timer: false });
    a.record('p', 'k', true, false, 2, 10); // 20 % left: not near
    a.record('p', 'k', true, false, 1, 10); // 10 % left
    a.record('p', 'k', false, false, 0, 10); // denied: not counted as near-limit
    a.record('q', 'k', true, false, 19, 100);
    expect([...a.nearLimit()]).toStrictEqual([['p', 1], ['q', 1]]);
  });

  it('keeps hot keys per policy, and nothing for names that are not policies', () => {
    const a = new Activity(known, { hotKeys: 2, timer: false });
    for (let i = 0; i < 5; i++) a.record('p', 'tenant-a', i < 3, false, 1, 10);
    a.record('p', 'tenant-b', true, false, 1, 10);
    a.record('p', 'tenant-c', false, false, 1, 10);
    a.record('nope', 'x', true, false, 1, 10);
    expect(a.hot('p', 10)).toStrictEqual([
      { key: 'tenant-a', checks: 5, denied: 2, error: 0, share: 5 / 7 },
      { key: 'tenant-c', checks: 2, denied: 1, error: 1, share: 2 / 7 },
    ]);
    expect(a.hotTotals('p')).toStrictEqual({ checks: 7, errorBound: 2 });
    expect(a.hot('q', 10)).toStrictEqual([]);
    expect(a.hot('nope', 10)).toBeUndefined();
    expect(a.policies()).toStrictEqual(['p']);
  });

  it('with hotKeys 0 counts rates but keeps no keys', () => {
    const a = new Activity(known, { hotKeys: 0, timer: false });
    a.record('p', 'k', true, false, 5, 10);
    expect(a.wantsKeys()).toBe(false);
    expect(a.hot('p', 10)).toStrictEqual([]);
    expect(a.snapshot().policies.p.checks).toBe(1);
  });

  it('refuses out-of-range options', () => {
    expect(() => new Activity(known, { hotKeys: -1, timer: false })).toThrow('hotKeys: must be an integer from 0 to 100000 (got -1)');
    expect(() => new Activity(known, { windowSeconds: 1, timer: false })).toThrow('windowSeconds: must be an integer from 2 to 3600 (got 1)');
  });
});
