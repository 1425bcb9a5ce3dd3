/**
 * src/store/reply.ts unpackReply: lua/check.lua packs 3 numbers per leg (the code + RETRIED when the leg's
 * retryAfterMs is not 0), the time, the announced retries in leg order, then the denied legs' states; the
 * caller gets 4 per leg, the time, the states.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { RETRIED, ReplyShapeError, unpackReply } from '../../../src/store/reply.js';

const packed = (xs: number[]): Buffer => {
  const b = Buffer.alloc(xs.length * 8);
  xs.forEach((x, i) => b.writeDoubleLE(x, i * 8));
  return b;
};

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
    expect(unpackReply(raw, 5)).toStrictEqual([
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
    expect(unpackReply(packed([1 + RETRIED, 0, big, 5, big]), 1)).toStrictEqual([1, 0, big, big, 5]);
  });

  it('refuses a reply that is not doubles, too short for its legs, or missing an announced retry', () => {
    expect(() => unpackReply('OK', 1)).toThrow(ReplyShapeError);
    expect(() => unpackReply(Buffer.alloc(12), 1)).toThrow('12 bytes');
    expect(() => unpackReply(packed([0, 1, 2]), 1)).toThrow('3 numbers for 1 legs');
    expect(() => unpackReply(packed([1 + RETRIED, 0, 0, 5]), 1)).toThrow('no retryAfterMs for leg 0');
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
