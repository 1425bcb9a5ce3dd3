/**
 * The in-memory store decides and merges as the Redis store does: fast-check draws sequences of strict
 * batches (every algorithm, groups of one or two legs, keys shared between checks and between algorithms so
 * that unreadable states occur) and sync merges (retried and split batch ids), runs each on a RedisStore
 * (lua/check.lua, lua/sync.lua on the run's shared redis-server) and on a MemoryStore, and compares every
 * number of every reply and the stored bytes of every key after each step. Both run on the caller's clock
 * (`limiter` time); periods are long and times fall early in their windows, so no key expires during a run
 * (Redis expires by its own wall clock).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../src/store/redis.js';
import { MemoryStore } from '../../src/store/memory.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** Noon, day 20,000: the first minutes of an hour and the middle of a day. */
const BASE = 20_000 * DAY + 12 * HOUR;

interface Leg { alg: number; L: number; P: number; B: number; key: number }
/** `algs`: each key's algorithm in this batch (a key holds one kind of state; from batch to batch it may change). */
interface CheckOp { kind: 'check'; checks: Array<{ legs: Leg[]; cost: number }>; algs: number[]; dt: number }
interface MergeOp { kind: 'merge'; legs: Array<Leg & { d: number }>; id: number; parent: number | null; dt: number }

const legArb: fc.Arbitrary<Leg> = fc.record({
  alg: fc.constant(-1), // the batch's algorithm for the key (CheckOp.algs)
  L: fc.integer({ min: 1, max: 12 }),
  P: fc.constantFrom(HOUR, DAY),
  B: fc.integer({ min: 1, max: 12 }),
  key: fc.integer({ min: 0, max: 3 }),
});
const checkArb: fc.Arbitrary<CheckOp> = fc.record({
  kind: fc.constant('check' as const),
  checks: fc.array(fc.record({ legs: fc.array(legArb, { minLength: 1, maxLength: 2 }), cost: fc.integer({ min: 0, max: 5 }) }), { minLength: 1, maxLength: 3 }),
  algs: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 4, maxLength: 4 }),
  dt: fc.integer({ min: 0, max: 20_000 }),
});
const mergeArb: fc.Arbitrary<MergeOp> = fc.record({
  kind: fc.constant('merge' as const),
  legs: fc.array(fc.record({
    alg: fc.integer({ min: 0, max: 3 }), L: fc.integer({ min: 1, max: 12 }), P: fc.constantFrom(HOUR, DAY),
    B: fc.integer({ min: 1, max: 12 }), key: fc.integer({ min: 0, max: 3 }), d: fc.integer({ min: 0, max: 6 }),
  }), { minLength: 1, maxLength: 3 }),
  id: fc.integer({ min: 0, max: 3 }),
  parent: fc.option(fc.integer({ min: 0, max: 3 })),
  dt: fc.integer({ min: 0, max: 20_000 }),
});

/** A leg's 6 script numbers at `t`: a calendar leg's P and B are the ends of t's day and the next (calendar-args.ts). */
function legArgs(l: Leg, cost: number, group: number, t: number): number[] {
  if (l.alg === 4) {
    const end = (Math.floor(t / DAY) + 1) * DAY;
    return [4, l.L, end, end + DAY, cost, group];
  }
  return [l.alg, l.L, l.P, l.B, cost, group];
}

describe('MemoryStore against RedisStore', () => {
  let redis: SharedRedis;
  let rs: RedisStore;
  let run = 0;
  beforeAll(async () => {
    redis = await sharedRedis();
    rs = RedisStore.create({ url: redis.url, clock: 'limiter', timeoutMs: 5000 });
    await rs.connected(2000);
  });
  afterAll(async () => {
    await rs?.close();
    await redis?.stop();
  });

  it('gives the same replies and stores the same bytes, step by step', async () => {
    await fc.assert(fc.asyncProperty(fc.array(fc.oneof(checkArb, checkArb, mergeArb), { minLength: 1, maxLength: 12 }), async (ops) => {
      run++;
      const prefix = `sluice:m${run}:`;
      const ms = new MemoryStore({ time: 'limiter' });
      const keyOf = (k: number): string => `${prefix}k${k}`;
      const all = [0, 1, 2, 3].map(keyOf);
      let t = BASE;
      for (const op of ops) {
        t += op.dt;
        if (op.kind === 'check') {
          const keys: string[] = [];
          const args: number[] = [];
          for (const c of op.checks) {
            c.legs.forEach((l, j) => {
              keys.push(keyOf(l.key));
              args.push(...legArgs({ ...l, alg: op.algs[l.key] }, c.cost, j === 0 ? c.legs.length : 0, t));
            });
          }
          const [a, b] = await Promise.all([rs.decideWide(keys, args, t), ms.decideWide(keys, args, t)]);
          expect(b).toStrictEqual(a);
        } else {
          const keys = op.legs.map((l) => keyOf(l.key));
          const args = op.legs.flatMap((l) => [l.alg, l.L, l.P, l.B, l.d]);
          const id = `${prefix}b${op.id}`;
          const o = op.parent === null ? {} : { parents: [`${prefix}b${op.parent}p`] };
          const [a, b] = await Promise.all([rs.merge(keys, args, t, id, o), ms.merge(keys, args, t, id, o)]);
          expect(b).toStrictEqual(a);
        }
        const [ra, rb] = await Promise.all([rs.read(all, null), ms.read(all)]);
        expect(rb).toStrictEqual(ra);
      }
      expect(ms.stats().scriptErrors).toBeGreaterThanOrEqual(0);
    }), { numRuns: 80, seed: 12 });
    // both stores counted the same unreadable calls over the whole property
    expect(rs.stats().scriptErrors).toBeGreaterThan(0);
  });

  it('forgets a removed key and says how many existed; its clock is the given one', async () => {
    let now = BASE;
    const ms = new MemoryStore({ clock: () => now });
    const legs = [0, 10, HOUR, 10, 3, 1];
    const first = await ms.decide(['sluice:x'], legs, 0);
    expect(first).toStrictEqual([0, 7, 3 * HOUR / 10, 0]);
    expect(await ms.remove(['sluice:x', 'sluice:y'], null)).toBe(1);
    expect(await ms.decide(['sluice:x'], legs, 0)).toStrictEqual(first);
    expect(await ms.clock()).toBe(BASE);
    // the state expires with its PX (the time until the bucket is full again) on the store's clock
    now += 3 * HOUR / 10;
    expect(await ms.read(['sluice:x'], null)).toStrictEqual([null]);
  });
});
