/**
 * gcra in the kernel. The state is a theoretical arrival time TAT kept as whole ms plus a fraction (frac/L),
 * so an emission interval of P/L ms never rounds; it must give exactly the token bucket's numbers
 * (debt = (TAT − t)·L = B·P − x). Expectations are hand-computed; a randomized run at the end compares it
 * with token_bucket leg for leg.
 */
import { describe, expect, it } from 'vitest';
import {
  MAX_SAFE, GCRA, TOKEN_BUCKET, FIXED_WINDOW,
  allow, check, deny, group, lim, never, newKernel, peek,
} from './harness.js';

const THIRDS = 0; // L 3 / 1000 ms: one token every 333⅓ ms
const G10 = 1; // L 10 / 1000 ms
const ZERO = 2;
const BIG_RATE = 3; // L 2^53−1 / 1000 ms
const SLOW = 4; // L 1 / 2^53−1 ms
const HUGE_P = 5; // L = B = 1024 / 2^53−1 ms
const HUGE_L = 6; // L 2^53−1 / 1 ms
const NARROW = 7; // L 10 / 1000 ms, B 1
const FW = 8;

const LIMITS = [
  lim(GCRA, 3, 1000),
  lim(GCRA, 10, 1000),
  lim(GCRA, 0, 1000),
  lim(GCRA, MAX_SAFE, 1000),
  lim(GCRA, 1, MAX_SAFE),
  lim(GCRA, 1024, MAX_SAFE),
  lim(GCRA, MAX_SAFE, 1),
  lim(GCRA, 10, 1000, 1),
  lim(FIXED_WINDOW, 2, 1000),
];
const t0 = 1_000_000;
const fresh = () => newKernel(LIMITS);

describe('gcra: exact emission intervals', () => {
  it('one token per 333⅓ ms: the fraction of the TAT is carried, never rounded away', () => {
    const k = fresh();
    // debt after = 1000 (one token·P): TAT = t0 + 333 + 1/3
    expect(check(k, 1, THIRDS, 1, t0)).toStrictEqual(allow(2, 334));
    expect(check(k, 1, THIRDS, 2, t0)).toStrictEqual(allow(0, 1000)); // TAT = t0 + 1000
    // at +333: debt = 667·3 = 2001 > 3000 − 1000: one token is 1/3 ms away
    expect(check(k, 1, THIRDS, 1, t0 + 333)).toStrictEqual(deny(0, 667, 1));
    expect(check(k, 1, THIRDS, 1, t0 + 334)).toStrictEqual(allow(0, 1000)); // debt 1998 + 1000 = 2998
    // TAT = t0 + 334 + 2998/3 = t0 + 1333⅓: at t0 + 667, debt = 666·3 + 1 = 1999
    expect(peek(k, 1, THIRDS, t0 + 667)).toStrictEqual(allow(1, 667));
    expect(check(k, 1, THIRDS, 1, t0 + 667)).toStrictEqual(allow(0, 1000)); // debt 2999: TAT = t0 + 1666⅔
    // debt = 667·3 + 2 = 2003: 3 short of a token → 1 ms (the token bucket's x = 997)
    expect(check(k, 1, THIRDS, 1, t0 + 999)).toStrictEqual(deny(0, 668, 1));
    expect(peek(k, 1, THIRDS, t0 + 1667)).toStrictEqual(allow(3, 0));
  });

  it('same numbers as the token bucket for L 10 / 1000 ms', () => {
    const k = fresh();
    expect(check(k, 1, G10, 1, t0)).toStrictEqual(allow(9, 100));
    expect(check(k, 1, G10, 9, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, G10, 1, t0)).toStrictEqual(deny(0, 1000, 100));
    expect(check(k, 1, G10, 1, t0 + 99)).toStrictEqual(deny(0, 901, 1));
    expect(check(k, 1, G10, 1, t0 + 100)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, G10, 2, t0 + 250)).toStrictEqual(deny(1, 850, 50));
    expect(check(k, 1, G10, 1, t0 + 250)).toStrictEqual(allow(0, 950));
    expect(peek(k, 1, G10, t0 + 5000)).toStrictEqual(allow(10, 0));
  });

  it('burst below the limit (B 1)', () => {
    const k = fresh();
    expect(check(k, 1, NARROW, 1, t0)).toStrictEqual(allow(0, 100));
    expect(check(k, 1, NARROW, 1, t0 + 50)).toStrictEqual(deny(0, 50, 50));
    expect(check(k, 1, NARROW, 2, t0 + 50)).toStrictEqual(never(0, 50));
    expect(check(k, 1, NARROW, 1, t0 + 100)).toStrictEqual(allow(0, 100));
  });
});

describe('gcra: time going backwards, peeks and denials', () => {
  it('a check earlier than the last admitted one is decided as at that last time', () => {
    const k = fresh();
    expect(check(k, 1, G10, 10, t0 + 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, G10, 1, t0)).toStrictEqual(deny(0, 1000, 100));
    expect(check(k, 1, G10, 1, t0 + 1100)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, G10, 1, t0 + 1050)).toStrictEqual(deny(0, 1000, 100));
    expect(check(k, 1, G10, 1, t0 + 1199)).toStrictEqual(deny(0, 901, 1));
    expect(check(k, 1, G10, 1, t0 + 1200)).toStrictEqual(allow(0, 1000));
  });

  it('a peek changes nothing, not even the last-seen time', () => {
    const k = fresh();
    expect(check(k, 1, G10, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(peek(k, 1, G10, t0 + 500)).toStrictEqual(allow(5, 500));
    expect(check(k, 1, G10, 3, t0 + 300)).toStrictEqual(allow(0, 1000));
    expect(peek(k, 9, G10, t0)).toStrictEqual(allow(10, 0));
    expect(k.stats().keys).toBe(1);
  });

  it('a denied check changes nothing, not even the last-seen time', () => {
    const k = fresh();
    expect(check(k, 1, G10, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, G10, 8, t0 + 500)).toStrictEqual(deny(5, 500, 300));
    expect(check(k, 1, G10, 3, t0 + 300)).toStrictEqual(allow(0, 1000));
  });

  it('cost > burst is NEVER with retry −1; limit 0 denies for good and stores nothing', () => {
    const k = fresh();
    expect(check(k, 1, G10, 4, t0)).toStrictEqual(allow(6, 400));
    expect(check(k, 1, G10, 11, t0)).toStrictEqual(never(6, 400));
    expect(check(k, 1, G10, 6, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, ZERO, 1, 0)).toStrictEqual(never(0, 0));
    expect(check(k, 2, ZERO, 5, 1_000_000_000)).toStrictEqual(never(0, 0));
    expect(peek(k, 2, ZERO, 1_000_000_000)).toStrictEqual(allow(0, 0));
    expect(k.stats().keys).toBe(1);
  });
});

describe('gcra: huge values stay exact', () => {
  it('limit 2^53−1 per second (shared case 13 table)', () => {
    const k = fresh();
    expect(check(k, 1, BIG_RATE, MAX_SAFE, 0)).toStrictEqual(allow(0, 1000));
    expect(peek(k, 1, BIG_RATE, 1)).toStrictEqual(allow(9_007_199_254_740, 999));
    expect(peek(k, 1, BIG_RATE, 1000)).toStrictEqual(allow(MAX_SAFE, 0));
    expect(check(k, 1, BIG_RATE, MAX_SAFE, 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, BIG_RATE, MAX_SAFE, 1001)).toStrictEqual(deny(9_007_199_254_740, 999, 999));
    expect(peek(k, 1, BIG_RATE, 1_000_000_000_000)).toStrictEqual(allow(MAX_SAFE, 0));
    expect(check(k, 1, BIG_RATE, 1, 1_000_000_000_000)).toStrictEqual(allow(9_007_199_254_740_990, 1));
  });

  it('period 2^53−1 ms, limit 1 (shared case 13 table)', () => {
    const k = fresh();
    expect(check(k, 1, SLOW, 1, 0)).toStrictEqual(allow(0, MAX_SAFE));
    expect(check(k, 1, SLOW, 1, 1)).toStrictEqual(deny(0, 9_007_199_254_740_990, 9_007_199_254_740_990));
    expect(check(k, 1, SLOW, 1, 1000)).toStrictEqual(deny(0, 9_007_199_254_739_991, 9_007_199_254_739_991));
  });

  it('period 2^53−1 ms with limit = burst = 1024, up to time 2^48 − 1', () => {
    const k = fresh();
    expect(check(k, 1, HUGE_P, 1024, 0)).toStrictEqual(allow(0, MAX_SAFE));
    expect(check(k, 1, HUGE_P, 1, 1)).toStrictEqual(deny(0, MAX_SAFE - 1, 2 ** 43 - 1));
    expect(peek(k, 1, HUGE_P, 2 ** 48 - 1)).toStrictEqual(allow(31, 2 ** 53 - 2 ** 48));
    expect(check(k, 1, HUGE_P, 32, 2 ** 48 - 1)).toStrictEqual(deny(31, 2 ** 53 - 2 ** 48, 1));
    expect(check(k, 1, HUGE_P, 31, 2 ** 48 - 1)).toStrictEqual(allow(0, 2 ** 53 - 2 ** 43));
  });

  it('limit 2^53−1 per ms', () => {
    const k = fresh();
    expect(check(k, 1, HUGE_L, MAX_SAFE, t0)).toStrictEqual(allow(0, 1));
    expect(check(k, 1, HUGE_L, 1, t0)).toStrictEqual(deny(0, 1, 1));
    expect(peek(k, 1, HUGE_L, t0 + 1)).toStrictEqual(allow(MAX_SAFE, 0));
    expect(check(k, 1, HUGE_L, MAX_SAFE - 1, t0 + 1)).toStrictEqual(allow(1, 1));
  });
});

describe('gcra: groups are all-or-nothing', () => {
  it('a denying fixed-window leg leaves the gcra leg\'s TAT unchanged', () => {
    const k = fresh();
    expect(group(k, [{ key: 1, limit: THIRDS, cost: 1 }, { key: 2, limit: FW, cost: 2 }], t0)).toStrictEqual([allow(2, 334), allow(0, 1000)]);
    expect(group(k, [{ key: 1, limit: THIRDS, cost: 1 }, { key: 2, limit: FW, cost: 1 }], t0 + 10))
      .toStrictEqual([allow(2, 324), deny(0, 990, 990)]);
    // TAT still t0 + 333⅓: at t0 + 10, debt = 323·3 + 1 = 970
    expect(peek(k, 1, THIRDS, t0 + 10)).toStrictEqual(allow(2, 324));
    expect(check(k, 1, THIRDS, 2, t0 + 10)).toStrictEqual(allow(0, 990)); // debt 2970 → reset ceil(2970/3)
  });

  it('a denying gcra leg leaves the fixed-window leg\'s count unchanged', () => {
    const k = fresh();
    check(k, 1, THIRDS, 3, t0);
    expect(group(k, [{ key: 2, limit: FW, cost: 1 }, { key: 1, limit: THIRDS, cost: 1 }], t0))
      .toStrictEqual([allow(2, 1000), deny(0, 1000, 334)]);
    expect(k.stats().keys).toBe(1); // key 2 was new and is not inserted
  });
});

describe('gcra ≡ token_bucket (randomized, leg for leg)', () => {
  it('10,000 random checks over random limits give identical rows', () => {
    let seed = 12345;
    const rnd = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    const params = Array.from({ length: 12 }, () => ({ L: rnd(21), P: 1 + rnd(5000), B: rnd(31) }));
    const tb = newKernel(params.map((p) => lim(TOKEN_BUCKET, p.L, p.P, p.B)));
    const gc = newKernel(params.map((p) => lim(GCRA, p.L, p.P, p.B)));
    let now = 1_000_000;
    const diffs: string[] = [];
    for (let i = 0; i < 10_000 && diffs.length < 5; i++) {
      now += rnd(10) === 0 ? -rnd(300) : rnd(400);
      const key = rnd(40);
      const limit = key % params.length;
      const cost = rnd(8) === 0 ? 0 : rnd(12);
      const a = check(tb, key, limit, cost, now);
      const b = check(gc, key, limit, cost, now);
      if (JSON.stringify(a) !== JSON.stringify(b)) diffs.push(`#${i} ${JSON.stringify(params[limit])} key ${key} cost ${cost} t ${now}: tb ${JSON.stringify(a)} gcra ${JSON.stringify(b)}`);
    }
    expect(diffs).toStrictEqual([]);
  });
});
