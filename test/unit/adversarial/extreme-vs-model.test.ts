/**
 * ADVERSARIAL (holds on 3b83af1): the engine against the BigInt reference model at extreme but accepted policy
 * values: limits and bursts up to 2^53 - 1, periods up to 2^53 - 1 (2^52 for sliding windows), B*P / L*P
 * squeezed to 2^63 - 1, clock values at 0 and 2^48 - 1 with huge forward and backward moves; one limit, two
 * limits, and a guarded policy. RUNS=20000 passed.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ModelLimit } from '../../helpers/model.js';
import { GuardedModel, expectWellFormed, pick, withinExactBounds, withLimiter, type PolicyDef, isBucket } from '../../property/support.js';

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MAX_I64 = (1n << 63n) - 1n;
const MAX_TIME = 2 ** 48 - 1;
const ALGS = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'] as const;

const big = fc.oneof(
  fc.integer({ min: 1, max: 5 }),
  fc.constantFrom(2 ** 52, 2 ** 52 - 1, 2 ** 52 + 1, MAX_SAFE, MAX_SAFE - 1, 2 ** 31, 2 ** 32 + 1, 2 ** 40, 3 * 2 ** 50),
  fc.integer({ min: 1, max: MAX_SAFE }),
);

const limitArb: fc.Arbitrary<ModelLimit> = fc
  .record({ algorithm: fc.constantFrom(...ALGS), limit: fc.oneof(big, fc.constant(0)), period: big, burst: fc.option(big, { nil: undefined }) })
  .map(({ algorithm, limit, period, burst }) => {
    // squeeze the product near the bound
    const l: ModelLimit = { algorithm, limit, period };
    if (isBucket(algorithm) && burst !== undefined) l.burst = burst;
    const cap = BigInt(l.burst ?? l.limit);
    if (cap * BigInt(period) > MAX_I64 && cap > 0n) {
      // shrink period to the max allowed
      const p = MAX_I64 / cap;
      l.period = Number(p > BigInt(MAX_SAFE) ? BigInt(MAX_SAFE) : p) || 1;
    }
    if (algorithm === 'sliding_window' && 2 * l.period > MAX_SAFE) l.period = Math.floor(MAX_SAFE / 2);
    return l;
  })
  .filter((l) => l.period >= 1 && withinExactBounds(l));

function costs(cap: number): fc.Arbitrary<number> {
  const c = Math.min(cap, MAX_SAFE);
  return fc.oneof(
    fc.constantFrom(0, 1, c, Math.max(0, c - 1), Math.min(MAX_SAFE, c + 1), Math.floor(c / 2), Math.floor(c / 3)),
    fc.integer({ min: 0, max: c }),
  );
}

const startArb = fc.oneof(fc.constant(0), fc.constant(MAX_TIME), fc.constant(MAX_TIME - 1000), fc.integer({ min: 0, max: MAX_TIME }));

function dtArb(P: number): fc.Arbitrary<number> {
  return fc.oneof(
    fc.constant(0), fc.integer({ min: 1, max: 10 }), fc.integer({ min: -10, max: -1 }),
    fc.constantFrom(P, P - 1, P + 1, 2 * P, Math.floor(P / 2)),
    fc.integer({ min: 0, max: MAX_TIME }), fc.integer({ min: -MAX_TIME, max: 0 }),
  );
}

const shape = fc.oneof(
  limitArb.map((l) => ({ p: { policy: l } }) as Record<string, PolicyDef>),
  fc.tuple(limitArb, limitArb).map(([a, b]) => ({ p: { policy: { limits: [a, b] } } }) as Record<string, PolicyDef>),
  fc.tuple(limitArb, limitArb).map(([a, b]) => ({ g: { policy: b }, p: { policy: a, guard: 'g' } }) as Record<string, PolicyDef>),
);

function limitsOfDefs(defs: Record<string, PolicyDef>): ModelLimit[] {
  return Object.values(defs).flatMap((d) => ('limits' in d.policy ? d.policy.limits : [d.policy]));
}

describe('extreme values vs model', () => {
  it('matches the model', async () => {
    await fc.assert(
      fc.asyncProperty(
        shape.chain((defs) => {
          const ls = limitsOfDefs(defs);
          const P = Math.max(...ls.map((l) => l.period));
          const cap = Math.max(...ls.map((l) => (isBucket(l.algorithm) ? l.burst ?? l.limit : l.limit)));
          return fc.tuple(fc.constant(defs), startArb, fc.array(fc.record({ dt: dtArb(P), cost: costs(cap), key: fc.constantFrom('a', 'b'), pol: fc.constantFrom(...Object.keys(defs)) }), { minLength: 1, maxLength: 40 }));
        }),
        async ([defs, start, calls]) => {
          const model = new GuardedModel(defs);
          await withLimiter(defs, 0, async (limiter, clock) => {
            let t = start;
            for (const [i, c] of calls.entries()) {
              t = Math.min(MAX_TIME, Math.max(0, t + c.dt));
              clock.now = t;
              const key = c.pol === 'g' ? '*' : c.key;
              const d = await limiter.check({ policy: c.pol, key, cost: c.cost });
              const where = `#${i} t=${t} ${c.pol} ${key} c=${c.cost} defs=${JSON.stringify(defs)}`;
              expectWellFormed(d, c.cost, where);
              expect(pick(d), where).toStrictEqual(model.check(c.pol, key, c.cost, t));
            }
          });
        },
      ),
      { numRuns: Number(process.env.RUNS ?? 300) },
    );
  }, 600_000);
});
