/**
 * src/store/reply.ts unpackReply: lua/check.lua packs a row per leg, 3 numbers (the code + RETRIED when the
 * leg's retryAfterMs is not 0) or 1 for a token bucket's admission (ADMITTED: −1 − the tokens·P left), the
 * time, the announced retries in leg order, then the denied legs' states; the caller gets 4 per leg (an
 * admission's remaining and resetAfterMs from its leg's L, P and B), the time, the states.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { RETRIED, ReplyShapeError, admittedRow, unpackReply } from '../../../src/store/reply.js';

const packed = (xs: number[]): Buffer => {
  const b = Buffer.alloc(xs.length * 8);
  xs.forEach((x, i) => b.writeDoubleLE(x, i * 8));
  return b;
};

/** `n` legs of a token bucket (60 a minute, burst 100), one check each. */
const legs = (n: number): number[] => Array.from({ length: n }, () => [0, 60, 60_000, 100, 1, 1]).flat();

describe('unpackReply', () => {
  it('gives 4 numbers per leg back: retries where the code says so, 0 elsewhere; then the time and the states', () => {
    // leg 0: admitted, no delay; leg 1: denied, wait 2,500 ms; leg 2: never (−1); leg 3: admitted after a
    // 40 ms delay; leg 4: unreadable. States for legs 1 and 2 (each its own denied check)
    const raw = packed([
      0, 99, 600,
      1 + RETRIED, 0, 60_000,
      2 + RETRIED, 0, 0,
      0 + RETRIED, 3, 1_200,
      4, 0, 0,
      1_700_000_000_123,
      2_500, -1, 40,
      -7, 0, 1_699_999_999_000,
      0, 0, -1,
    ]);
    expect(unpackReply(raw, legs(5), 0)).toStrictEqual([
      0, 99, 600, 0,
      1, 0, 60_000, 2_500,
      2, 0, 0, -1,
      0, 3, 1_200, 40,
      4, 0, 0, 0,
      1_700_000_000_123,
      -7, 0, 1_699_999_999_000,
      0, 0, -1,
    ]);
  });

  it('carries a retry near 2^53 exactly (no arithmetic on it)', () => {
    const big = 2 ** 53 - 1;
    expect(unpackReply(packed([1 + RETRIED, 0, big, 5, big]), legs(1), 0)).toStrictEqual([1, 0, big, big, 5]);
  });

  it('gives an admission\'s row of one number back as 4: remaining ⌊x / P⌋, resetAfterMs ⌈(B·P − x) / L⌉', () => {
    // legs from 2 on: L 60 a minute into a bucket of 100 (P 60,000), x = 99·P + 59,999 left; a whole bucket
    // left (x = B·P: reset 0); a bucket emptied (x = 0); L 7 a second, B 3, 5 ms after an admission
    const args = [9, 9, 0, 60, 60_000, 100, 1, 1, 0, 60, 60_000, 100, 1, 1, 0, 60, 60_000, 100, 1, 1, 0, 7, 1_000, 3, 1, 1];
    const raw = packed([
      admittedRow(99 * 60_000 + 59_999),
      admittedRow(100 * 60_000),
      admittedRow(0),
      admittedRow(2 * 1_000 + 35),
      1_700_000_000_000,
    ]);
    expect(unpackReply(raw, args, 2)).toStrictEqual([
      0, 99, 1, 0, // ⌈1 / 60⌉
      0, 100, 0, 0,
      0, 0, 100_000, 0,
      0, 2, 138, 0, // ⌈965 / 7⌉
      1_700_000_000_000,
    ]);
    expect(admittedRow(0)).toBe(-1);
  });

  it('reads rows of 1 and of 3 numbers mixed, retries and states after them in leg order', () => {
    const raw = packed([
      admittedRow(6_000), // leg 0: L 1, P 1,000, B 10 — remaining 6, reset 4,000
      1 + RETRIED, 0, 9_000, // leg 1: denied
      admittedRow(0), // leg 2: remaining 0, reset 10,000
      0 + RETRIED, 2, 500, // leg 3: admitted after a delay
      42,
      9_000, 30,
      1, 0, 41,
    ]);
    const args = [0, 1, 1_000, 10, 1, 1, 0, 1, 1_000, 10, 2, 1, 0, 1, 1_000, 10, 1, 1, 0, 1, 1_000, 10, 1, 1];
    expect(unpackReply(raw, args, 0)).toStrictEqual([
      0, 6, 4_000, 0,
      1, 0, 9_000, 9_000,
      0, 0, 10_000, 0,
      0, 2, 500, 30,
      42,
      1, 0, 41,
    ]);
  });

  it('refuses a reply that is not doubles, too short for its legs, or missing an announced retry', () => {
    expect(() => unpackReply('OK', legs(1), 0)).toThrow(ReplyShapeError);
    expect(() => unpackReply(Buffer.alloc(12), legs(1), 0)).toThrow('12 bytes');
    expect(() => unpackReply(packed([0, 1, 2]), legs(1), 0)).toThrow('3 numbers for 1 legs');
    expect(() => unpackReply(packed([0, 1]), legs(1), 0)).toThrow('2 numbers for 1 legs');
    expect(() => unpackReply(packed([admittedRow(5)]), legs(1), 0)).toThrow('1 numbers for 1 legs');
    expect(() => unpackReply(packed([admittedRow(5), 7]), legs(2), 0)).toThrow('2 numbers for 2 legs');
    expect(() => unpackReply(packed([1 + RETRIED, 0, 0, 5]), legs(1), 0)).toThrow('no retryAfterMs for leg 0');
  });

  it('RETRIED is lua/check.lua\'s, above every code lua/lib.lua answers', () => {
    const check = readFileSync(new URL('../../../lua/check.lua', import.meta.url), 'utf8');
    const lib = readFileSync(new URL('../../../lua/lib.lua', import.meta.url), 'utf8');
    expect(Number(/^local RETRIED = (\d+)$/m.exec(check)?.[1])).toBe(RETRIED);
    const codes = [/^local ALLOW, DENY, NEVER = (\d+), (\d+), (\d+)$/m.exec(lib), /^local UNREADABLE = (\d+)$/m.exec(lib)]
      .flatMap((m) => m!.slice(1).map(Number));
    expect(codes).toStrictEqual([0, 1, 2, 4]);
    for (const c of codes) expect(c).toBeLessThan(RETRIED);
  });
});
