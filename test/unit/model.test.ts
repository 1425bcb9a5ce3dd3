/**
 * The reference model (test/helpers/model.ts) against the shared failure cases, plus properties of the
 * model itself: the sliding window's closed-form retry against brute force, token_bucket ≡ gcra, and the
 * general rules (denied checks change nothing, retry promises hold, remaining never negative).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadCases, pickExpected, type Case, type CasePolicy } from '../helpers/cases.js';
import {
  Q,
  ReferenceModel,
  slidingRetryAfter,
  type Algorithm,
  type ModelDecision,
  type ModelLimit,
} from '../helpers/model.js';

const ALGORITHMS: readonly Algorithm[] = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'];

const DURATION_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A period the model can use (ms), or undefined. Duration strings like "1m" are converted. */
function periodMs(period: unknown): number | undefined {
  if (typeof period === 'number' && Number.isSafeInteger(period) && period > 0) return period;
  if (typeof period === 'string') {
    const m = /^(\d+)(ms|s|m|h|d)$/.exec(period);
    if (m !== null && Number(m[1]) > 0) return Number(m[1]) * DURATION_MS[m[2]];
  }
  return undefined;
}

const isCount = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;

/** The case's policies in model form, or undefined when the model cannot run them (invalid policies). */
function modelPolicies(policies: Record<string, CasePolicy>): Record<string, ModelLimit> | undefined {
  const out: Record<string, ModelLimit> = {};
  for (const [name, p] of Object.entries(policies)) {
    const period = periodMs(p.period);
    if (!ALGORITHMS.includes(p.algorithm as Algorithm) || !isCount(p.limit) || period === undefined) return undefined;
    if (p.burst !== undefined && !isCount(p.burst)) return undefined;
    out[name] = { algorithm: p.algorithm as Algorithm, limit: p.limit, period };
    if (p.burst !== undefined) out[name].burst = p.burst as number;
  }
  return out;
}

describe('reference model vs shared cases', () => {
  const cases = loadCases();
  const runnable = cases.filter((c) => !c.expectConfigError && modelPolicies(c.policies) !== undefined);

  it('loads the cases and can run every one that is not a configuration error', () => {
    expect(cases.length).toBeGreaterThan(0);
    expect(runnable.length).toBe(cases.filter((c) => !c.expectConfigError).length);
  });

  it.each(runnable.map((c) => [c.id, c] as [string, Case]))('%s', (_id, c) => {
    const model = new ReferenceModel(modelPolicies(c.policies)!);
    let asserted = 0;
    for (const call of c.calls) {
      // Error rows are the engine's job; they change nothing, so the model simply skips them.
      if (call.expectError || call.expect === undefined) continue;
      const d = model.check(call.policy, call.key as string, call.cost as number, call.t);
      expect(pickExpected({ ...d }, call.expect), `${c.id} call #${call.index + 1} at t=${call.t}`).toStrictEqual(
        call.expect,
      );
      asserted++;
    }
    expect(asserted).toBeGreaterThan(0);
  });
});

describe('exact rationals', () => {
  it('floor and ceil round toward −∞ / +∞, also for negatives', () => {
    expect(new Q(7n, 2n).floor()).toBe(3n);
    expect(new Q(7n, 2n).ceil()).toBe(4n);
    expect(new Q(-7n, 2n).floor()).toBe(-4n);
    expect(new Q(-7n, 2n).ceil()).toBe(-3n);
    expect(new Q(6n, 3n).floor()).toBe(2n);
    expect(new Q(6n, 3n).ceil()).toBe(2n);
    expect(new Q(-6n, -3n).n).toBe(2n);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Sliding window retry: closed form vs brute force
// ---------------------------------------------------------------------------------------------------------

/** Brute force on the formula: least d ≥ 1 with estimate(t + d) + c ≤ L. */
function bruteSlidingRetry(prev: bigint, cur: bigint, e: bigint, P: bigint, L: bigint, c: bigint): bigint {
  for (let d = 1n; ; d++) {
    const x = e + d;
    let est: Q;
    if (x < P) est = new Q(prev * (P - x), P).add(cur);
    else if (x < 2n * P) est = new Q(cur * (2n * P - x), P);
    else est = new Q(0n);
    if (est.add(c).le(new Q(L))) return d;
  }
}

/** Brute force on the model: least d ≥ 1 such that the same check at t + d is admitted (nothing else arriving). */
function bruteModelRetry(model: ReferenceModel, key: string, cost: number, t: number, maxD: number): number | null {
  for (let d = 1; d <= maxD; d++) {
    if (model.clone().check('p', key, cost, t + d).allowed) return d;
  }
  return null;
}

describe('sliding window retryAfterMs', () => {
  it('closed form equals brute force on the estimate formula', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }), // P
        fc.integer({ min: 1, max: 12 }), // L
        fc.nat(),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        (p, l, prevSeed, curSeed, eSeed, cSeed) => {
          const P = BigInt(p);
          const L = BigInt(l);
          const prev = BigInt(prevSeed % (l + 1));
          const cur = BigInt(curSeed % (l + 1));
          const e = BigInt(eSeed % p);
          const c = BigInt(1 + (cSeed % l));
          const est = new Q(prev * (P - e), P).add(cur);
          fc.pre(!est.add(c).le(new Q(L))); // only denied checks have a retry
          expect(slidingRetryAfter(prev, cur, e, P, L, c)).toBe(bruteSlidingRetry(prev, cur, e, P, L, c));
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('the model keeps its promise: admitted exactly at t + retryAfterMs, denied at every earlier ms', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 8 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 25 }), fc.integer({ min: 0, max: 9 })), {
          minLength: 1,
          maxLength: 30,
        }),
        (period, limit, steps) => {
          const model = new ReferenceModel({ p: { algorithm: 'sliding_window', limit, period } });
          let t = 1000 * period; // any start; times are non-decreasing so t' = t
          for (const [gap, cost] of steps) {
            t += gap;
            const before = model.clone();
            const d = model.check('p', 'k', cost, t);
            if (d.allowed || d.retryAfterMs === null) continue;
            expect(d.retryAfterMs).toBeGreaterThanOrEqual(1);
            expect(bruteModelRetry(before, 'k', cost, t, 3 * period)).toBe(d.retryAfterMs);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});

// ---------------------------------------------------------------------------------------------------------
// General properties, all algorithms
// ---------------------------------------------------------------------------------------------------------

const limitArb = fc.record({
  algorithm: fc.constantFrom(...ALGORITHMS),
  limit: fc.integer({ min: 0, max: 12 }),
  period: fc.integer({ min: 1, max: 3000 }),
  burst: fc.option(fc.integer({ min: 0, max: 15 }), { nil: undefined }),
});

/** Calls: (time step, cost, key); the step may be negative (a clock that runs backwards for the key). */
const callsArb = fc.array(
  fc.tuple(fc.integer({ min: -200, max: 1500 }), fc.integer({ min: 0, max: 16 }), fc.constantFrom('a', 'b')),
  { minLength: 1, maxLength: 60 },
);

function toLimit(l: { algorithm: Algorithm; limit: number; period: number; burst: number | undefined }): ModelLimit {
  const out: ModelLimit = { algorithm: l.algorithm, limit: l.limit, period: l.period };
  if (l.burst !== undefined && (l.algorithm === 'token_bucket' || l.algorithm === 'gcra')) out.burst = l.burst;
  return out;
}

function run(model: ReferenceModel, calls: [number, number, string][], start = 10_000): ModelDecision[] {
  let t = start;
  return calls.map(([step, cost, key]) => {
    t = Math.max(0, t + step);
    return model.check('p', key, cost, t);
  });
}

describe('model properties', () => {
  it('token_bucket and gcra give identical decisions', () => {
    fc.assert(
      fc.property(limitArb, callsArb, (l, calls) => {
        const tb = new ReferenceModel({ p: toLimit({ ...l, algorithm: 'token_bucket' }) });
        const gcra = new ReferenceModel({ p: toLimit({ ...l, algorithm: 'gcra' }) });
        expect(run(gcra, calls)).toStrictEqual(run(tb, calls));
      }),
      { numRuns: 1000 },
    );
  });

  it('decisions are well formed: remaining ≥ 0, retry 0 when admitted, ≥ 1 or null when denied, integers', () => {
    fc.assert(
      fc.property(limitArb, callsArb, (l, calls) => {
        const lim = toLimit(l);
        const model = new ReferenceModel({ p: lim });
        let t = 10_000;
        for (const [step, cost, key] of calls) {
          t = Math.max(0, t + step);
          const d = model.check('p', key, cost, t);
          expect(Number.isSafeInteger(d.remaining) && d.remaining >= 0).toBe(true);
          expect(Number.isSafeInteger(d.resetAfterMs) && d.resetAfterMs >= 0).toBe(true);
          if (d.allowed) expect(d.retryAfterMs).toBe(0);
          else if (d.retryAfterMs !== null) expect(d.retryAfterMs).toBeGreaterThanOrEqual(1);
          if (cost === 0) expect(d.allowed).toBe(true);
          const capacity = lim.algorithm === 'token_bucket' || lim.algorithm === 'gcra' ? (lim.burst ?? lim.limit) : lim.limit;
          if (cost > 0 && (lim.limit === 0 || cost > capacity)) expect(d).toMatchObject({ allowed: false, retryAfterMs: null });
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('denied checks and peeks change nothing: removing them leaves every other answer the same', () => {
    fc.assert(
      fc.property(limitArb, callsArb, (l, calls) => {
        const lim = toLimit(l);
        const full = new ReferenceModel({ p: lim });
        let t = 10_000;
        const timed = calls.map(([step, cost, key]) => {
          t = Math.max(0, t + step);
          return { t, cost, key, d: full.check('p', key, cost, t) };
        });
        const kept = timed.filter((x) => x.d.allowed && x.cost > 0);
        const replay = new ReferenceModel({ p: lim });
        for (const x of kept) expect(replay.check('p', x.key, x.cost, x.t)).toStrictEqual(x.d);
      }),
      { numRuns: 1000 },
    );
  });

  it('every algorithm keeps the retry promise (admitted at t + retry, not at t + retry − 1)', () => {
    fc.assert(
      fc.property(limitArb, callsArb, (l, calls) => {
        const model = new ReferenceModel({ p: toLimit(l) });
        let t = 10_000;
        for (const [step, cost, key] of calls) {
          t = Math.max(t, t + step); // non-decreasing here, so t' = t
          const before = model.clone();
          const d = model.check('p', key, cost, t);
          if (d.allowed || d.retryAfterMs === null) continue;
          expect(before.clone().check('p', key, cost, t + d.retryAfterMs).allowed).toBe(true);
          if (d.retryAfterMs > 1) expect(before.clone().check('p', key, cost, t + d.retryAfterMs - 1).allowed).toBe(false);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('time never runs backwards for a key: a check at an earlier t answers as at the last changing t', () => {
    fc.assert(
      fc.property(limitArb, callsArb, fc.integer({ min: 1, max: 5000 }), (l, calls, back) => {
        const lim = toLimit(l);
        const a = new ReferenceModel({ p: lim });
        const b = new ReferenceModel({ p: lim });
        let t = 10_000;
        let lastChange: Record<string, number> = {};
        for (const [step, cost, key] of calls) {
          t = Math.max(0, t + step);
          const d = a.check('p', key, cost, t);
          b.check('p', key, cost, t);
          if (d.allowed && cost > 0) lastChange = { ...lastChange, [key]: t };
        }
        for (const key of Object.keys(lastChange)) {
          const at = lastChange[key];
          expect(a.clone().check('p', key, 1, Math.max(0, at - back))).toStrictEqual(b.clone().check('p', key, 1, at));
        }
      }),
      { numRuns: 500 },
    );
  });
});

// ---------------------------------------------------------------------------------------------------------
// Multiple limits on one key
// ---------------------------------------------------------------------------------------------------------

describe('multiple limits', () => {
  const perSecond: ModelLimit = { algorithm: 'fixed_window', limit: 3, period: 1000 };
  const perMinute: ModelLimit = { algorithm: 'token_bucket', limit: 5, period: 60_000 };

  it('admits only if every limit admits; a denial by one limit consumes from none', () => {
    const m = new ReferenceModel({ p: { limits: [perSecond, perMinute] } });
    const single = new ReferenceModel({ s: perSecond, m: perMinute });
    // Three in the first second: both admit; remaining reported from the tighter limit.
    expect(m.check('p', 'k', 1, 0)).toStrictEqual({ allowed: true, remaining: 2, resetAfterMs: 1000, retryAfterMs: 0 });
    expect(m.check('p', 'k', 2, 0)).toStrictEqual({ allowed: true, remaining: 0, resetAfterMs: 1000, retryAfterMs: 0 });
    // Fixed window full: denied by it (the bucket would admit), nothing taken from the bucket.
    expect(m.check('p', 'k', 1, 500)).toStrictEqual({ allowed: false, remaining: 0, resetAfterMs: 500, retryAfterMs: 500 });
    // Next second: the bucket has 2 tokens (+ refill 1000·5/60000 = 1/12): cost 3 fits the window but not the bucket.
    const d = m.check('p', 'k', 3, 1000);
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBe(11_000); // (3 − 2 − 1/12) tokens · 12 000 ms/token, exactly
    // The window was not consumed by that denial: 3 more units still fit it, 2 fit the bucket.
    expect(m.check('p', 'k', 2, 1000)).toMatchObject({ allowed: true, remaining: 0 });
    // Same as running the limits separately on the admitted calls.
    for (const [c, t] of [
      [1, 0],
      [2, 0],
      [2, 1000],
    ] as const) {
      single.check('s', 'k', c, t);
      single.check('m', 'k', c, t);
    }
    expect(m.check('p', 'k', 0, 1000).remaining).toBe(
      Math.min(single.check('s', 'k', 0, 1000).remaining, single.check('m', 'k', 0, 1000).remaining),
    );
  });

  it('reports "never" if any denying limit can never admit', () => {
    const m = new ReferenceModel({ p: { limits: [perSecond, { ...perMinute, burst: 10, limit: 10 }] } });
    expect(m.check('p', 'k', 4, 0)).toMatchObject({ allowed: false, retryAfterMs: null, remaining: 3 });
  });
});
