/**
 * A run of one key in a batch (consecutive single legs on the same hash, a hot key's batch) decides exactly
 * what the same legs decide one batch each: every leg's output and the table's state after, with new keys
 * inserted and evicting at a full table inside a run, denials (no write), a key under two limit ids, and
 * sliding logs (whose commit may evict and look the key up again). What a kernel that decides a run from
 * the slot the previous leg left (no lookup per leg) must keep; a mutant that looks up nothing for a run's
 * later legs fails it.
 */
import { describe, expect, it } from 'vitest';
import { ALGORITHM_CODES } from '../../../src/config/policy-spec.js';
import { FIXED_WINDOW, GCRA, TOKEN_BUCKET, batch, lim, newKernel, peek, readOut, writeLeg, type Leg, type Out } from './harness.js';

const SLIDING_LOG = ALGORITHM_CODES.sliding_log;

/** xorshift32: a fixed sequence, so a failure replays. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
}

const LIMITS = [
  lim(TOKEN_BUCKET, 5, 1000),
  lim(FIXED_WINDOW, 3, 500),
  lim(GCRA, 4, 800),
  lim(SLIDING_LOG, 3, 400),
];

/** Legs in runs of one key (1 to 12 legs), over `keys` keys, every limit, costs 0 to 3. */
function legs(next: () => number, n: number, keys: number): Leg[] {
  const out: Leg[] = [];
  while (out.length < n) {
    const key = next() % keys, limit = next() % LIMITS.length, run = 1 + (next() % 12);
    for (let j = 0; j < run && out.length < n; j++) out.push({ key, limit: next() % 5 === 0 ? (limit + 1) % LIMITS.length : limit, cost: next() % 4 });
  }
  return out;
}

describe('a run of one key in a batch', () => {
  it.each([
    ['a full table (maxKeys 8, 12 keys): inserts and evictions inside runs', 8, 12, 1],
    ['a table with room (maxKeys 64, 20 keys)', 64, 20, 2],
  ])('decides as one batch per leg: %s', (_what, maxKeys, keys, seed) => {
    const runs = newKernel(LIMITS, { maxKeys, maxBatch: 64 });
    const one = newKernel(LIMITS, { maxKeys, maxBatch: 64 });
    const next = rng(seed);
    let now = 1_000_000;
    for (let round = 0; round < 400; round++) {
      const ls = legs(next, 1 + (next() % 64), keys);
      const got = batch(runs, ls, now);
      const want: Out[] = ls.map((l) => {
        writeLeg(one, 0, l);
        one.decide(1, now);
        return readOut(one, 0);
      });
      expect(got).toEqual(want);
      now += next() % 150;
    }
    // and the state left behind is the same, key by key
    for (let key = 0; key < keys; key++) {
      for (let limit = 0; limit < LIMITS.length; limit++) expect(peek(runs, key, limit, now)).toEqual(peek(one, key, limit, now));
    }
    expect(runs.stats().keys).toBe(one.stats().keys);
  });
});
