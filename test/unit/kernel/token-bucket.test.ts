/**
 * token_bucket in the kernel, driven leg by leg. Every expectation is computed by hand from the rules
 * (state x = tokens·P; a refill adds elapsed·L, capped at B·P):
 *   remaining = floor(x/P), resetAfter = ceil((B·P − x)/L), retryAfter = ceil((c·P − x)/L).
 */
import { describe, expect, it } from 'vitest';
import {
  ALLOW, BAD_LIMIT, DENY, MAX_SAFE, TOKEN_BUCKET, FIXED_WINDOW,
  allow, check, deny, group, lim, never, newKernel, peek, rows,
} from './harness.js';

const TB = 0; // L 10 / 1000 ms, B 10: one token per 100 ms, full after 1000 ms
const ZERO = 1; // L 0
const HUGE_L = 2; // L 2^53−1 per 1 ms
const HUGE_P = 3; // L 1024 per 2^53−1 ms, B 1024: B·P = 2^63 − 1024
const SLOW = 4; // L 1 per 2^53−1 ms
const BIG_RATE = 5; // L 2^53−1 per 1000 ms (shared case 13)
const DEEP = 6; // L 1 per 1 ms, B 2^53−1
const NARROW = 7; // L 10 / 1000 ms, B 1
const ZERO_BURST = 8; // L 0, B 5
const FW = 9; // fixed_window L 2 / 1000 ms (for groups)

const LIMITS = [
  lim(TOKEN_BUCKET, 10, 1000),
  lim(TOKEN_BUCKET, 0, 1000),
  lim(TOKEN_BUCKET, MAX_SAFE, 1),
  lim(TOKEN_BUCKET, 1024, MAX_SAFE),
  lim(TOKEN_BUCKET, 1, MAX_SAFE),
  lim(TOKEN_BUCKET, MAX_SAFE, 1000),
  lim(TOKEN_BUCKET, 1, 1, MAX_SAFE),
  lim(TOKEN_BUCKET, 10, 1000, 1),
  lim(TOKEN_BUCKET, 0, 1000, 5),
  lim(FIXED_WINDOW, 2, 1000),
];

const t0 = 1_000_000;
const fresh = () => newKernel(LIMITS);

describe('token_bucket: consumption and exact refill', () => {
  it('drains, denies with exact waits, refills one token per 100 ms', () => {
    const k = fresh();
    expect(check(k, 1, TB, 1, t0)).toStrictEqual(allow(9, 100));
    expect(check(k, 1, TB, 9, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 1, t0)).toStrictEqual(deny(0, 1000, 100));
    // 99 ms: x = 990 (9.9 tokens' worth of P), one token short by 10/10 = 1 ms
    expect(check(k, 1, TB, 1, t0 + 99)).toStrictEqual(deny(0, 901, 1));
    expect(check(k, 1, TB, 1, t0 + 100)).toStrictEqual(allow(0, 1000));
    // 150 ms later: x = 1500
    expect(check(k, 1, TB, 2, t0 + 250)).toStrictEqual(deny(1, 850, 50));
    expect(check(k, 1, TB, 1, t0 + 250)).toStrictEqual(allow(0, 950));
    expect(peek(k, 1, TB, t0 + 5000)).toStrictEqual(allow(10, 0));
  });

  it('keeps fractional refill (x = tokens·P) across admitted checks', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(peek(k, 1, TB, t0 + 55)).toStrictEqual(allow(0, 945)); // x = 550
    expect(check(k, 1, TB, 1, t0 + 155)).toStrictEqual(allow(0, 945)); // 1550 − 1000 = 550
    expect(check(k, 1, TB, 1, t0 + 205)).toStrictEqual(allow(0, 995)); // 550 + 500 − 1000 = 50
    // the 50 kept above is exactly what makes this admit: 50 + 950 = 1000
    expect(check(k, 1, TB, 1, t0 + 300)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 1, t0 + 399)).toStrictEqual(deny(0, 901, 1));
  });

  it('caps the refill at the burst (no credit for idle time beyond full)', () => {
    const k = fresh();
    expect(check(k, 1, TB, 1, t0)).toStrictEqual(allow(9, 100));
    expect(check(k, 1, TB, 10, t0 + 1_000_000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 1, t0 + 1_000_000)).toStrictEqual(deny(0, 1000, 100));
  });

  it('burst below the limit: B 1, refill 10 per second (full after 100 ms)', () => {
    const k = fresh();
    expect(check(k, 1, NARROW, 1, t0)).toStrictEqual(allow(0, 100));
    expect(check(k, 1, NARROW, 1, t0 + 50)).toStrictEqual(deny(0, 50, 50));
    expect(check(k, 1, NARROW, 2, t0 + 50)).toStrictEqual(never(0, 50));
    expect(check(k, 1, NARROW, 1, t0 + 100)).toStrictEqual(allow(0, 100));
    expect(peek(k, 1, NARROW, t0 + 10_000)).toStrictEqual(allow(1, 0));
  });

  it('keys are independent', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, TB, 3, t0)).toStrictEqual(allow(7, 300));
    expect(check(k, 1, TB, 1, t0)).toStrictEqual(deny(0, 1000, 100));
    expect(k.stats().keys).toBe(2);
  });
});

describe('token_bucket: time going backwards', () => {
  it('a check earlier than the key\'s last admitted check is decided as at that last time', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0 + 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 1, t0)).toStrictEqual(deny(0, 1000, 100)); // as at t0 + 1000
    expect(peek(k, 1, TB, t0 + 500)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 1, t0 + 1100)).toStrictEqual(allow(0, 1000)); // last = t0 + 1100
    expect(check(k, 1, TB, 1, t0 + 1050)).toStrictEqual(deny(0, 1000, 100)); // as at t0 + 1100, not t0 + 1050
    expect(check(k, 1, TB, 1, 0)).toStrictEqual(deny(0, 1000, 100));
    // going back never credits tokens: one more token needs 100 ms after t0 + 1100
    expect(check(k, 1, TB, 1, t0 + 1199)).toStrictEqual(deny(0, 901, 1));
    expect(check(k, 1, TB, 1, t0 + 1200)).toStrictEqual(allow(0, 1000));
  });

  it('another key\'s later time does not affect a key (time is per key)', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0 + 5000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, TB, 1, t0 + 100)).toStrictEqual(allow(0, 1000));
  });
});

describe('token_bucket: peeks and denials change nothing', () => {
  it('a peek (cost 0) reports the state without storing it, not even the last-seen time', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(peek(k, 1, TB, t0 + 500)).toStrictEqual(allow(5, 500));
    // decided at t0 + 300 (x = 3000); had the peek stored t0 + 500, this would report allow(2, 800)
    expect(check(k, 1, TB, 3, t0 + 300)).toStrictEqual(allow(0, 1000));
  });

  it('a peek of an unknown key answers full and inserts nothing', () => {
    const k = fresh();
    expect(peek(k, 42, TB, t0)).toStrictEqual(allow(10, 0));
    expect(k.stats().keys).toBe(0);
  });

  it('a denied check neither consumes nor moves the last-seen time', () => {
    const k = fresh();
    expect(check(k, 1, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, TB, 8, t0 + 500)).toStrictEqual(deny(5, 500, 300));
    // decided at t0 + 300: x = 3000. Had the denial stored t0 + 500: allow(2, 800)
    expect(check(k, 1, TB, 3, t0 + 300)).toStrictEqual(allow(0, 1000));
  });

  it('a denied or never-admissible check of an unknown key inserts nothing', () => {
    const k = fresh();
    expect(check(k, 7, TB, 11, t0)).toStrictEqual(never(10, 0));
    expect(check(k, 8, ZERO, 1, t0)).toStrictEqual(never(0, 0));
    expect(k.stats().keys).toBe(0);
  });
});

describe('token_bucket: cost above the burst, limit 0', () => {
  it('cost > burst is NEVER (code 2) with retry −1, reporting the current state, and changes nothing', () => {
    const k = fresh();
    expect(check(k, 1, TB, 11, t0)).toStrictEqual(never(10, 0));
    expect(check(k, 1, TB, 4, t0)).toStrictEqual(allow(6, 400));
    const out = check(k, 1, TB, 11, t0);
    expect(out).toStrictEqual(never(6, 400));
    expect(out.code).toBe(2);
    expect(out.retry).toBe(-1);
    expect(check(k, 1, TB, MAX_SAFE, t0)).toStrictEqual(never(6, 400));
    expect(check(k, 1, TB, 6, t0)).toStrictEqual(allow(0, 1000));
  });

  it('limit 0 denies every cost > 0 for good (NEVER, remaining 0) and stores nothing', () => {
    const k = fresh();
    expect(check(k, 1, ZERO, 1, 0)).toStrictEqual(never(0, 0));
    expect(check(k, 1, ZERO, 1, 1_000_000_000)).toStrictEqual(never(0, 0));
    expect(check(k, 1, ZERO, 5, 1_000_000_000)).toStrictEqual(never(0, 0));
    expect(peek(k, 1, ZERO, 1_000_000_000)).toStrictEqual(allow(0, 0));
    expect(k.stats().keys).toBe(0);
  });

  // BUG (kernel vs the reference model, test/helpers/model.ts evalBucket): a bucket with limit 0 and burst 5
  // holds 5 tokens that never refill. The model reports remaining = floor(tokens) = 5 (for the peek and for
  // the "never" denial); assembly/index.ts evaluate() short-circuits every L = 0 bucket to remaining 0.
  it('limit 0 with burst 5: nothing can ever be spent, so remaining is 0 (reference model)', () => {
    const k = fresh();
    expect(peek(k, 1, ZERO_BURST, t0)).toStrictEqual(allow(0, 0));
    expect(check(k, 1, ZERO_BURST, 1, t0)).toStrictEqual(never(0, 0));
  });
});

describe('token_bucket: huge values stay exact', () => {
  it('limit 2^53−1 per ms', () => {
    const k = fresh();
    expect(check(k, 1, HUGE_L, MAX_SAFE, t0)).toStrictEqual(allow(0, 1));
    expect(check(k, 1, HUGE_L, 1, t0)).toStrictEqual(deny(0, 1, 1));
    expect(peek(k, 1, HUGE_L, t0 + 1)).toStrictEqual(allow(MAX_SAFE, 0));
    expect(check(k, 1, HUGE_L, MAX_SAFE - 1, t0 + 1)).toStrictEqual(allow(1, 1));
    expect(check(k, 1, HUGE_L, 2, t0 + 1)).toStrictEqual(deny(1, 1, 1));
  });

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

  it('period 2^53−1 ms with limit = burst = 1024 (B·P = 2^63 − 1024), up to the largest time 2^48 − 1', () => {
    const k = fresh();
    expect(check(k, 1, HUGE_P, 1024, 0)).toStrictEqual(allow(0, MAX_SAFE));
    // x = 1024 after 1 ms: reset = (B·P − 1024)/1024 = P − 1; retry = ceil((P − 1024)/1024) = 2^43 − 1
    expect(check(k, 1, HUGE_P, 1, 1)).toStrictEqual(deny(0, MAX_SAFE - 1, 2 ** 43 - 1));
    // at T = 2^48 − 1: x = 1024·T = 2^58 − 1024 → floor(x/P) = 31; reset = (2^63 − 2^58)/1024 = 2^53 − 2^48
    expect(peek(k, 1, HUGE_P, 2 ** 48 - 1)).toStrictEqual(allow(31, 2 ** 53 - 2 ** 48));
    expect(check(k, 1, HUGE_P, 32, 2 ** 48 - 1)).toStrictEqual(
      // retry = ceil((32·P − x)/1024) = ceil((2^58 − 32 − 2^58 + 1024)/1024) = 1
      deny(31, 2 ** 53 - 2 ** 48, 1),
    );
    // x' = 2^58 − 1024 − 31·(2^53 − 1) = 2^53 − 993: remaining 0;
    // reset = ceil((2^63 − 1024 − 2^53 + 993)/1024) = ceil(2^53 − 2^43 − 31/1024) = 2^53 − 2^43
    expect(check(k, 1, HUGE_P, 31, 2 ** 48 - 1)).toStrictEqual(allow(0, 2 ** 53 - 2 ** 43));
  });

  it('burst 2^53−1 refilling 1 per ms', () => {
    const k = fresh();
    expect(check(k, 1, DEEP, MAX_SAFE, t0)).toStrictEqual(allow(0, MAX_SAFE));
    expect(peek(k, 1, DEEP, t0 + 5)).toStrictEqual(allow(5, MAX_SAFE - 5));
    expect(check(k, 1, DEEP, 6, t0 + 5)).toStrictEqual(deny(5, MAX_SAFE - 5, 1));
    expect(check(k, 1, DEEP, 5, t0 + 5)).toStrictEqual(allow(0, MAX_SAFE));
  });
});

describe('token_bucket: groups are all-or-nothing', () => {
  const A = 1, B = 2, C = 3;

  it('admits and consumes every leg when all admit', () => {
    const k = fresh();
    expect(group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: FW, cost: 1 }], t0)).toStrictEqual([allow(9, 100), allow(1, 1000)]);
    expect(group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: FW, cost: 1 }], t0)).toStrictEqual([allow(8, 200), allow(0, 1000)]);
    expect(k.stats().keys).toBe(2);
  });

  it('the second leg denies → the first leg (which alone would admit) is reported and kept untouched', () => {
    const k = fresh();
    group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: FW, cost: 2 }], t0);
    expect(group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: FW, cost: 1 }], t0))
      .toStrictEqual([allow(9, 100), deny(0, 1000, 1000)]);
    expect(peek(k, A, TB, t0)).toStrictEqual(allow(9, 100));
  });

  it('the first leg denies → the second leg\'s state is unchanged', () => {
    const k = fresh();
    expect(check(k, A, TB, 10, t0 + 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, B, FW, 1, t0 + 1000)).toStrictEqual(allow(1, 1000));
    expect(group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: FW, cost: 1 }], t0 + 1000))
      .toStrictEqual([deny(0, 1000, 100), allow(1, 1000)]);
    expect(peek(k, B, FW, t0 + 1000)).toStrictEqual(allow(1, 1000));
    // and B's count is still 1: one more fits, two do not
    expect(check(k, B, FW, 2, t0 + 1000)).toStrictEqual(deny(1, 1000, 1000));
  });

  it('a NEVER leg fails the group; new keys of a failed group are not inserted', () => {
    const k = fresh();
    expect(group(k, [{ key: A, limit: TB, cost: 3 }, { key: B, limit: FW, cost: 3 }], t0))
      .toStrictEqual([allow(10, 0), never(2, 1000)]);
    expect(k.stats().keys).toBe(0);
  });

  it('a leg with an unknown limit id fails the group with code 3 and changes nothing', () => {
    const k = fresh();
    const out = group(k, [{ key: A, limit: TB, cost: 1 }, { key: B, limit: 99, cost: 1 }], t0);
    expect(out).toStrictEqual([allow(10, 0), { code: BAD_LIMIT, remaining: 0, reset: 0, retry: -1 }]);
    expect(k.stats().keys).toBe(0);
  });

  it('three legs, the last denies: the first two are untouched', () => {
    const k = fresh();
    check(k, C, TB, 10, t0);
    const out = group(k, [{ key: A, limit: TB, cost: 2 }, { key: B, limit: FW, cost: 1 }, { key: C, limit: TB, cost: 1 }], t0);
    expect(out).toStrictEqual([allow(10, 0), allow(2, 1000), deny(0, 1000, 100)]);
    expect(k.stats().keys).toBe(1);
    expect(out.map((o) => o.code)).toStrictEqual([ALLOW, ALLOW, DENY]);
  });

  it('the group length bounds the group: a following single leg in the same batch is decided on its own', () => {
    const k = fresh();
    // rows 0-1: a failing group (header on row 0); row 2: an independent check of key A that admits
    const out = rows(k, [
      { leg: { key: A, limit: TB, cost: 1 }, group: 2 },
      { leg: { key: B, limit: FW, cost: 3 } },
      { leg: { key: A, limit: TB, cost: 4 } },
    ], t0);
    expect(out).toStrictEqual([allow(10, 0), never(2, 1000), allow(6, 400)]);
    expect(k.stats().keys).toBe(1);
  });

  it('a group of peeks (cost 0) admits and changes nothing', () => {
    const k = fresh();
    check(k, A, TB, 4, t0);
    expect(group(k, [{ key: A, limit: TB, cost: 0 }, { key: B, limit: FW, cost: 0 }], t0 + 100))
      .toStrictEqual([allow(7, 300), allow(2, 900)]);
    expect(k.stats().keys).toBe(1);
    expect(check(k, A, TB, 1, t0 + 50)).toStrictEqual(allow(5, 450)); // x = 6000 + 500 − 1000
  });
});
