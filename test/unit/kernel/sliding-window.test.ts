/**
 * sliding_window in the kernel: the weighted two-window estimate, exact. In window k (t = k·P + e), with
 * prev = count of window k − 1 and cur = count of window k: admitted iff prev·(P − e) + (cur + c)·P ≤ L·P;
 * remaining = floor(L − estimate); resetAfter = (k+2)·P − t if cur > 0, (k+1)·P − t if only prev > 0, else 0;
 * retryAfter = the least whole d ≥ 1 at which the same check would be admitted. Hand-computed expectations.
 */
import { describe, expect, it } from 'vitest';
import {
  MAX_SAFE, SLIDING_WINDOW, TOKEN_BUCKET,
  allow, check, deny, group, lim, never, newKernel, peek,
} from './harness.js';

const SW = 0; // L 10 / 1000 ms
const ZERO = 1;
const BIG = 2; // L 2^53−1 / 1000 ms (shared case 13)
const LONG = 3; // L 2048 / (2^52 − 1) ms: 2·P ≤ 2^53 − 1 and L·P = 2^63 − 2048
const BIG_1024 = 4; // L 2^53−1 / 1024 ms
const TB = 5;

const P_LONG = 2 ** 52 - 1;
const LIMITS = [
  lim(SLIDING_WINDOW, 10, 1000),
  lim(SLIDING_WINDOW, 0, 1000),
  lim(SLIDING_WINDOW, MAX_SAFE, 1000),
  lim(SLIDING_WINDOW, 2048, P_LONG),
  lim(SLIDING_WINDOW, MAX_SAFE, 1024),
  lim(TOKEN_BUCKET, 10, 1000),
];
const t0 = 1_000_000; // window start, k = 1000
const fresh = () => newKernel(LIMITS);

describe('sliding_window: the weighted estimate at window edges', () => {
  it('fills a window, then the previous window\'s weight decays linearly', () => {
    const k = fresh();
    expect(check(k, 1, SW, 4, t0 + 500)).toStrictEqual(allow(6, 1500));
    expect(check(k, 1, SW, 6, t0 + 900)).toStrictEqual(allow(0, 1100));
    // full: next window, prev' = 10 needs 10·(1000 − x) ≤ 9·1000 → x ≥ 100: 200 ms away
    expect(check(k, 1, SW, 1, t0 + 900)).toStrictEqual(deny(0, 1100, 200));
    // e = 99: weighted 10·901 = 9010 > 9000; only prev > 0, so reset is the end of this window
    expect(check(k, 1, SW, 1, t0 + 1099)).toStrictEqual(deny(0, 901, 1));
    // e = 100: weighted 10·900 = 9000 = (10 − 0 − 1)·1000 → admitted exactly at the boundary
    expect(check(k, 1, SW, 1, t0 + 1100)).toStrictEqual(allow(0, 1900));
    // e = 200: weighted 8000 > (10 − 1 − 2)·1000; remaining floor((9000 − 8000)/1000) = 1; in-window retry 100
    expect(check(k, 1, SW, 2, t0 + 1200)).toStrictEqual(deny(1, 1800, 100));
    expect(check(k, 1, SW, 2, t0 + 1299)).toStrictEqual(deny(1, 1701, 1)); // floor((9000 − 7010)/1000) = 1
    expect(check(k, 1, SW, 2, t0 + 1300)).toStrictEqual(allow(0, 1700)); // cur = 3
    // window k + 2: prev = 3, cur = 0
    expect(peek(k, 1, SW, t0 + 2000)).toStrictEqual(allow(7, 1000));
    expect(peek(k, 1, SW, t0 + 2999)).toStrictEqual(allow(9, 1)); // weighted 3·1 = 3
    // window k + 3: both windows clear
    expect(peek(k, 1, SW, t0 + 3000)).toStrictEqual(allow(10, 0));
  });

  it('retry across the window edge (q < P) and to the window after next (q = 0)', () => {
    const k = fresh();
    expect(check(k, 1, SW, 10, t0 + 500)).toStrictEqual(allow(0, 1500));
    // e = 200: 10·800 = 8000 ≤ (10 − 2)·1000 → admitted, remaining 0, reset to the end of window k + 2
    expect(check(k, 1, SW, 2, t0 + 1200)).toStrictEqual(allow(0, 1800));
    expect(check(k, 1, SW, 1, t0 + 1200)).toStrictEqual(deny(0, 1800, 100));
    // cost 9 > L − cur = 8: next window with prev' = 2 needs 2·(1000 − x) ≤ 1000 → x = 500: 800 + 500
    expect(check(k, 1, SW, 9, t0 + 1200)).toStrictEqual(deny(0, 1800, 1300));
    // cost 10: only the window after next (prev'' = 0) admits: 800 + 1000
    expect(check(k, 1, SW, 10, t0 + 1200)).toStrictEqual(deny(0, 1800, 1800));
    // the promises hold to the ms
    expect(check(k, 1, SW, 9, t0 + 2499)).toStrictEqual(deny(8, 501, 1)); // weighted 2·501 = 1002
    expect(check(k, 1, SW, 9, t0 + 2500)).toStrictEqual(allow(0, 1500));
  });

  it('a key idle for two windows or more starts clear', () => {
    const k = fresh();
    expect(check(k, 1, SW, 10, t0)).toStrictEqual(allow(0, 2000));
    // last ms of window k + 1: weighted 10·1 = 10 → remaining floor(9.99) = 9, clear in 1 ms
    expect(peek(k, 1, SW, t0 + 1999)).toStrictEqual(allow(9, 1));
    expect(peek(k, 1, SW, t0 + 2000)).toStrictEqual(allow(10, 0));
    expect(check(k, 1, SW, 10, t0 + 5000)).toStrictEqual(allow(0, 2000));
  });
});

describe('sliding_window: time going backwards, peeks and denials', () => {
  it('a check earlier than the last admitted one is decided as at that last time', () => {
    const k = fresh();
    expect(check(k, 1, SW, 10, t0 + 500)).toStrictEqual(allow(0, 1500));
    expect(check(k, 1, SW, 1, t0 + 1100)).toStrictEqual(allow(0, 1900)); // last = t0 + 1100
    // t0 + 100 → decided at t0 + 1100 (prev 10, cur 1, e = 100)
    expect(check(k, 1, SW, 1, t0 + 100)).toStrictEqual(deny(0, 1900, 100));
    expect(peek(k, 1, SW, 0)).toStrictEqual(allow(0, 1900));
    expect(check(k, 1, SW, 1, t0 + 1199)).toStrictEqual(deny(0, 1801, 1));
    expect(check(k, 1, SW, 1, t0 + 1200)).toStrictEqual(allow(0, 1800));
  });

  it('a peek stores nothing, not even the time', () => {
    const k = fresh();
    expect(check(k, 1, SW, 10, t0 + 500)).toStrictEqual(allow(0, 1500));
    expect(peek(k, 1, SW, t0 + 3000)).toStrictEqual(allow(10, 0));
    // decided at t0 + 600, still inside the full window
    expect(check(k, 1, SW, 1, t0 + 600)).toStrictEqual(deny(0, 1400, 500));
    expect(peek(k, 2, SW, t0)).toStrictEqual(allow(10, 0));
    expect(k.stats().keys).toBe(1);
  });

  it('a denied check neither counts nor moves the time', () => {
    const k = fresh();
    expect(check(k, 1, SW, 6, t0 + 100)).toStrictEqual(allow(4, 1900));
    // 5 > L − cur = 4: next window with prev' = 6 needs 6·(1000 − x) ≤ 5000 → x = 167: 800 + 167
    expect(check(k, 1, SW, 5, t0 + 200)).toStrictEqual(deny(4, 1800, 967));
    expect(check(k, 1, SW, 4, t0 + 200)).toStrictEqual(allow(0, 1800));
    // never (cost 11) two windows later stores nothing: t0 + 300 is still decided in window k
    expect(check(k, 1, SW, 11, t0 + 3000)).toStrictEqual(never(10, 0));
    expect(check(k, 1, SW, 1, t0 + 300)).toStrictEqual(deny(0, 1700, 700 + 100));
  });

  it('cost > limit is NEVER with retry −1; limit 0 denies for good and stores nothing', () => {
    const k = fresh();
    expect(check(k, 1, SW, 11, t0)).toStrictEqual(never(10, 0));
    expect(check(k, 1, SW, 3, t0 + 250)).toStrictEqual(allow(7, 1750));
    expect(check(k, 1, SW, 11, t0 + 250)).toStrictEqual(never(7, 1750));
    expect(check(k, 1, SW, MAX_SAFE, t0 + 1250)).toStrictEqual(never(7, 750)); // prev 3·750/1000 = 2.25
    expect(check(k, 2, ZERO, 1, 0)).toStrictEqual(never(0, 0));
    expect(check(k, 2, ZERO, 5, 1_000_000_000)).toStrictEqual(never(0, 0));
    expect(peek(k, 2, ZERO, 1_000_000_000)).toStrictEqual(allow(0, 0));
    expect(k.stats().keys).toBe(1);
  });
});

describe('sliding_window: huge values stay exact', () => {
  it('limit 2^53−1 per second (shared case 13 table): estimates doubles cannot hold', () => {
    const k = fresh();
    expect(check(k, 1, BIG, MAX_SAFE, 0)).toStrictEqual(allow(0, 2000));
    // e = 500, prev = L: estimate (2^53 − 1)/2, minus the 1 admitted
    expect(check(k, 1, BIG, 1, 1500)).toStrictEqual(allow(4_503_599_627_370_494, 1500));
    expect(check(k, 1, BIG, MAX_SAFE, 1500)).toStrictEqual(deny(4_503_599_627_370_494, 1500, 1500));
    expect(peek(k, 1, BIG, 2999)).toStrictEqual(allow(9_007_199_254_740_990, 1));
    expect(peek(k, 1, BIG, 3000)).toStrictEqual(allow(MAX_SAFE, 0));
  });

  it('limit 2^53−1 per 1024 ms: the admitted half and a 1 ms retry', () => {
    const k = fresh();
    const T = 1_024_000; // k = 1000
    expect(check(k, 1, BIG_1024, MAX_SAFE, T + 24)).toStrictEqual(allow(0, 2024));
    // k = 1001, e = 512: estimate = L/2 → remaining floor((2^53 − 1)/2) = 2^52 − 1
    expect(peek(k, 1, BIG_1024, T + 1536)).toStrictEqual(allow(2 ** 52 - 1, 512));
    // (L − c)·1024 = 2^62 ≥ L·512 = 2^62 − 512: admitted; remaining floor(512/1024) = 0
    expect(check(k, 1, BIG_1024, 2 ** 52 - 1, T + 1536)).toStrictEqual(allow(0, 1536));
    // q = floor((2^52 − 1)·1024 / (2^53 − 1)) = 511 → retry 512 − 511 = 1
    expect(check(k, 1, BIG_1024, 1, T + 1536)).toStrictEqual(deny(0, 1536, 1));
    // e = 513: room (2^52 − 1)·1024 − L·511 = 2^53 − 513 → remaining floor((2^53 − 513)/1024) = 2^43 − 1
    expect(check(k, 1, BIG_1024, 1, T + 1537)).toStrictEqual(allow(2 ** 43 - 1, 1535));
  });

  it('period 2^52 − 1 ms (the longest the policy allows), limit 2048', () => {
    const k = fresh();
    expect(check(k, 1, LONG, 2048, 1000)).toStrictEqual(allow(0, 2 * P_LONG - 1000));
    // q = floor(2047·P/2048) = 2047·2^41 − 1 → P − q = 2^41; retry = (P − 1000) + 2^41
    expect(check(k, 1, LONG, 1, 1000)).toStrictEqual(deny(0, 2 * P_LONG - 1000, P_LONG - 1000 + 2 ** 41));
    expect(peek(k, 1, LONG, 2 ** 48 - 1)).toStrictEqual(allow(0, 2 * P_LONG - (2 ** 48 - 1)));
    expect(check(k, 1, LONG, 2049, 2 ** 48 - 1)).toStrictEqual(never(0, 2 * P_LONG - (2 ** 48 - 1)));
  });
});

describe('sliding_window: groups are all-or-nothing', () => {
  it('a denying token-bucket leg leaves the window counts unchanged', () => {
    const k = fresh();
    check(k, 2, TB, 10, t0);
    expect(check(k, 1, SW, 4, t0)).toStrictEqual(allow(6, 2000));
    expect(group(k, [{ key: 1, limit: SW, cost: 6 }, { key: 2, limit: TB, cost: 1 }], t0 + 50))
      .toStrictEqual([allow(6, 1950), deny(0, 950, 50)]);
    expect(check(k, 1, SW, 6, t0 + 50)).toStrictEqual(allow(0, 1950));
  });

  it('a denying window leg leaves the token-bucket leg unchanged', () => {
    const k = fresh();
    check(k, 1, SW, 10, t0);
    expect(group(k, [{ key: 2, limit: TB, cost: 3 }, { key: 1, limit: SW, cost: 1 }], t0 + 100))
      .toStrictEqual([allow(10, 0), deny(0, 1900, 1000)]);
    expect(k.stats().keys).toBe(1);
  });
});
