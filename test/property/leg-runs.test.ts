/**
 * lua/check.lua's runs (src/store/leg-runs.ts: single-leg token-bucket checks on unique keys of one L, P, B and
 * cost, sent as their head alone and decided with its numbers) against the same calls marked UNIQUE_KEY only and against them
 * unmarked (every leg through the slot path), call for call: the replies are the same bytes and the keys hold
 * the same values, with the same expiry.
 *
 * fast-check draws two token-bucket limits and one of any algorithm, calls of 1 to 32 checks on 16 keys per
 * limit (so that runs form, are broken by a repeated key, another limit or another cost, and hold denials,
 * absent keys and limits of 0), one check in eight with a guard's second leg (a group, read with the runs'
 * legs expanded), costs of 0 to 3, the time moving by 0 to 6 s on the caller's clock or, one
 * call in four, Redis's own (frozen: TIME stands still, so states from the caller's later clock are ahead of
 * it), and before some calls a key's value replaced by something that is not a state (24 bytes that are not
 * integers, text, a hash) or deleted. Three key prefixes on one redis-server whose clock stands still
 * (test/helpers/redis.ts startFrozenRedis: no key expires between the runs of a call).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../src/config/policies.js';
import { scriptBurst, scriptPeriod } from '../../src/engine/calendar-args.js';
import { RUN_MARK } from '../../src/store/leg-runs.js';
import { frozenCheckRedis, marked, markedRuns, packed } from '../helpers/check-legs.js';
import { limitArb } from './support.js';

const redis = frozenCheckRedis();
const lib = redis.lib;

const KEYS_PER_LIMIT = 16;

const checkArb = fc.record({
  limit: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 2, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.constant(2) }),
  key: fc.integer({ min: 0, max: KEYS_PER_LIMIT - 1 }),
  cost: fc.oneof({ weight: 6, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 }) }),
  // one check in eight has a second leg, as a guarded check has: the script then reads every leg's numbers
  // into one table, the runs' later legs (not sent) given their head's
  guarded: fc.oneof({ weight: 7, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
});

const spoilArb = fc.record({
  limit: fc.integer({ min: 0, max: 2 }),
  key: fc.integer({ min: 0, max: KEYS_PER_LIMIT - 1 }),
  kind: fc.constantFrom('doubles' as const, 'text' as const, 'hash' as const, 'delete' as const),
});

const runArb = fc.record({
  limits: fc.tuple(limitArb({ algorithms: ['token_bucket'] }), limitArb({ algorithms: ['token_bucket'] }), limitArb()),
  calls: fc.array(fc.record({
    dt: fc.integer({ min: 0, max: 6000 }),
    redisClock: fc.boolean().chain((b) => (b ? fc.boolean() : fc.constant(false))),
    spoil: fc.option(spoilArb, { freq: 4 }),
    checks: fc.array(checkArb, { minLength: 1, maxLength: 32 }),
  }), { minLength: 1, maxLength: 8 }),
});

let runs = 0;
/** Legs decided inside a run (after its head), over all calls: the property must have exercised the shortcut. */
let inRuns = 0;

describe('check script: runs of legs decide as leg by leg', () => {
  it('gives the same reply bytes and leaves the same values, call for call', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ({ limits, calls }) => {
      const compiled = compilePolicies(Object.fromEntries(limits.map((l, i) => [`p${i}`, l])));
      const run = ++runs;
      const prefixes = [`r${run}:`, `u${run}:`, `s${run}:`];
      let now = 1_800_000_000_000;
      for (const call of calls) {
        now += call.dt;
        if (call.spoil !== null) {
          const { limit, key, kind } = call.spoil;
          for (const p of prefixes) {
            const k = `${p}{p${limit}:k${key}}:0`;
            if (kind === 'delete') await redis.client.del(k);
            else if (kind === 'hash') await redis.client.multi().del(k).hset(k, 'f', 'v').exec();
            // 24 bytes, as a state is, that are no integers; then a number written as text
            else await redis.client.set(k, kind === 'doubles' ? Buffer.from(new Float64Array([0.5, 0, 1]).buffer) : '12');
          }
        }
        const names: string[] = [];
        const args: number[] = [];
        for (const c of call.checks) {
          const l = compiled.get(`p${c.limit}`)!.limits[0];
          names.push(`{p${c.limit}:k${c.key}}:0`);
          args.push(l.algorithmCode, l.limit, scriptPeriod(l, now), scriptBurst(l, now), c.cost, c.guarded ? 2 : 1);
          if (c.guarded) {
            // the guard: limit 0's on one of two keys of its own
            const g = compiled.get('p0')!.limits[0];
            names.push(`{p0:g${c.key % 2}}:0`);
            args.push(g.algorithmCode, g.limit, scriptPeriod(g, now), scriptBurst(g, now), c.cost, 0);
          }
        }
        const replies: Buffer[] = [];
        for (const [k, prefix] of prefixes.entries()) {
          const keys = names.map((n) => prefix + n);
          let legs: ArrayLike<number> = args;
          if (k === 0) {
            const f = markedRuns(keys, args);
            for (let j = 0; j < f.length / 6; j++) if (f[6 * j] >= RUN_MARK) inRuns += Math.floor(f[6 * j] / RUN_MARK);
            legs = f;
          } else if (k === 1) legs = marked(keys, args);
          replies.push(await redis.client.callBuffer('FCALL', lib.fn, keys.length, ...keys, call.redisClock ? '1' : '0', String(now), String(keys.length),
            packed(legs)) as Buffer);
        }
        const where = `call at ${now}: ${JSON.stringify(call)}`;
        expect(replies[0].equals(replies[2]), where).toBe(true);
        expect(replies[1].equals(replies[2]), where).toBe(true);
        for (const n of new Set(names)) {
          const values = await Promise.all(prefixes.map(async (p) => ((await redis.client.type(p + n)) === 'string' ? (await redis.client.getBuffer(p + n))!.toString('hex') : await redis.client.type(p + n))));
          expect(values[0], n).toBe(values[2]);
          expect(values[1], n).toBe(values[2]);
          const ttls = await Promise.all(prefixes.map((p) => redis.client.pttl(p + n)));
          expect(ttls[0], `${n}: PTTL`).toBe(ttls[2]);
          expect(ttls[1], `${n}: PTTL`).toBe(ttls[2]);
        }
      }
    }), { numRuns: 150 });
    expect(inRuns).toBeGreaterThan(400);
  }, 180_000);
});
