/**
 * Invariants of the engine that hold whatever the numbers (no reference answers needed, though the model
 * is consulted where it is cheap):
 *
 * (a) Metamorphic (shared case 12): remove every denied call from a sequence and replay the rest on a fresh
 *     limiter: every remaining call gets exactly the same decision (all fields).
 * (b) Burst bounds (shared case 01): for token_bucket and gcra, the cost admitted in any half-open span of
 *     length P is at most B + L; a fixed window admits at most L per aligned window, and any window algorithm
 *     at most 2·L in any span of length P. Bursts are placed just before, at and just after window edges.
 * (c) Shape and the retry promise (shared case 08): remaining ≥ 0, retryAfterMs 0 iff admitted, a finite
 *     denial waits ≥ 1 ms; the same check exactly retryAfterMs later is admitted (nothing else happening in
 *     between) and 1 ms earlier is denied.
 * (d) Batching: checks issued in one event-loop turn (Promise.all, one clock read) get the same decisions as
 *     the same checks awaited one by one at the same t.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkBe, checkStrictEqual } from '../helpers/assert.js';
import type { Decision } from '../../src/index.js';
import type { Algorithm, ModelLimit } from '../helpers/model.js';
import {
  ALGORITHMS,
  GuardedModel,
  MAX_TIME,
  applyMove,
  capacity,
  isBucket,
  expectWellFormed,
  limitArb,
  moveArb,
  pick,
  runArb,
  runAwaited,
  setupArb,
  startArb,
  timeline,
  withLimiter,
  type Call,
  type Setup,
  type Shape,
  type TimedCall,
} from './support.js';

const TIMEOUT_MS = 120_000;
const params = (numRuns: number) => ({ numRuns, interruptAfterTimeLimit: 90_000, markInterruptAsFailure: false });

const oneAlgorithm = (a: Algorithm) => limitArb({ algorithms: [a] });

// ---------------------------------------------------------------------------------------------------------
// (a) Denied checks change nothing: dropping them changes no other answer
// ---------------------------------------------------------------------------------------------------------

async function metamorphic(setup: Setup, shards: number, start: number, calls: Call[]): Promise<void> {
  const timed = timeline(start, calls);
  const full = await withLimiter(setup.defs, shards, (l, clock) => runAwaited(l, clock, timed));
  const kept = timed.flatMap((c, i) => (full[i].allowed ? [{ c, d: full[i], i }] : []));
  const again = await withLimiter(setup.defs, shards, (l, clock) => runAwaited(l, clock, kept.map((k) => k.c)));
  // check*: expect() only on a difference (test/helpers/assert.ts): these run for every check of every run
  kept.forEach((k, j) => {
    checkStrictEqual(again[j], k.d, () => `call #${k.i} (t=${k.c.t} ${k.c.policy}/${k.c.key} cost ${k.c.cost}), replayed without denials`);
  });
}

describe('(a) metamorphic: removing every denied call leaves every other answer unchanged', () => {
  it.each(ALGORITHMS)(
    '%s, shards: 0',
    async (algorithm) => {
      await fc.assert(
        fc.asyncProperty(runArb('single', oneAlgorithm(algorithm)), async ([setup, start, calls]) => {
          await metamorphic(setup, 0, start, calls);
        }),
        params(60),
      );
    },
    TIMEOUT_MS,
  );

  it.each(['two-limits', 'guarded'] as Shape[])(
    '%s, shards: 0',
    async (shape) => {
      await fc.assert(
        fc.asyncProperty(runArb(shape), async ([setup, start, calls]) => {
          await metamorphic(setup, 0, start, calls);
        }),
        params(60),
      );
    },
    TIMEOUT_MS,
  );

  it(
    'any shape, shards: 2',
    async () => {
      const arb = fc.constantFrom<Shape>('single', 'two-limits', 'guarded').chain((shape) => runArb(shape));
      await fc.assert(
        fc.asyncProperty(arb, async ([setup, start, calls]) => {
          await metamorphic(setup, 2, start, calls);
        }),
        params(10),
      );
    },
    TIMEOUT_MS,
  );
});

// ---------------------------------------------------------------------------------------------------------
// (b) Burst bounds around window edges
// ---------------------------------------------------------------------------------------------------------

interface Burst {
  /** Window edge index (edge k is at k·P) and offset from it; offsets reach into both neighbouring windows. */
  edge: number;
  off: number;
  count: number;
  cost: number;
}

/** Bursts of up to B + L + 3 calls placed at −3..+3 ms (or anywhere) around the first few window edges. */
function burstsArb(lim: ModelLimit): fc.Arbitrary<Burst[]> {
  const cap = Math.max(1, lim.burst ?? lim.limit);
  const P = lim.period;
  return fc.array(
    fc.record({
      edge: fc.integer({ min: 1, max: 6 }),
      off: fc.oneof(
        { weight: 3, arbitrary: fc.integer({ min: -3, max: 3 }) },
        { weight: 1, arbitrary: fc.integer({ min: -P, max: P }) },
      ),
      count: fc.integer({ min: 1, max: cap + lim.limit + 3 }),
      cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 }) }),
    }),
    { minLength: 1, maxLength: 12 },
  );
}

/** A small policy whose numbers make bursts bite: limit 1..20, period 2..3000 ms (or a minute), burst 0..30. */
function smallLimitArb(algorithm: Algorithm): fc.Arbitrary<ModelLimit> {
  return fc
    .record({
      limit: fc.integer({ min: 1, max: 20 }),
      period: fc.oneof(fc.integer({ min: 2, max: 3000 }), fc.constant(60_000)),
      burst: fc.option(fc.integer({ min: 0, max: 30 }), { nil: undefined }),
    })
    .map(({ limit, period, burst }) => {
      const lim: ModelLimit = { algorithm, limit, period };
      if (burst !== undefined && isBucket(algorithm)) lim.burst = burst;
      return lim;
    });
}

/** Most cost admitted in any half-open span [s, s + P), over spans starting at an admission. */
function maxInSpan(admitted: Array<{ t: number; cost: number }>, P: number): number {
  let best = 0;
  for (const a of admitted) {
    let sum = 0;
    for (const b of admitted) if (b.t >= a.t && b.t < a.t + P) sum += b.cost;
    best = Math.max(best, sum);
  }
  return best;
}

describe('(b) admitted cost per span of length P, with bursts around window edges', () => {
  it.each(ALGORITHMS)(
    '%s',
    async (algorithm) => {
      const arb = smallLimitArb(algorithm).chain((lim) =>
        fc.tuple(fc.constant(lim), fc.integer({ min: 0, max: 1000 }), burstsArb(lim)),
      );
      await fc.assert(
        fc.asyncProperty(arb, async ([lim, base, bursts]) => {
          const P = lim.period;
          const origin = base * P;
          const calls: TimedCall[] = bursts
            .map((b) => ({ t: Math.max(0, origin + b.edge * P + b.off), b }))
            .sort((x, y) => x.t - y.t)
            .flatMap(({ t, b }) => Array.from({ length: b.count }, () => ({ t, policy: 'p', key: 'k', cost: b.cost })));
          const defs = { p: { policy: lim } };
          const model = new GuardedModel(defs);
          const ds = await withLimiter(defs, 0, (l, clock) => runAwaited(l, clock, calls));
          ds.forEach((d, i) => {
            const c = calls[i];
            checkStrictEqual(pick(d), model.check('p', 'k', c.cost, c.t), () => `call #${i} t=${c.t} cost=${c.cost}`);
          });
          const admitted = calls.filter((_, i) => ds[i].allowed);
          const L = lim.limit;
          const span = maxInSpan(admitted, P);
          if (isBucket(algorithm)) {
            expect(span, 'admitted cost in a span of length P').toBeLessThanOrEqual((lim.burst ?? L) + L);
          } else {
            expect(span, 'admitted cost in a span of length P').toBeLessThanOrEqual(2 * L);
          }
          if (algorithm === 'fixed_window') {
            const perWindow = new Map<number, number>();
            for (const a of admitted) perWindow.set(Math.floor(a.t / P), (perWindow.get(Math.floor(a.t / P)) ?? 0) + a.cost);
            for (const [k, sum] of perWindow) expect(sum, `admitted in window ${k}`).toBeLessThanOrEqual(L);
          }
        }),
        params(100),
      );
    },
    TIMEOUT_MS,
  );

  it('the bucket bound is tight: a full bucket drained just before an edge, then refilled for P − 1 ms, admits B + L − 1', async () => {
    // B = 10, L = 10 per 1000 ms: 10 at t = 999, then one token per 100 ms: 9 more by t = 1998 (< 999 + 1000).
    for (const algorithm of ['token_bucket', 'gcra'] as const) {
      const calls: TimedCall[] = [
        ...Array.from({ length: 11 }, () => ({ t: 999, policy: 'p', key: 'k', cost: 1 })),
        ...Array.from({ length: 10 }, (_, i) => ({ t: 1099 + 100 * i, policy: 'p', key: 'k', cost: 1 })),
      ];
      const ds = await withLimiter({ p: { policy: { algorithm, limit: 10, period: 1000 } } }, 0, (l, clock) =>
        runAwaited(l, clock, calls),
      );
      const admitted = calls.filter((_, i) => ds[i].allowed);
      expect(ds.map((d) => d.allowed)).toStrictEqual([...Array(10).fill(true), false, ...Array(10).fill(true)]);
      // [999, 1999) holds 10 + 9 = 19 (the 20th comes at 1999, one span later); B + L = 20 is the bound.
      expect(maxInSpan(admitted, 1000)).toBe(19);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------
// (c) Shape of every decision, and the retry promise
// ---------------------------------------------------------------------------------------------------------

/**
 * After a random prefix, each key is checked again at T (no earlier than any time so far, so t' = T), repeatedly
 * until denied; if denied with a finite wait r, the same check at T + r − 1 must be denied and then at T + r admitted.
 * A denied probe changes nothing, so the probe at T + r sees exactly the state of the check at T.
 */
async function retryPromise(setup: Setup, start: number, calls: Call[], gap: number, finals: Array<{ key: string; cost: number }>) {
  const timed = timeline(start, calls);
  const T = Math.min(MAX_TIME, Math.max(start, ...timed.map((c) => c.t)) + gap);
  await withLimiter(setup.defs, 0, async (limiter, clock) => {
    const ds = await runAwaited(limiter, clock, timed);
    ds.forEach((d, i) => expectWellFormed(d, timed[i].cost, `call #${i}`));
    for (const f of finals) {
      const check = { policy: 'p', key: f.key, cost: f.cost };
      clock.now = T;
      // Repeat the check at T until it is denied (admissions at T are part of the history, not "in between").
      let d = await limiter.check(check);
      for (let n = 0; d.allowed && f.cost > 0 && n < 30; n++) d = await limiter.check(check);
      const where = `final check ${f.key} cost ${f.cost} at ${T}`;
      expectWellFormed(d, f.cost, where);
      if (d.allowed || d.retryAfterMs === null || T + d.retryAfterMs > MAX_TIME) continue;
      clock.now = T + d.retryAfterMs - 1;
      const early = await limiter.check(check);
      expect(early.allowed, `${where}: retried 1 ms early (after ${d.retryAfterMs - 1} ms)`).toBe(false);
      clock.now = T + d.retryAfterMs;
      const onTime = await limiter.check(check);
      expect(onTime.allowed, `${where}: retried after exactly ${d.retryAfterMs} ms`).toBe(true);
    }
  });
}

describe('(c) shape of every decision; admitted exactly retryAfterMs later, denied 1 ms before', () => {
  it.each([...ALGORITHMS.map((a) => [a, 'single'] as const), ['mixed', 'two-limits'] as const])(
    '%s (%s)',
    async (algorithm, shape) => {
      const limit = algorithm === 'mixed' ? limitArb() : oneAlgorithm(algorithm as Algorithm);
      const arb = setupArb(shape, limit).chain((setup) => {
        const cap = Math.max(...setup.limits.map(capacity));
        return fc.tuple(
          fc.constant(setup),
          startArb,
          fc.array(
            fc.record({
              move: moveArb(setup.limits.map((l) => l.period)),
              policy: fc.constant('p'),
              key: fc.constantFrom('k0', 'k1'),
              cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 0, max: cap + 1 }) }),
            }),
            { maxLength: 100, size: 'max' },
          ),
          fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 5000 })),
          fc.uniqueArray(
            fc.record({
              key: fc.constantFrom('k0', 'k1', 'k2'),
              cost: fc.oneof({ weight: 3, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 1, max: cap + 1 }) }),
            }),
            { minLength: 1, maxLength: 3, selector: (f) => f.key },
          ),
        );
      });
      await fc.assert(
        fc.asyncProperty(arb, async ([setup, start, calls, gap, finals]) => {
          await retryPromise(setup, start, calls, gap, finals);
        }),
        params(100),
      );
    },
    TIMEOUT_MS,
  );
});

// ---------------------------------------------------------------------------------------------------------
// (d) A batch (one turn, one clock read) answers like the same checks awaited one by one
// ---------------------------------------------------------------------------------------------------------

interface Batch {
  t: number;
  checks: Array<{ policy: string; key: string; cost: number }>;
}

function batchesArb(setup: Setup): fc.Arbitrary<[number, Batch[]]> {
  const periods = setup.limits.map((l) => l.period);
  const cap = Math.max(...setup.limits.map(capacity));
  const check = fc.oneof(
    ...setup.policies.map((p) => ({
      weight: p.weight,
      arbitrary: fc.record({
        policy: fc.constant(p.name),
        key: fc.constantFrom(...(p.keys ?? ['k0', 'k1', 'k2'])),
        cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 0, max: cap + 1 }) }),
      }),
    })),
  );
  return fc.tuple(
    startArb,
    fc.array(fc.record({ move: moveArb(periods), checks: fc.array(check, { minLength: 1, maxLength: 40 }) }), {
      minLength: 1,
      maxLength: 12,
    }),
  ).map(([start, raw]) => {
    let t = start;
    return [start, raw.map((b) => ({ t: (t = applyMove(t, b.move)), checks: b.checks }))];
  });
}

async function batchEqualsSequential(setup: Setup, shards: number, batches: Batch[]): Promise<void> {
  const together = await withLimiter(setup.defs, shards, async (limiter, clock) => {
    const out: Decision[][] = [];
    for (const b of batches) {
      clock.now = b.t;
      const reads = clock.reads;
      out.push(await Promise.all(b.checks.map((c) => limiter.check(c))));
      expect(clock.reads - reads, `batch at t=${b.t}: clock reads`).toBe(1);
    }
    return out;
  });
  const oneByOne = await withLimiter(setup.defs, shards, async (limiter, clock) => {
    const out: Decision[][] = [];
    for (const b of batches) {
      const reads = clock.reads;
      out.push(await runAwaited(limiter, clock, b.checks.map((c) => ({ ...c, t: b.t }))));
      expect(clock.reads - reads, `awaited one by one at t=${b.t}: one clock read per check`).toBe(b.checks.length);
    }
    return out;
  });
  const model = new GuardedModel(setup.defs);
  batches.forEach((b, i) =>
    b.checks.forEach((c, j) => {
      const where = (): string => `batch #${i} (t=${b.t}) check #${j} (${c.policy}/${c.key} cost ${c.cost})`;
      checkStrictEqual(together[i][j], oneByOne[i][j], where);
      expectWellFormed(together[i][j], c.cost, where);
      // The model as well, where the engine agrees with it (the pinned disagreements are in kernel-vs-model).
      const m = model.check(c.policy, c.key, c.cost, b.t);
      checkBe(together[i][j].allowed, m.allowed, where);
    }),
  );
}

describe('(d) a batch issued in one turn = the same checks awaited one by one at the same t', () => {
  it.each([
    [0, 100],
    [2, 12],
  ])(
    'shards: %i',
    async (shards, numRuns) => {
      const arb = fc
        .constantFrom<Shape>('single', 'two-limits', 'guarded')
        .chain((shape) => setupArb(shape))
        .chain((setup) => fc.tuple(fc.constant(setup), batchesArb(setup)));
      await fc.assert(
        fc.asyncProperty(arb, async ([setup, [, batches]]) => {
          await batchEqualsSequential(setup, shards, batches);
        }),
        params(numRuns),
      );
    },
    TIMEOUT_MS,
  );
});
