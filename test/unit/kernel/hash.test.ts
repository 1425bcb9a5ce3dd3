/**
 * XXH64 as the kernel computes it (assembly/hash.ts through Kernel.hash / hashBatch), against published
 * vectors and against an independent BigInt implementation written from the spec (harness.ts: xxh64Ref).
 *
 * Lengths 0..100 cover every path: < 32 bytes (no stripes), 32..63 (one stripe), 64..95 (two), 96..100
 * (three), and every tail shape (0..3 eight-byte lanes, with or without a four-byte word, 0..3 single bytes).
 */
import { describe, expect, it } from 'vitest';
import { kernelHashMany, newKernel, lim, xxh64Ref, TOKEN_BUCKET } from './harness.js';

const k = newKernel([lim(TOKEN_BUCKET, 1, 1000)], { maxKeys: 1, maxBatch: 256 });
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
const hex = (x: bigint): string => '0x' + x.toString(16).toUpperCase().padStart(16, '0');

/** Deterministic bytes (xorshift32), so every length gets a different, non-trivial content. */
function bytesOf(len: number, salt: number): Uint8Array {
  const out = new Uint8Array(len);
  let s = (0x9e3779b9 ^ Math.imul(salt + 1, 0x85ebca6b)) >>> 0 || 1;
  for (let i = 0; i < len; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out[i] = s & 0xff;
  }
  return out;
}

const SEEDS: bigint[] = [
  0n,
  1n,
  0xffffffffn, // all of seedLo
  0x100000000n, // seedHi only
  0x9e3779b97f4a7c15n,
  (1n << 64n) - 1n, // seed − PRIME64_1 and seed + PRIME64_1 + PRIME64_2 wrap
  0x27d4eb2f165667c5n,
];

describe('XXH64 known vectors', () => {
  it.each([
    ['', 0xef46db3751d8e999n],
    ['a', 0xd24ec4f1a98c6e5bn],
    ['abc', 0x44bc2cf5ad770999n],
  ])('XXH64(%j, seed 0)', (s, want) => {
    const [got] = kernelHashMany(k, [{ bytes: utf8(s) }]);
    expect(hex(got)).toBe(hex(want));
    // the reference implementation agrees with the published vector too
    expect(hex(xxh64Ref(utf8(s)))).toBe(hex(want));
  });
});

describe('XXH64: kernel vs independent BigInt implementation', () => {
  for (const seed of SEEDS) {
    it(`lengths 0..100, seed ${hex(seed)}`, () => {
      const inputs = Array.from({ length: 101 }, (_, len) => ({ bytes: bytesOf(len, len + Number(seed & 0xffffn)), seed }));
      const got = kernelHashMany(k, inputs);
      const mismatches: string[] = [];
      inputs.forEach(({ bytes }, len) => {
        const want = xxh64Ref(bytes, seed);
        if (got[len] !== want) mismatches.push(`len ${len}: kernel ${hex(got[len])} != spec ${hex(want)}`);
      });
      expect(mismatches).toStrictEqual([]);
    });
  }

  it('all-0xff bytes (every lane and tail byte at its maximum), lengths 0..100, seeds 0 and 2^64−1', () => {
    for (const seed of [0n, (1n << 64n) - 1n]) {
      const inputs = Array.from({ length: 101 }, (_, len) => ({ bytes: new Uint8Array(len).fill(0xff), seed }));
      const got = kernelHashMany(k, inputs);
      inputs.forEach(({ bytes }, len) => expect(hex(got[len]), `len ${len}`).toBe(hex(xxh64Ref(bytes, seed))));
    }
  });

  it('does not depend on the key\'s offset (alignment) in the key region', () => {
    const bytes = bytesOf(77, 5);
    const want = xxh64Ref(bytes, 42n);
    for (let pad = 0; pad < 9; pad++) {
      const got = kernelHashMany(k, [{ bytes: new Uint8Array(pad) }, { bytes, seed: 42n }]);
      expect(hex(got[1]), `offset ${pad}`).toBe(hex(want));
    }
  });

  it('hashes a whole batch of mixed rows independently (row seeds and lengths are not mixed up)', () => {
    const inputs = Array.from({ length: 200 }, (_, i) => ({ bytes: bytesOf(i % 67, i), seed: BigInt(i) * 0x1000000010001n }));
    const got = kernelHashMany(k, inputs);
    inputs.forEach(({ bytes, seed }, i) => expect(hex(got[i]), `row ${i}`).toBe(hex(xxh64Ref(bytes, seed))));
  });

  it('long keys: 1024 bytes (the longest key) with several seeds', () => {
    for (const seed of SEEDS) {
      const bytes = bytesOf(1024, 99);
      const [got] = kernelHashMany(k, [{ bytes, seed }]);
      expect(hex(got)).toBe(hex(xxh64Ref(bytes, seed)));
    }
  });
});
