/**
 * onLimit: delay against the reference model (test/helpers/model.ts, `maxDelayMs`), and strict mode's Lua
 * against the kernel, call for call.
 *
 * fast-check draws token_bucket and GCRA limits (the property support's: limit 0..50 and large, periods from
 * 1 ms to a day, bursts 0..100), a maxDelayMs per policy (1 ms to about two periods, sometimes the ABI's
 * largest, 2^29 − 1), single, two-limit and guarded shapes (a guard with or without a delay of its own), and
 * call sequences with the support's time moves (backwards too) and costs. Decisions must equal the model's
 * in allowed, remaining, resetAfterMs, retryAfterMs and delayMs. The wait-place bound is far above the calls
 * of a run, so it never decides here (test/unit/engine/delay.test.ts covers it).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { checkStrictEqual, checkTrue } from '../helpers/assert.js';
import { createLimiter, type Decision } from '../../src/index.js';
import { startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';
import type { ModelDecision, ModelLimit, ModelPolicy } from '../helpers/model.js';
import {
  Clock, GuardedModel, MAX_KEYS, engineSpecs, expectWellFormed, limitArb, setupCallsArb, startArb, timeline,
  type Call, type Limiter, type PolicyDef, type Setup,
} from './support.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

const MAX_DELAY = 2 ** 29 - 1;
const bucketArb = limitArb({ algorithms: ['token_bucket', 'gcra'] });

/** A maxDelayMs for limits of these periods: short, about a period or two, or the largest the ABI carries. */
function delayArb(periods: number[]): fc.Arbitrary<number> {
  const P = Math.max(...periods);
  return fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 50 }) },
    { weight: 4, arbitrary: fc.integer({ min: 1, max: Math.min(MAX_DELAY, 2 * P) }) },
    { weight: 1, arbitrary: fc.constant(MAX_DELAY) },
  );
}

function withDelay(policy: ModelPolicy, ms: number): ModelPolicy {
  return 'limits' in policy ? { limits: policy.limits.map((l) => ({ ...l, maxDelayMs: ms })) } : { ...policy, maxDelayMs: ms };
}

/** The loader's bound on a local bucket's debt: B·P + maxDelay·L ≤ 2^62 (2^51 in Redis). */
function debtOk(policy: ModelPolicy, ms: number, bound: bigint): boolean {
  const limits = 'limits' in policy ? policy.limits : [policy];
  return limits.every((l) => BigInt(l.burst ?? l.limit) * BigInt(l.period) + BigInt(ms) * BigInt(l.limit) <= bound);
}

type Shape = 'single' | 'two-limits' | 'guarded';

/** Policies p (and guard g) with delays; the guard has its own delay, or none. */
function delaySetupArb(shape: Shape, bound: bigint): fc.Arbitrary<Setup> {
  const one = (n: number): fc.Arbitrary<ModelPolicy> =>
    fc.array(bucketArb, { minLength: n, maxLength: n }).map((ls) => (ls.length === 1 ? ls[0] : { limits: ls }));
  const delayed = (p: fc.Arbitrary<ModelPolicy>, optional: boolean): fc.Arbitrary<ModelPolicy> => p.chain((pol) => {
    const periods = ('limits' in pol ? pol.limits : [pol]).map((l) => l.period);
    const d = optional ? fc.option(delayArb(periods), { nil: 0 }) : delayArb(periods);
    return d.map((ms) => (ms === 0 ? pol : withDelay(pol, ms)));
  }).filter((pol) => {
    const ls = 'limits' in pol ? pol.limits : [pol];
    return debtOk(pol, ls[0].maxDelayMs ?? 0, bound);
  });
  const limitsOf = (p: ModelPolicy): ModelLimit[] => ('limits' in p ? p.limits : [p]);
  switch (shape) {
    case 'single':
      return delayed(one(1), false).map((p) => ({ defs: { p: { policy: p } }, limits: limitsOf(p), policies: [{ name: 'p', weight: 1 }] }));
    case 'two-limits':
      return delayed(one(2), false).map((p) => ({ defs: { p: { policy: p } }, limits: limitsOf(p), policies: [{ name: 'p', weight: 1 }] }));
    case 'guarded':
      return fc.tuple(delayed(fc.oneof(one(1), one(2)), false), delayed(one(1), true)).map(([p, g]) => ({
        defs: { g: { policy: g }, p: { policy: p, guard: 'g' } },
        limits: [...limitsOf(p), ...limitsOf(g)],
        policies: [{ name: 'p', weight: 6 }, { name: 'g', weight: 1, keys: ['*', 'k0'] }],
      }));
  }
}

/** The engine's specs: the model's per-limit maxDelayMs becomes the policy's onLimit: delay. */
function delaySpecs(defs: Record<string, PolicyDef>, extra: Record<string, unknown> = {}): Policies {
  const stripped: Record<string, PolicyDef> = {};
  const delays: Record<string, number> = {};
  for (const [name, d] of Object.entries(defs)) {
    const ls = 'limits' in d.policy ? d.policy.limits : [d.policy];
    delays[name] = ls[0].maxDelayMs ?? 0;
    const strip = (l: ModelLimit): ModelLimit => {
      const { maxDelayMs: _, ...rest } = l;
      return rest;
    };
    stripped[name] = { ...d, policy: 'limits' in d.policy ? { limits: d.policy.limits.map(strip) } : strip(d.policy) };
  }
  const specs = engineSpecs(stripped) as Record<string, Record<string, unknown>>;
  for (const [name, spec] of Object.entries(specs)) {
    if (delays[name] > 0) Object.assign(spec, { onLimit: 'delay', maxDelayMs: delays[name] });
    Object.assign(spec, extra);
  }
  return specs as Policies;
}

function pickDelay(d: Decision): ModelDecision {
  const out: ModelDecision = { allowed: d.allowed, remaining: d.remaining, resetAfterMs: d.resetAfterMs, retryAfterMs: d.retryAfterMs };
  if (d.delayMs !== undefined) out.delayMs = d.delayMs;
  return out;
}

const SHAPES: Shape[] = ['single', 'two-limits', 'guarded'];

describe.each([0, 2])('onLimit delay: engine = reference model, shards: %i', (shards) => {
  it.each(SHAPES)('%s', async (shape) => {
    const runs = shards === 0 ? 150 : 20;
    await fc.assert(
      fc.asyncProperty(
        delaySetupArb(shape, 2n ** 62n).chain((s) => fc.tuple(fc.constant(s), startArb, setupCallsArb(s, { maxLength: 150 }))),
        async ([setup, start, calls]) => {
          const model = new GuardedModel(setup.defs);
          const clock = new Clock();
          const limiter = await createLimiter({ policies: delaySpecs(setup.defs), shards, clock: clock.read, maxKeys: MAX_KEYS, maxDelayed: 1_000_000 });
          try {
            for (const [i, c] of timeline(start, calls).entries()) {
              clock.now = c.t;
              const d = await limiter.check({ policy: c.policy, key: c.key, cost: c.cost });
              // check*: expect() only on a difference (test/helpers/assert.ts): this runs for every check of every run
              const where = (): string => `call #${i} (t=${c.t} policy=${c.policy} key=${c.key} cost=${c.cost})`;
              expectWellFormed(d, c.cost, where);
              if (d.delayMs !== undefined) checkTrue(d.allowed && d.delayMs > 0 && d.remaining === 0, where);
              checkStrictEqual(pickDelay(d), model.check(c.policy, c.key, c.cost, c.t), where);
            }
          } finally {
            await limiter.close();
          }
        },
      ),
      { numRuns: runs, endOnFailure: shards > 0, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false },
    );
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------------------
// strict: lua/token_bucket.lua and lua/gcra.lua with D, against the kernel
// ---------------------------------------------------------------------------------------------------------

let redis: FrozenRedis;
let prefixes = 0;

beforeAll(async () => {
  redis = await startFrozenRedis();
});

afterAll(async () => {
  await redis?.stop();
});

async function connected(limiter: Limiter): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await limiter.stats()).store?.connected) {
    if (Date.now() > deadline) throw new Error('strict limiter did not connect to Redis within 5 s');
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe('onLimit delay: strict (Lua, limiter clock) = local (kernel), batches of several checks per script call', () => {
  it.each(SHAPES)('%s', async (shape) => {
    await fc.assert(
      fc.asyncProperty(
        delaySetupArb(shape, 2n ** 51n).chain((s) => fc.tuple(fc.constant(s), startArb, setupCallsArb(s, { maxLength: 100 }))),
        fc.array(fc.boolean(), { minLength: 100, maxLength: 100 }),
        async ([setup, start, calls], together) => {
          const clock = new Clock();
          const local = await createLimiter({ policies: delaySpecs(setup.defs), shards: 0, clock: clock.read, maxKeys: MAX_KEYS, maxDelayed: 1_000_000 });
          const strict = await createLimiter({
            policies: delaySpecs(setup.defs, { consistency: 'strict', onStoreError: 'closed' }), shards: 0, clock: clock.read, maxKeys: MAX_KEYS,
            maxDelayed: 1_000_000, redis: { url: redis.url, prefix: `d${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 },
          });
          try {
            await connected(strict);
            const timed = timeline(start, calls);
            for (let i = 0; i < timed.length;) {
              // consecutive calls at one t go out in one turn (one script call) when `together` says so
              let j = i + 1;
              while (j < timed.length && together[j] && timed[j].t === timed[i].t) j++;
              const batch = timed.slice(i, j);
              clock.now = batch[0].t;
              const fire = (l: Limiter) => Promise.all(batch.map((c) => l.check({ policy: c.policy, key: c.key, cost: c.cost })));
              const [a, b] = [await fire(local), await fire(strict)];
              batch.forEach((c, k) => checkStrictEqual({ ...b[k] }, { ...a[k] }, () => `call #${i + k} (t=${c.t} ${c.policy} ${c.key} cost ${c.cost})`));
              i = j;
            }
          } finally {
            await strict.close();
            await local.close();
          }
        },
      ),
      { numRuns: 60, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false },
    );
  }, 90_000);
});

void (null as unknown as Call);
