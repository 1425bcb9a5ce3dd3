/**
 * Shared pieces of the property tests: arbitraries for policies and call sequences, a controlled clock,
 * a limiter harness, and the reference model extended to guarded policies.
 *
 * Time in a generated sequence is a start plus a list of moves; a move is a plain step (0, small, about
 * a period, large, or NEGATIVE: the clock runs backwards) or a jump to just before / at / just after a
 * window edge of one of the policy's periods. Times are clamped to what the engine's clock accepts,
 * [0, 2^48).
 */
import fc from 'fast-check';
import { checkBe, checkTrue, type Message } from '../helpers/assert.js';
import { createLimiter, type Decision } from '../../src/index.js';
import {
  ReferenceModel,
  combine,
  type Algorithm,
  type ModelDecision,
  type ModelLimit,
  type ModelPolicy,
} from '../helpers/model.js';

export type Limiter = Awaited<ReturnType<typeof createLimiter>>;
type Policies = Parameters<typeof createLimiter>[0]['policies'];

export const ALGORITHMS: readonly Algorithm[] = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'];

/** Largest clock value the engine accepts. */
export const MAX_TIME = 2 ** 48 - 1;
/** Small key tables keep a fresh limiter cheap; the sequences use a handful of keys, far below it. */
export const MAX_KEYS = 1024;

const MAX_I64 = (1n << 63n) - 1n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

export function isBucket(algorithm: Algorithm): boolean {
  return algorithm === 'token_bucket' || algorithm === 'gcra';
}

/** The most one check may cost and still be admitted some day: B for buckets, L for windows. */
export function capacity(lim: ModelLimit): number {
  return isBucket(lim.algorithm) ? (lim.burst ?? lim.limit) : lim.limit;
}

/** The loader's exactness bounds (a policy outside them is refused by createLimiter, by design). */
export function withinExactBounds(lim: ModelLimit): boolean {
  const L = BigInt(lim.limit);
  const P = BigInt(lim.period);
  if (isBucket(lim.algorithm)) {
    const B = BigInt(lim.burst ?? lim.limit);
    if (B * P > MAX_I64) return false;
    return L === 0n || (B * P + L - 1n) / L <= MAX_SAFE;
  }
  if (L * P > MAX_I64) return false;
  return lim.algorithm !== 'sliding_window' || 2n * P <= MAX_SAFE;
}

// ---------------------------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------------------------

export interface LimitArbOptions {
  algorithms?: readonly Algorithm[];
  /** Include limit 0 (default true). */
  zero?: boolean;
}

/** limit 0..50 and sometimes 10^6 or 2^40; period 1..5000 ms and sometimes 1 min or 1 day; burst 0..100 for buckets. */
export function limitArb(options: LimitArbOptions = {}): fc.Arbitrary<ModelLimit> {
  const algorithms = options.algorithms ?? ALGORITHMS;
  const minLimit = options.zero === false ? 1 : 0;
  return fc
    .record({
      algorithm: fc.constantFrom(...algorithms),
      limit: fc.oneof(
        { weight: 8, arbitrary: fc.integer({ min: minLimit, max: 50 }) },
        { weight: 1, arbitrary: fc.constantFrom(1_000_000, 2 ** 40) },
      ),
      period: fc.oneof(
        { weight: 8, arbitrary: fc.integer({ min: 1, max: 5000 }) },
        { weight: 2, arbitrary: fc.constantFrom(60_000, 86_400_000) },
      ),
      burst: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined, freq: 2 }),
    })
    .map(({ algorithm, limit, period, burst }) => {
      const lim: ModelLimit = { algorithm, limit, period };
      if (burst !== undefined && isBucket(algorithm)) lim.burst = burst;
      return lim;
    })
    .filter(withinExactBounds);
}

/** A move of the clock. */
export type Move =
  | { dt: number }
  /** To `ahead` window edges of `period` past the current window's start, plus `off` ms (−2..2). */
  | { edge: number; ahead: number; off: number };

export function moveArb(periods: readonly number[]): fc.Arbitrary<Move> {
  const P = Math.max(...periods);
  return fc.oneof(
    { weight: 5, arbitrary: fc.constant({ dt: 0 }) },
    { weight: 5, arbitrary: fc.integer({ min: 1, max: 10 }).map((dt) => ({ dt })) },
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 2 * P }).map((dt) => ({ dt })) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 1e10 }).map((dt) => ({ dt })) },
    { weight: 2, arbitrary: fc.integer({ min: -5000, max: -1 }).map((dt) => ({ dt })) },
    { weight: 1, arbitrary: fc.integer({ min: -3 * P, max: -1 }).map((dt) => ({ dt })) },
    {
      weight: 3,
      arbitrary: fc.record({
        edge: fc.constantFrom(...periods),
        ahead: fc.integer({ min: 0, max: 2 }),
        off: fc.integer({ min: -2, max: 2 }),
      }),
    },
  );
}

export function applyMove(t: number, move: Move): number {
  let next: number;
  if ('dt' in move) next = t + move.dt;
  else next = (Math.floor(t / move.edge) + move.ahead) * move.edge + move.off;
  return Math.min(MAX_TIME, Math.max(0, next));
}

export const startArb: fc.Arbitrary<number> = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 0, max: 1_000_000 }),
  fc.integer({ min: 1_600_000_000_000, max: 1_800_000_000_000 }),
);

/** Cost 0..cap+2, biased to 1, with the edges 0, cap, cap+1, cap+2 (and `extra` values) common. */
export function costArb(cap: number, extra: readonly number[] = []): fc.Arbitrary<number> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant(1) },
    { weight: 1, arbitrary: fc.constant(0) },
    { weight: 3, arbitrary: fc.integer({ min: 0, max: Math.min(cap + 2, 12) }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: cap + 2 }) },
    { weight: 1, arbitrary: fc.constantFrom(cap, cap + 1, cap + 2, ...extra) },
  );
}

export interface Call {
  move: Move;
  policy: string;
  key: string;
  cost: number;
}

export interface TimedCall {
  t: number;
  policy: string;
  key: string;
  cost: number;
}

export const KEYS = ['k0', 'k1', 'k2', 'k3'] as const;
/** The key whose state a guard policy keeps, shared by every guarded check. */
export const GUARD_KEY = '*';

export interface CallsArbOptions {
  periods: readonly number[];
  /** Largest capacity among the limits a call may meet. */
  cap: number;
  /** Other costs worth hitting often (e.g. each limit's capacity). */
  extraCosts?: readonly number[];
  /** Policy names and their weights; default: 'p' only. */
  policies?: ReadonlyArray<{ name: string; weight: number; keys?: readonly string[] }>;
  maxLength?: number;
  minLength?: number;
}

/** A sequence of calls over 1–4 keys (the count itself is random). */
export function callsArb(o: CallsArbOptions): fc.Arbitrary<Call[]> {
  const policies = o.policies ?? [{ name: 'p', weight: 1 }];
  return fc.integer({ min: 1, max: KEYS.length }).chain((nKeys) => {
    const keys = KEYS.slice(0, nKeys);
    const policyKey = fc.oneof(
      ...policies.map((p) => ({
        weight: p.weight,
        arbitrary: fc.tuple(fc.constant(p.name), fc.constantFrom(...(p.keys ?? keys))),
      })),
    );
    return fc.array(
      fc.record({ move: moveArb(o.periods), pk: policyKey, cost: costArb(o.cap, o.extraCosts) })
        .map(({ move, pk, cost }) => ({ move, policy: pk[0], key: pk[1], cost })),
      { minLength: o.minLength ?? 1, maxLength: o.maxLength ?? 200, size: 'max' },
    );
  });
}

export function timeline(start: number, calls: readonly Call[]): TimedCall[] {
  let t = Math.min(MAX_TIME, start);
  return calls.map((c) => {
    t = applyMove(t, c.move);
    return { t, policy: c.policy, key: c.key, cost: c.cost };
  });
}

export function limitsOf(policy: ModelPolicy): ModelLimit[] {
  return 'limits' in policy ? policy.limits : [policy];
}

/** The policies of one property run, in model form, with a guard name where there is one. */
export interface Setup {
  defs: Record<string, PolicyDef>;
  /** Every limit a call may meet. */
  limits: ModelLimit[];
  /** Which policies the calls use, with weights and keys (default keys: 1–4 of {@link KEYS}). */
  policies: NonNullable<CallsArbOptions['policies']>;
}

export type Shape = 'single' | 'two-limits' | 'guarded';

function policyOf(limits: ModelLimit[]): ModelPolicy {
  return limits.length === 1 ? limits[0] : { limits };
}

/**
 * - single: policy `p` with one limit;
 * - two-limits: policy `p` with `limits: [a, b]`;
 * - guarded: policy `p` (one or two limits) guarded by `g` (one or two limits); calls mostly go to `p`, some
 *   straight to `g` on its shared key "*" or on another key.
 */
export function setupArb(shape: Shape, limit: fc.Arbitrary<ModelLimit> = limitArb()): fc.Arbitrary<Setup> {
  const oneOrTwo = fc.array(limit, { minLength: 1, maxLength: 2 });
  switch (shape) {
    case 'single':
      return limit.map((l) => ({ defs: { p: { policy: l } }, limits: [l], policies: [{ name: 'p', weight: 1 }] }));
    case 'two-limits':
      return fc.tuple(limit, limit).map(([a, b]) => ({
        defs: { p: { policy: { limits: [a, b] } } },
        limits: [a, b],
        policies: [{ name: 'p', weight: 1 }],
      }));
    case 'guarded':
      return fc.tuple(oneOrTwo, oneOrTwo).map(([own, guard]) => ({
        defs: { g: { policy: policyOf(guard) }, p: { policy: policyOf(own), guard: 'g' } },
        limits: [...own, ...guard],
        policies: [
          { name: 'p', weight: 6 },
          { name: 'g', weight: 1, keys: [GUARD_KEY, KEYS[0]] },
        ],
      }));
  }
}

/** Calls for a setup: moves around its periods, costs up to its largest capacity + 2 and at each capacity. */
export function setupCallsArb(setup: Setup, o: { maxLength?: number; minLength?: number } = {}): fc.Arbitrary<Call[]> {
  return callsArb({
    periods: setup.limits.map((l) => l.period),
    cap: Math.max(...setup.limits.map(capacity)),
    extraCosts: setup.limits.flatMap((l) => [capacity(l), l.limit]),
    policies: setup.policies,
    ...o,
  });
}

/** A setup, a start time and a call sequence. */
export function runArb(
  shape: Shape,
  limit?: fc.Arbitrary<ModelLimit>,
  o?: { maxLength?: number; minLength?: number },
): fc.Arbitrary<[Setup, number, Call[]]> {
  return setupArb(shape, limit).chain((setup) => fc.tuple(fc.constant(setup), startArb, setupCallsArb(setup, o)));
}

// ---------------------------------------------------------------------------------------------------------
// Engine harness
// ---------------------------------------------------------------------------------------------------------

/** A controlled clock that counts its reads. */
export class Clock {
  now = 0;
  reads = 0;
  readonly read = (): number => {
    this.reads++;
    return this.now;
  };
}

/** A policy of the test in the engine's form: the model policy, plus a guard name when given. */
export interface PolicyDef {
  policy: ModelPolicy;
  guard?: string;
}

export function engineSpecs(defs: Record<string, PolicyDef>): Policies {
  const out: Record<string, unknown> = {};
  for (const [name, d] of Object.entries(defs)) {
    const spec: Record<string, unknown> =
      'limits' in d.policy ? { limits: d.policy.limits.map((l) => ({ ...l })) } : { ...d.policy };
    if (d.guard !== undefined) spec.guard = d.guard;
    out[name] = spec;
  }
  return out as Policies;
}

/** Runs `fn` with a fresh limiter on a controlled clock; always closes it. */
export async function withLimiter<T>(
  defs: Record<string, PolicyDef>,
  shards: number,
  fn: (limiter: Limiter, clock: Clock) => Promise<T>,
): Promise<T> {
  const clock = new Clock();
  const limiter = await createLimiter({ policies: engineSpecs(defs), shards, clock: clock.read, maxKeys: MAX_KEYS });
  try {
    return await fn(limiter, clock);
  } finally {
    await limiter.close();
  }
}

/** Each call awaited before the next, the clock set to its t. */
export async function runAwaited(limiter: Limiter, clock: Clock, calls: readonly TimedCall[]): Promise<Decision[]> {
  const out: Decision[] = [];
  for (const c of calls) {
    clock.now = c.t;
    out.push(await limiter.check({ policy: c.policy, key: c.key, cost: c.cost }));
  }
  return out;
}

/** The four numbers the model defines. */
export function pick(d: Decision): ModelDecision {
  return { allowed: d.allowed, remaining: d.remaining, resetAfterMs: d.resetAfterMs, retryAfterMs: d.retryAfterMs };
}

/**
 * The shape rules every decision keeps: integers, remaining ≥ 0, retryAfterMs 0 iff admitted, a denial
 * that can succeed later waits ≥ 1 ms, `reason` exactly on a "never", a peek is always admitted.
 */
export function expectWellFormed(d: Decision, cost: number, where: Message): void {
  // checkTrue/checkBe: expect() runs only on a failure (test/helpers/assert.ts); the conditions are expect's
  const at = (): string => (typeof where === 'string' ? where : where());
  checkTrue(Number.isSafeInteger(d.remaining) && d.remaining >= 0, () => `${at()}: remaining ${d.remaining}`);
  checkTrue(Number.isSafeInteger(d.resetAfterMs) && d.resetAfterMs >= 0, () => `${at()}: resetAfterMs ${d.resetAfterMs}`);
  checkBe(d.retryAfterMs === 0, d.allowed, () => `${at()}: retryAfterMs ${d.retryAfterMs} must be 0 iff allowed (${d.allowed})`);
  if (!d.allowed && d.retryAfterMs !== null) {
    checkTrue(Number.isSafeInteger(d.retryAfterMs) && d.retryAfterMs >= 1, () => `${at()}: retryAfterMs ${d.retryAfterMs}`);
  }
  checkBe(d.reason !== undefined, d.retryAfterMs === null, () => `${at()}: reason "${d.reason}" must be present iff retryAfterMs is null`);
  if (cost === 0) checkBe(d.allowed, true, () => `${at()}: a peek is always admitted`);
}

// ---------------------------------------------------------------------------------------------------------
// The model, with guards
// ---------------------------------------------------------------------------------------------------------

/**
 * The reference model over several policies, some of them guarded: a check on a guarded policy is its own
 * limits on its key plus the guard's limits on key "*", all admitting or none changing, combined like one
 * multi-limit policy (own limits first). A direct check on the guard policy uses the same state.
 */
export class GuardedModel {
  private model: ReferenceModel;
  private readonly guards: Record<string, string | undefined>;

  constructor(defs: Record<string, PolicyDef>) {
    const policies: Record<string, ModelPolicy> = {};
    this.guards = {};
    for (const [name, d] of Object.entries(defs)) {
      policies[name] = d.policy;
      this.guards[name] = d.guard;
    }
    this.model = new ReferenceModel(policies);
  }

  check(policy: string, key: string, cost: number, t: number): ModelDecision {
    const guard = this.guards[policy];
    if (guard === undefined) return this.model.check(policy, key, cost, t);
    // Evaluate both parts on a copy; keep the copy only if the whole check is admitted.
    const trial = this.model.clone();
    const own = trial.check(policy, key, cost, t);
    const shared = trial.check(guard, GUARD_KEY, cost, t);
    const d = combine([own, shared]);
    if (d.allowed) this.model = trial;
    return d;
  }
}
