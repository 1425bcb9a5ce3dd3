/**
 * src/store/reply.ts unpackReply on an ADMITTED row (lua/check.lua: −1 − the tokens·P left): its remaining and
 * resetAfterMs, made by one floating division each, equal the exact integer divisions (lua/lib.lua fdiv, cdiv;
 * src/store/memory-algorithms.ts) for every bucket the loader admits (B·P ≤ 2^51) and every x from 0 to B·P,
 * the edges (x = 0, x = B·P, x one off a multiple of P or of L) drawn as often as the rest.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cdiv, fdiv } from '../../src/store/memory-algorithms.js';
import { admittedRow, unpackReply } from '../../src/store/reply.js';

const MAX = 2 ** 51;

const bucketArb = fc.record({
  L: fc.oneof(fc.integer({ min: 1, max: 1_000 }), fc.integer({ min: 1, max: MAX })),
  P: fc.oneof(fc.integer({ min: 1, max: 86_400_000 }), fc.constantFrom(1, 1_000, 60_000, 3_600_000)),
  b: fc.double({ min: 0, max: 1, noNaN: true }),
}).chain(({ L, P, b }) => {
  const B = Math.max(1, Math.floor((MAX / P) * b));
  const BP = B * P;
  return fc.record({
    L: fc.constant(L), P: fc.constant(P), B: fc.constant(B),
    x: fc.oneof(
      fc.integer({ min: 0, max: BP }),
      fc.constantFrom(0, BP, Math.max(0, BP - 1)),
      fc.integer({ min: 0, max: Math.floor(BP / P) }).map((k) => Math.min(BP, Math.max(0, k * P - 1))),
      fc.integer({ min: 0, max: Math.floor(BP / L) }).map((k) => Math.min(BP, Math.max(0, BP - k * L + 1))),
    ),
  });
});

describe('unpackReply: an admitted token bucket\'s row of one number', () => {
  it('gives remaining ⌊x / P⌋ and resetAfterMs ⌈(B·P − x) / L⌉ exactly', () => {
    fc.assert(fc.property(bucketArb, ({ L, P, B, x }) => {
      const raw = Buffer.alloc(16);
      raw.writeDoubleLE(admittedRow(x), 0);
      raw.writeDoubleLE(7, 8);
      const got = unpackReply(raw, [0, L, P, B, 1, 1], 0);
      expect(got).toStrictEqual([0, fdiv(x, P), cdiv(B * P - x, L), 0, 7]);
    }), { numRuns: 20_000 });
  });
});
