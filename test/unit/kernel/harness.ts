/**
 * Helpers for driving the WASM kernel directly (no front, no shards): a `Kernel` built from
 * build/kernel.wasm, legs written straight into `legIn`, `decide(n, now)`, rows read back from `legOut`.
 *
 * Keys are small integers mapped to distinct non-zero 64-bit hashes (see {@link keyHash}); the kernel never
 * sees key bytes here, only hashes, exactly as the shard workers do.
 */
import { Kernel, kernelModule } from '../../../src/shard/kernel.js';
import { DELAY_SHIFT, GROUP_SHIFT, LEG_IN, LEG_OUT, type KernelLimit } from '../../../src/shard/protocol.js';
import { ALGORITHM_CODES } from '../../../src/config/policy-spec.js';

export const TOKEN_BUCKET = ALGORITHM_CODES.token_bucket;
export const GCRA = ALGORITHM_CODES.gcra;
export const FIXED_WINDOW = ALGORITHM_CODES.fixed_window;
export const SLIDING_WINDOW = ALGORITHM_CODES.sliding_window;

import {
  CODE_ALLOW as ALLOW, CODE_DENY as DENY, CODE_NEVER as NEVER, CODE_BAD_LIMIT as BAD_LIMIT,
} from '../../../src/shard/protocol.js';

export { ALLOW, DENY, NEVER, BAD_LIMIT };

/** 2^53 − 1. */
export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

export function lim(algorithmCode: number, limit: number, periodMs: number, burst = limit): KernelLimit {
  return { algorithmCode, limit, periodMs, burst };
}

export function newKernel(limits: readonly KernelLimit[], opts: { maxKeys?: number; maxBatch?: number } = {}): Kernel {
  return new Kernel(kernelModule(), { maxKeys: opts.maxKeys ?? 1024, maxBatch: opts.maxBatch ?? 64, limits });
}

/** murmur3's 32-bit finaliser: a bijection on u32 with fmix32(0) = 0. */
export function fmix32(x: number): number {
  x >>>= 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35) >>> 0;
  x ^= x >>> 16;
  return x >>> 0;
}

/**
 * A distinct, non-zero 64-bit hash for key id 0 ≤ id < 2^32 − 1, as [lo, hi]. lo = fmix32(id + 1) is a
 * bijection of id + 1 ≠ 0, so distinct ids never collide and lo is never 0.
 */
export function keyHash(id: number): [number, number] {
  return [fmix32(id + 1), fmix32((id ^ 0x5bd1e995) + 0x9e3779b9)];
}

export interface Leg {
  key: number;
  limit: number;
  cost: number;
  /** onLimit: delay: the most ms this leg may wait to be admitted (IN_LIMIT's DELAY_SHIFT part); default 0. */
  delay?: number;
}

export interface Out {
  code: number;
  remaining: number;
  reset: number;
  retry: number;
}

/** Writes leg `row` of legIn. `group` (> 1) marks the first leg of a group of that many legs. */
export function writeLeg(k: Kernel, row: number, leg: Leg, group = 0): void {
  const [lo, hi] = keyHash(leg.key);
  const r = row * LEG_IN;
  k.legIn[r] = lo;
  k.legIn[r + 1] = hi;
  k.legIn[r + 2] = leg.limit + group * GROUP_SHIFT + (leg.delay ?? 0) * DELAY_SHIFT;
  k.legIn[r + 3] = leg.cost;
}

export function readOut(k: Kernel, row: number): Out {
  const r = row * LEG_OUT;
  return { code: k.legOut[r], remaining: k.legOut[r + 1], reset: k.legOut[r + 2], retry: k.legOut[r + 3] };
}

/** One single-leg check. */
export function check(k: Kernel, key: number, limit: number, cost: number, now: number): Out {
  writeLeg(k, 0, { key, limit, cost });
  k.decide(1, now);
  return readOut(k, 0);
}

/** A peek (cost 0). */
export function peek(k: Kernel, key: number, limit: number, now: number): Out {
  return check(k, key, limit, 0, now);
}

/** One check made of several legs, decided all-or-nothing (groupLength in the first leg's meta field). */
export function group(k: Kernel, legs: readonly Leg[], now: number): Out[] {
  legs.forEach((leg, i) => writeLeg(k, i, leg, i === 0 ? legs.length : 0));
  k.decide(legs.length, now);
  return legs.map((_, i) => readOut(k, i));
}

/** Independent single legs in one batch (no groups). */
export function batch(k: Kernel, legs: readonly Leg[], now: number): Out[] {
  legs.forEach((leg, i) => writeLeg(k, i, leg));
  k.decide(legs.length, now);
  return legs.map((_, i) => readOut(k, i));
}

export const allow = (remaining: number, reset: number): Out => ({ code: ALLOW, remaining, reset, retry: 0 });
/** Admitted with a delay (onLimit: delay): the wait rides in the retry field; nothing is left. */
export const later = (reset: number, delay: number): Out => ({ code: ALLOW, remaining: 0, reset, retry: delay });
export const deny = (remaining: number, reset: number, retry: number): Out => ({ code: DENY, remaining, reset, retry });
export const never = (remaining: number, reset: number): Out => ({ code: NEVER, remaining, reset, retry: -1 });

// ---------------------------------------------------------------------------------------------------------
// XXH64, written from the spec (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) with BigInt,
// independently of assembly/hash.ts.
// ---------------------------------------------------------------------------------------------------------

const M64 = (1n << 64n) - 1n;
const PRIME64_1 = 0x9e3779b185ebca87n;
const PRIME64_2 = 0xc2b2ae3d27d4eb4fn;
const PRIME64_3 = 0x165667b19e3779f9n;
const PRIME64_4 = 0x85ebca77c2b2ae63n;
const PRIME64_5 = 0x27d4eb2f165667c5n;

const rotl64 = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M64;

function readLE(bytes: Uint8Array, at: number, n: number): bigint {
  let v = 0n;
  for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(bytes[at + i]);
  return v;
}

function xxRound(acc: bigint, lane: bigint): bigint {
  acc = (acc + lane * PRIME64_2) & M64;
  acc = rotl64(acc, 31n);
  return (acc * PRIME64_1) & M64;
}

function xxMerge(acc: bigint, v: bigint): bigint {
  acc ^= xxRound(0n, v);
  return (acc * PRIME64_1 + PRIME64_4) & M64;
}

export function xxh64Ref(input: Uint8Array, seed: bigint = 0n): bigint {
  seed &= M64;
  const len = input.length;
  let p = 0;
  let acc: bigint;
  if (len >= 32) {
    let a1 = (seed + PRIME64_1 + PRIME64_2) & M64;
    let a2 = (seed + PRIME64_2) & M64;
    let a3 = seed;
    let a4 = (seed - PRIME64_1) & M64;
    while (p + 32 <= len) {
      a1 = xxRound(a1, readLE(input, p, 8));
      a2 = xxRound(a2, readLE(input, p + 8, 8));
      a3 = xxRound(a3, readLE(input, p + 16, 8));
      a4 = xxRound(a4, readLE(input, p + 24, 8));
      p += 32;
    }
    acc = (rotl64(a1, 1n) + rotl64(a2, 7n) + rotl64(a3, 12n) + rotl64(a4, 18n)) & M64;
    acc = xxMerge(acc, a1);
    acc = xxMerge(acc, a2);
    acc = xxMerge(acc, a3);
    acc = xxMerge(acc, a4);
  } else {
    acc = (seed + PRIME64_5) & M64;
  }
  acc = (acc + BigInt(len)) & M64;
  while (len - p >= 8) {
    acc ^= xxRound(0n, readLE(input, p, 8));
    acc = (rotl64(acc, 27n) * PRIME64_1 + PRIME64_4) & M64;
    p += 8;
  }
  if (len - p >= 4) {
    acc ^= (readLE(input, p, 4) * PRIME64_1) & M64;
    acc = (rotl64(acc, 23n) * PRIME64_2 + PRIME64_3) & M64;
    p += 4;
  }
  while (p < len) {
    acc ^= (BigInt(input[p]) * PRIME64_5) & M64;
    acc = (rotl64(acc, 11n) * PRIME64_1) & M64;
    p++;
  }
  acc ^= acc >> 33n;
  acc = (acc * PRIME64_2) & M64;
  acc ^= acc >> 29n;
  acc = (acc * PRIME64_3) & M64;
  acc ^= acc >> 32n;
  return acc;
}

/**
 * Hashes byte strings through the kernel's hashBatch (Kernel.hash): each row is [offset, length, seedLo,
 * seedHi] over the key region; the result is read back as a 64-bit BigInt.
 */
export function kernelHashMany(k: Kernel, inputs: ReadonlyArray<{ bytes: Uint8Array; seed?: bigint }>): bigint[] {
  let offset = 0;
  inputs.forEach(({ bytes, seed = 0n }, i) => {
    k.keyBytes.set(bytes, offset);
    k.hashIn[i * 4] = offset;
    k.hashIn[i * 4 + 1] = bytes.length;
    k.hashIn[i * 4 + 2] = Number(seed & 0xffffffffn);
    k.hashIn[i * 4 + 3] = Number((seed >> 32n) & 0xffffffffn);
    offset += bytes.length;
  });
  k.hash(inputs.length);
  return inputs.map((_, i) => (BigInt(k.hashOut[i * 2 + 1]) << 32n) | BigInt(k.hashOut[i * 2]));
}

/** Arbitrary rows in one batch: `group` (> 1) on a row makes it the first leg of a group of that many. */
export function rows(k: Kernel, legs: ReadonlyArray<{ leg: Leg; group?: number }>, now: number): Out[] {
  legs.forEach(({ leg, group: g }, i) => writeLeg(k, i, leg, g ?? 0));
  k.decide(legs.length, now);
  return legs.map((_, i) => readOut(k, i));
}
