/**
 * ADVERSARIAL (holds on 3b83af1): Robin Hood table under insert/evict churn at 96% load, with hashes whose
 * home slots are crowded into 1-64 clusters (long probe chains, many backward shifts). After every step every
 * key ever charged is peeked: it must hold exactly what was charged since its last eviction, or be absent
 * (peek = full bucket); the number of present keys must equal the kernel's count.
 */
import { describe, expect, it } from 'vitest';
import { Kernel, kernelModule } from '../../../src/shard/kernel.js';

const B = 1_000_000;

function run(maxKeys: number, clusters: number, seed0: number, steps: number): { errors: string[]; evictions: number } {
  const k = new Kernel(kernelModule(), { maxKeys, maxBatch: 64, limits: [{ algorithmCode: 0, limit: 1, periodMs: 2 ** 22, burst: B }] });
  const mask = k.stats().slots - 1;
  let seed = seed0 >>> 0 || 1;
  const rnd = (): number => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed; };
  const hashes: Array<[number, number]> = [];
  const seen = new Set<string>();
  while (hashes.length < 4 * maxKeys) {
    const home = (rnd() % clusters) * Math.floor((mask + 1) / clusters);
    const lo = (((rnd() & ~mask) | home) >>> 0) || 1;
    const hi = rnd() >>> 0;
    if (seen.has(`${lo}:${hi}`)) continue;
    seen.add(`${lo}:${hi}`);
    hashes.push([lo, hi]);
  }
  const one = (key: number, cost: number): number => {
    k.legIn[0] = hashes[key][0]; k.legIn[1] = hashes[key][1]; k.legIn[2] = 0; k.legIn[3] = cost;
    k.decide(1, 1000);
    return B - k.legOut[1];
  };
  const charged = new Map<number, number>();
  const errors: string[] = [];
  for (let step = 0; step < steps && errors.length < 5; step++) {
    const key = rnd() % hashes.length;
    const cost = 1 + (rnd() % 7);
    const before = charged.get(key) ?? 0;
    const got = one(key, cost);
    if (got === before + cost) charged.set(key, got);
    else if (got === cost) charged.set(key, cost); // it had been evicted
    else errors.push(`step ${step}: key ${key} holds ${got}, expected ${before + cost} or ${cost}`);
    let present = 0;
    for (const [kk, v] of charged) {
      const g = one(kk, 0);
      if (g === v) present++;
      else if (g === 0) charged.delete(kk);
      else errors.push(`step ${step}: key ${kk} holds ${g}, expected ${v} or 0`);
    }
    if (present !== k.stats().keys) errors.push(`step ${step}: ${present} keys found, kernel counts ${k.stats().keys}`);
  }
  return { errors, evictions: k.stats().evictions };
}

describe('Robin Hood table churn at 96% load', () => {
  it.each([
    [983, 1, 3], [983, 2, 11], [983, 64, 7], [120, 1, 21], [3, 3, 5],
  ])('maxKeys %i, %i clusters, seed %i', (maxKeys, clusters, seed) => {
    const r = run(maxKeys, clusters, seed, maxKeys > 500 ? 2500 : 3000);
    expect(r.errors).toStrictEqual([]);
    expect(r.evictions).toBeGreaterThan(100);
  }, 120_000);
});
