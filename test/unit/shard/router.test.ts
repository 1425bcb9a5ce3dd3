/**
 * Range sharding: shard = floor(hi · N / 2^32) from the hash's high 32 bits. Exact boundaries for every
 * shard count the limiter accepts (1..64), and a golden distribution of 10,000 known keys hashed by the
 * kernel's XXH64: the counts are pinned on purpose, so a change to the hash or to the router fails here
 * (and must be deliberate: it moves every key to another shard's state).
 */
import { describe, expect, it } from 'vitest';
import { shardOf } from '../../../src/shard/router.js';
import { kernelHashMany, lim, newKernel, xxh64Ref, TOKEN_BUCKET } from '../kernel/harness.js';

const TWO32 = 2 ** 32;

describe('shardOf boundaries', () => {
  it('N = 2: 0 → 0, 2^31 − 1 → 0, 2^31 → 1, 2^32 − 1 → 1', () => {
    expect(shardOf(0, 2)).toBe(0);
    expect(shardOf(2 ** 31 - 1, 2)).toBe(0);
    expect(shardOf(2 ** 31, 2)).toBe(1);
    expect(shardOf(TWO32 - 1, 2)).toBe(1);
  });

  it('N = 1 maps everything to shard 0', () => {
    for (const hi of [0, 1, 2 ** 31, TWO32 - 1]) expect(shardOf(hi, 1)).toBe(0);
  });

  it('for every N in 1..64: 0 → 0, 2^32 − 1 → N − 1, and each range starts exactly at ceil(s·2^32 / N)', () => {
    for (let n = 1; n <= 64; n++) {
      expect(shardOf(0, n)).toBe(0);
      expect(shardOf(TWO32 - 1, n)).toBe(n - 1);
      for (let s = 1; s < n; s++) {
        const start = Number((BigInt(s) * 2n ** 32n + BigInt(n) - 1n) / BigInt(n));
        expect(shardOf(start - 1, n), `N ${n}: ${start - 1}`).toBe(s - 1);
        expect(shardOf(start, n), `N ${n}: ${start}`).toBe(s);
      }
    }
  });

  it('is monotone in hi and always in [0, N)', () => {
    let x = 12345;
    for (const n of [2, 3, 4, 7, 16, 63, 64]) {
      let prevHi = -1, prev = -1;
      const his: number[] = [];
      for (let i = 0; i < 2000; i++) {
        x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
        his.push(x);
      }
      his.sort((a, b) => a - b);
      const bad: string[] = [];
      for (const hi of his) {
        const s = shardOf(hi, n);
        if (!(Number.isInteger(s) && s >= 0 && s < n)) bad.push(`N ${n}: ${hi} → ${s}`);
        if (hi > prevHi && s < prev) bad.push(`N ${n}: ${hi} → ${s} after ${prevHi} → ${prev}`);
        prevHi = hi;
        prev = s;
      }
      expect(bad).toStrictEqual([]);
    }
  });
});

describe('golden distribution', () => {
  const k = newKernel([lim(TOKEN_BUCKET, 1, 1000)], { maxKeys: 1, maxBatch: 2000 });
  const enc = new TextEncoder();
  /** XXH64("key-i", seed 0) through the kernel, for i in [0, 10000), each checked against the reference. */
  const hashes: bigint[] = [];
  for (let from = 0; from < 10_000; from += 2000) {
    const inputs = Array.from({ length: 2000 }, (_, i) => ({ bytes: enc.encode(`key-${from + i}`) }));
    const got = kernelHashMany(k, inputs);
    got.forEach((h, i) => {
      if (h !== xxh64Ref(inputs[i].bytes)) throw new Error(`kernel XXH64 of key-${from + i} differs from the spec`);
    });
    hashes.push(...got);
  }
  const hiOf = (h: bigint): number => Number(h >> 32n);

  it('10,000 keys "key-0".."key-9999" over 4 shards: [2483, 2470, 2435, 2612]', () => {
    const counts = [0, 0, 0, 0];
    for (const h of hashes) counts[shardOf(hiOf(h), 4)]++;
    expect(counts).toStrictEqual([2483, 2470, 2435, 2612]);
  });

  it('the same keys over 2 shards: [4953, 5047]; ranges nest (shard s of 4 lies in shard ⌊s/2⌋ of 2)', () => {
    const counts = [0, 0];
    for (const h of hashes) {
      const s2 = shardOf(hiOf(h), 2);
      counts[s2]++;
      expect(s2).toBe(Math.floor(shardOf(hiOf(h), 4) / 2));
    }
    expect(counts).toStrictEqual([4953, 5047]);
  });

  it('the first 16 keys\' shards (of 4) are pinned', () => {
    expect(hashes.slice(0, 16).map((h) => shardOf(hiOf(h), 4))).toStrictEqual([0, 3, 1, 2, 2, 2, 3, 1, 0, 0, 2, 1, 1, 0, 1, 2]);
  });

  it('the distribution is balanced (each of 4 shards within 5% of 2500)', () => {
    const counts = [0, 0, 0, 0];
    for (const h of hashes) counts[shardOf(hiOf(h), 4)]++;
    for (const c of counts) expect(Math.abs(c - 2500)).toBeLessThan(125);
  });
});
