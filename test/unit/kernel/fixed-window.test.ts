/**
 * fixed_window in the kernel: windows [k·P, (k+1)·P) aligned to the Unix epoch; the count resets when the
 * (per-key monotone) time enters a later window. remaining = L − count, resetAfter = retryAfter = window
 * end − t. Expectations are hand-computed.
 */
import { describe, expect, it } from 'vitest';
import {
  MAX_SAFE, FIXED_WINDOW, TOKEN_BUCKET,
  allow, check, deny, group, lim, never, newKernel, peek,
} from './harness.js';

const FW = 0; // L 5 / 1000 ms
const ZERO = 1;
const BIG = 2; // L 2^53−1 / 1000 ms
const LONG = 3; // L 1024 / 2^53−1 ms (L·P = 2^63 − 1024)
const TINY = 4; // L 1 / 1 ms
const TB = 5;

const LIMITS = [
  lim(FIXED_WINDOW, 5, 1000),
  lim(FIXED_WINDOW, 0, 1000),
  lim(FIXED_WINDOW, MAX_SAFE, 1000),
  lim(FIXED_WINDOW, 1024, MAX_SAFE),
  lim(FIXED_WINDOW, 1, 1),
  lim(TOKEN_BUCKET, 10, 1000),
];
const t0 = 1_000_000; // a window start (k = 1000)
const fresh = () => newKernel(LIMITS);

describe('fixed_window: window edges', () => {
  it('counts within a window and resets exactly at the next window start', () => {
    const k = fresh();
    expect(check(k, 1, FW, 1, t0)).toStrictEqual(allow(4, 1000));
    expect(check(k, 1, FW, 4, t0 + 500)).toStrictEqual(allow(0, 500));
    expect(check(k, 1, FW, 1, t0 + 500)).toStrictEqual(deny(0, 500, 500));
    expect(check(k, 1, FW, 1, t0 + 999)).toStrictEqual(deny(0, 1, 1));
    expect(check(k, 1, FW, 1, t0 + 1000)).toStrictEqual(allow(4, 1000));
  });

  it('the last ms of a window and the first of the next admit L each (2·L in 1 ms, by design)', () => {
    const k = fresh();
    expect(check(k, 1, FW, 5, t0 + 999)).toStrictEqual(allow(0, 1));
    expect(check(k, 1, FW, 1, t0 + 999)).toStrictEqual(deny(0, 1, 1));
    expect(check(k, 1, FW, 5, t0 + 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, FW, 1, t0 + 1999)).toStrictEqual(deny(0, 1, 1));
  });

  it('a key idle for many windows starts from 0', () => {
    const k = fresh();
    expect(check(k, 1, FW, 5, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, FW, 2, t0 + 7_654_321)).toStrictEqual(allow(3, 1000 - 321));
  });

  it('windows are aligned to the epoch, not to the first check', () => {
    const k = fresh();
    expect(check(k, 1, FW, 5, t0 + 700)).toStrictEqual(allow(0, 300));
    expect(check(k, 1, FW, 1, t0 + 1000)).toStrictEqual(allow(4, 1000));
    expect(check(k, 2, FW, 1, 0)).toStrictEqual(allow(4, 1000));
  });

  it('period 1 ms: every ms is a new window', () => {
    const k = fresh();
    expect(check(k, 1, TINY, 1, t0)).toStrictEqual(allow(0, 1));
    expect(check(k, 1, TINY, 1, t0)).toStrictEqual(deny(0, 1, 1));
    expect(check(k, 1, TINY, 1, t0 + 1)).toStrictEqual(allow(0, 1));
  });
});

describe('fixed_window: time going backwards, peeks and denials', () => {
  it('a check earlier than the last admitted one is decided in the last one\'s window', () => {
    const k = fresh();
    expect(check(k, 1, FW, 2, t0 + 999)).toStrictEqual(allow(3, 1));
    expect(check(k, 1, FW, 4, t0 + 1000)).toStrictEqual(allow(1, 1000)); // new window
    // t0 + 500 is decided as t0 + 1000: window k + 1 with count 4
    expect(check(k, 1, FW, 1, t0 + 500)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, FW, 1, t0 + 400)).toStrictEqual(deny(0, 1000, 1000));
    expect(peek(k, 1, FW, 0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, FW, 1, t0 + 2000)).toStrictEqual(allow(4, 1000));
  });

  it('a peek reports L − count and the window end, and stores nothing (not even the time)', () => {
    const k = fresh();
    expect(check(k, 1, FW, 5, t0 + 100)).toStrictEqual(allow(0, 900));
    expect(peek(k, 1, FW, t0 + 1100)).toStrictEqual(allow(5, 900));
    // decided at t0 + 200, in the full window; had the peek stored t0 + 1100 this would admit
    expect(check(k, 1, FW, 1, t0 + 200)).toStrictEqual(deny(0, 800, 800));
    expect(peek(k, 2, FW, t0 + 250)).toStrictEqual(allow(5, 750));
    expect(k.stats().keys).toBe(1);
  });

  it('a denied check neither counts nor moves the time', () => {
    const k = fresh();
    expect(check(k, 1, FW, 3, t0 + 100)).toStrictEqual(allow(2, 900));
    expect(check(k, 1, FW, 3, t0 + 200)).toStrictEqual(deny(2, 800, 800));
    expect(check(k, 1, FW, 2, t0 + 300)).toStrictEqual(allow(0, 700));
    // never-admissible check in the next window: stores nothing, so t0 + 400 is still in the full window
    expect(check(k, 1, FW, 6, t0 + 1100)).toStrictEqual(never(5, 900));
    expect(check(k, 1, FW, 1, t0 + 400)).toStrictEqual(deny(0, 600, 600));
  });

  it('cost > limit is NEVER (code 2, retry −1) reporting L − count and the window end', () => {
    const k = fresh();
    expect(check(k, 1, FW, 6, t0 + 250)).toStrictEqual(never(5, 750));
    expect(check(k, 1, FW, 2, t0 + 250)).toStrictEqual(allow(3, 750));
    expect(check(k, 1, FW, 6, t0 + 260)).toStrictEqual(never(3, 740));
    expect(check(k, 1, FW, MAX_SAFE, t0 + 260)).toStrictEqual(never(3, 740));
  });

  it('limit 0 denies every cost > 0 for good and stores nothing', () => {
    const k = fresh();
    expect(check(k, 1, ZERO, 1, 0)).toStrictEqual(never(0, 1000));
    expect(check(k, 1, ZERO, 1, 1_000_000_000)).toStrictEqual(never(0, 1000));
    expect(check(k, 1, ZERO, 5, t0 + 250)).toStrictEqual(never(0, 750));
    expect(peek(k, 1, ZERO, t0 + 250)).toStrictEqual(allow(0, 750));
    expect(k.stats().keys).toBe(0);
  });
});

describe('fixed_window: huge values stay exact', () => {
  it('limit 2^53−1 per second (shared case 13 table)', () => {
    const k = fresh();
    expect(check(k, 1, BIG, MAX_SAFE, 0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, BIG, 1, 1)).toStrictEqual(deny(0, 999, 999));
    expect(check(k, 1, BIG, 1, 1000)).toStrictEqual(allow(9_007_199_254_740_990, 1000));
    expect(check(k, 1, BIG, MAX_SAFE - 1, 1000)).toStrictEqual(allow(0, 1000));
  });

  it('period 2^53−1 ms: one window spans every representable time', () => {
    const k = fresh();
    expect(check(k, 1, LONG, 1, 0)).toStrictEqual(allow(1023, MAX_SAFE));
    expect(check(k, 1, LONG, 1023, 2 ** 48 - 1)).toStrictEqual(allow(0, MAX_SAFE - (2 ** 48 - 1)));
    expect(check(k, 1, LONG, 1, 2 ** 48 - 1)).toStrictEqual(deny(0, MAX_SAFE - (2 ** 48 - 1), MAX_SAFE - (2 ** 48 - 1)));
    expect(check(k, 1, LONG, 1025, 2 ** 48 - 1)).toStrictEqual(never(0, MAX_SAFE - (2 ** 48 - 1)));
  });
});

describe('fixed_window: groups are all-or-nothing', () => {
  it('a denying token-bucket leg leaves the window count unchanged', () => {
    const k = fresh();
    check(k, 2, TB, 10, t0);
    expect(group(k, [{ key: 1, limit: FW, cost: 3 }, { key: 2, limit: TB, cost: 1 }], t0 + 10))
      .toStrictEqual([allow(5, 990), deny(0, 990, 90)]); // TB: x = 100 after 10 ms
    expect(k.stats().keys).toBe(1);
    expect(check(k, 1, FW, 5, t0 + 10)).toStrictEqual(allow(0, 990));
  });

  it('a denying window leg leaves the token-bucket leg unchanged', () => {
    const k = fresh();
    check(k, 1, FW, 4, t0);
    expect(group(k, [{ key: 2, limit: TB, cost: 5 }, { key: 1, limit: FW, cost: 2 }], t0))
      .toStrictEqual([allow(10, 0), deny(1, 1000, 1000)]);
    expect(group(k, [{ key: 2, limit: TB, cost: 5 }, { key: 1, limit: FW, cost: 1 }], t0))
      .toStrictEqual([allow(5, 500), allow(0, 1000)]);
  });
});
