/**
 * lua/check.lua with its legs marked UNIQUE_KEY (src/store/contract.ts: a check of one leg on a key no other
 * leg of the call names, decided without a slot; marked here as src/engine/deciders/strict.ts marks them)
 * against the same calls unmarked (every leg through the slot path), call for call: the replies are the same
 * bytes and the keys hold the same values, with the same expiry.
 *
 * fast-check draws limits (every algorithm the property support has, and the sliding log), calls of 1 to 12
 * checks on 4 keys and a guard key, so that some keys are named twice or more in a call and others once, some checks of two
 * legs (the check's own key, then a guard key that checks of one leg name too), costs of 0 to 3 and the time
 * moving by 0 to a period. The two runs use their own key prefixes on a redis-server whose clock stands still
 * (test/helpers/redis.ts startFrozenRedis: no key expires between the two runs of a call), the caller's clock
 * (ARGV[1] = 0) deciding.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../src/config/policies.js';
import { scriptBurst, scriptPeriod } from '../../src/engine/calendar-args.js';
import { frozenCheckRedis, marked, packed } from '../helpers/check-legs.js';
import { limitArb } from './support.js';
import type { CompiledLimit } from '../../src/config/policy-spec.js';

const redis = frozenCheckRedis();
const lib = redis.lib;

/** One check: its limit (index), key (index; 4: the guard key), cost, and whether a guard leg on the guard key follows. */
interface Check {
  limit: number;
  key: number;
  cost: number;
  guarded: boolean;
}

const checkArb = fc.record({
  limit: fc.integer({ min: 0, max: 2 }),
  // 4: a check of one leg on the guard key itself, under the guard's limit
  key: fc.integer({ min: 0, max: 4 }),
  cost: fc.integer({ min: 0, max: 3 }),
  guarded: fc.boolean(),
});

const runArb = fc.record({
  limits: fc.array(fc.oneof(
    { weight: 4, arbitrary: limitArb() },
    { weight: 1, arbitrary: fc.record({ algorithm: fc.constant('sliding_log' as const), limit: fc.integer({ min: 1, max: 5 }), period: fc.integer({ min: 1, max: 5000 }) }) },
  ), { minLength: 3, maxLength: 3 }),
  guard: limitArb(),
  calls: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 6000 }), checks: fc.array(checkArb, { minLength: 1, maxLength: 12 }) }), { minLength: 1, maxLength: 8 }),
});

let runs = 0;

describe('check script: legs marked UNIQUE_KEY decide as the slot path does', () => {
  it('gives the same reply bytes and leaves the same values, call for call', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ({ limits, guard, calls }) => {
      const compiled = compilePolicies({
        ...Object.fromEntries(limits.map((l, i) => [`p${i}`, l])),
        guard,
      });
      const limitOf = (name: string): CompiledLimit => compiled.get(name)!.limits[0];
      const run = ++runs;
      const prefixes = [`u${run}:`, `s${run}:`];
      let now = 1_800_000_000_000;
      for (const call of calls) {
        now += call.dt;
        const names: string[] = [];
        const args: number[] = [];
        const leg = (l: CompiledLimit, cost: number, group: number): void => {
          args.push(l.algorithmCode, l.limit, scriptPeriod(l, now), scriptBurst(l, now), cost, group);
        };
        for (const c of call.checks) {
          if (c.key === 4) {
            names.push('{guard}:0');
            leg(limitOf('guard'), c.cost, 1);
            continue;
          }
          const l = limitOf(`p${c.limit}`);
          // a sliding log is never guarded here: its own key's leg only
          const guarded = c.guarded && l.algorithm !== 'sliding_log';
          names.push(`{p${c.limit}:k${c.key}}:0`);
          leg(l, c.cost, guarded ? 2 : 1);
          if (guarded) {
            names.push('{guard}:0');
            leg(limitOf('guard'), c.cost, 0);
          }
        }
        const replies: Buffer[] = [];
        for (const [k, prefix] of prefixes.entries()) {
          const keys = names.map((n) => prefix + n);
          const legs = packed(k === 0 ? marked(keys, args) : args);
          replies.push(await redis.client.callBuffer('FCALL', lib.fn, keys.length, ...keys, '0', String(now), String(keys.length), legs) as Buffer);
        }
        expect(replies[0].equals(replies[1]), `call at ${now}: ${JSON.stringify(call.checks)}`).toBe(true);
        for (const n of new Set(names)) {
          const [a, b] = await Promise.all(prefixes.map((p) => redis.client.getBuffer(p + n)));
          expect(a === null ? null : a.toString('hex'), n).toBe(b === null ? null : b.toString('hex'));
          const [ta, tb] = await Promise.all(prefixes.map((p) => redis.client.pttl(p + n)));
          expect(ta, `${n}: PTTL`).toBe(tb);
        }
      }
    }), { numRuns: 150 });
  }, 120_000);
});
