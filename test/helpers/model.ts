/**
 * The executable specification of sluice's decision semantics.
 *
 * A plain reference model, written straight from the rules, with EXACT arithmetic: every quantity is a
 * BigInt or a BigInt rational ({@link Q}); no floating point anywhere. It is deliberately naive (no
 * optimisation, no validation: the engine validates; the model assumes valid input). Tests compare the
 * engine with it call for call, so when in doubt, this file is what "correct" means.
 *
 * Notation: L = limit, P = period (ms), B = burst (default L), c = cost, t = integer ms.
 *
 * Common rules
 * - State is per (policy, key). Time never runs backwards for a key: t' = max(t, lastSeen), where lastSeen
 *   is the time of the last check that CHANGED the key's state.
 * - Only an admitted check with c > 0 changes state (and sets lastSeen = t'). A denied check and a peek
 *   (c = 0) change nothing at all, not even lastSeen. A new key starts full / with empty windows.
 * - Limit 0 denies every check with c > 0, retryAfterMs null ("never").
 * - A cost that can never be admitted (c > B for buckets, c > L for windows) is denied with
 *   retryAfterMs null and changes nothing.
 * - c = 0 is a peek: allowed, retryAfterMs 0, remaining/reset describe the current state.
 * - A denied check reports remaining = floor of what is there now.
 * - Multiple limits on one key (`limits: [...]`): admitted only if every limit admits, then each consumes;
 *   if any denies, none changes.
 */

export type Algorithm = 'token_bucket' | 'gcra' | 'fixed_window' | 'sliding_window' | 'sliding_log';

/** One limit. `period` is in ms. `burst` (buckets only) defaults to `limit`. */
export interface ModelLimit {
  algorithm: Algorithm;
  limit: number;
  period: number;
  burst?: number;
  /**
   * fixed_window over calendar windows: the window [start, end) holding a time (test/helpers/calendar-model.ts
   * computes them independently of src/util/calendar.ts). `period` is then not used by the model.
   */
  window?: (t: bigint) => readonly [bigint, bigint];
  /**
   * onLimit: delay (token_bucket, gcra): a check short of tokens whose wait ceil((c − tokens)·P/L) is at most
   * this is admitted now, tokens −= c (below 0: a debt), with `delayMs` = that wait; a longer wait is denied
   * with retryAfterMs = wait − maxDelayMs (the earliest retry that is admitted, then with the longest delay).
   * The engine takes it per policy (the same for each of its limits); absent or 0: no delay.
   */
  maxDelayMs?: number;
}

/** A policy: one limit, or several limits that must all admit. */
export type ModelPolicy = ModelLimit | { limits: ModelLimit[] };

export interface ModelDecision {
  allowed: boolean;
  remaining: number;
  resetAfterMs: number;
  /** 0 when admitted; null when the check can never be admitted. */
  retryAfterMs: number | null;
  /** Admitted later (onLimit: delay): the wait, > 0; absent otherwise. */
  delayMs?: number;
}

// ---------------------------------------------------------------------------------------------------------
// Exact rationals
// ---------------------------------------------------------------------------------------------------------

function gcd(a: bigint, b: bigint): bigint {
  if (a < 0n) a = -a;
  if (b < 0n) b = -b;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/** An exact rational n/d with d > 0, always reduced. Immutable. */
export class Q {
  readonly n: bigint;
  readonly d: bigint;

  constructor(n: bigint, d: bigint = 1n) {
    if (d === 0n) throw new RangeError('Q: zero denominator');
    if (d < 0n) {
      n = -n;
      d = -d;
    }
    const g = gcd(n, d);
    this.n = g > 1n ? n / g : n;
    this.d = g > 1n ? d / g : d;
  }

  static of(x: bigint | number): Q {
    return new Q(BigInt(x));
  }

  add(o: Q | bigint): Q {
    const b = toQ(o);
    return new Q(this.n * b.d + b.n * this.d, this.d * b.d);
  }

  sub(o: Q | bigint): Q {
    const b = toQ(o);
    return new Q(this.n * b.d - b.n * this.d, this.d * b.d);
  }

  mul(o: Q | bigint): Q {
    const b = toQ(o);
    return new Q(this.n * b.n, this.d * b.d);
  }

  div(o: Q | bigint): Q {
    const b = toQ(o);
    return new Q(this.n * b.d, this.d * b.n);
  }

  cmp(o: Q | bigint): number {
    const b = toQ(o);
    const l = this.n * b.d;
    const r = b.n * this.d;
    return l < r ? -1 : l > r ? 1 : 0;
  }

  le(o: Q | bigint): boolean {
    return this.cmp(o) <= 0;
  }

  /** Largest integer ≤ this. */
  floor(): bigint {
    const q = this.n / this.d; // truncates toward zero
    return this.n < 0n && q * this.d !== this.n ? q - 1n : q;
  }

  /** Smallest integer ≥ this. */
  ceil(): bigint {
    return -new Q(-this.n, this.d).floor();
  }
}

function toQ(x: Q | bigint): Q {
  return typeof x === 'bigint' ? new Q(x) : x;
}

function minQ(a: Q, b: Q): Q {
  return a.cmp(b) <= 0 ? a : b;
}

function maxBig(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/** Integer floor division for bigints (P > 0). */
function floorDiv(a: bigint, b: bigint): bigint {
  return new Q(a, b).floor();
}

/** Converts a bigint answer to a JS number (all answers are safe integers for valid inputs). */
function num(x: bigint): number {
  return Number(x);
}

// ---------------------------------------------------------------------------------------------------------
// Per-limit evaluation: a pure function (state, cost, t) -> decision and, if admitted, the new state.
// States are immutable values; a new state replaces the old one only when the check is admitted.
// ---------------------------------------------------------------------------------------------------------

interface BucketState {
  kind: 'bucket';
  tokens: Q;
  lastSeen: bigint;
}

interface FixedState {
  kind: 'fixed';
  count: bigint;
  lastSeen: bigint;
}

interface SlidingState {
  kind: 'sliding';
  /** Index k of the window that `cur` counts; `prev` counts window k − 1. */
  window: bigint;
  prev: bigint;
  cur: bigint;
  lastSeen: bigint;
}

interface LogState {
  kind: 'log';
  /** Every admitted check with cost > 0, in order: [t', cost] (no coalescing: the model keeps them all). */
  entries: ReadonlyArray<readonly [bigint, bigint]>;
  lastSeen: bigint;
}

type LimitState = BucketState | FixedState | SlidingState | LogState;

interface Evaluation {
  decision: ModelDecision;
  /** The state after an admitted check with c > 0; undefined when nothing changes. */
  next: LimitState | undefined;
}

/** t' = max(t, lastSeen); a new key has no lastSeen. */
function effectiveTime(state: LimitState | undefined, t: bigint): bigint {
  return state === undefined ? t : maxBig(t, state.lastSeen);
}

function allow(remaining: bigint, resetAfterMs: bigint): ModelDecision {
  return { allowed: true, remaining: num(remaining), resetAfterMs: num(resetAfterMs), retryAfterMs: 0 };
}

function deny(remaining: bigint, resetAfterMs: bigint, retryAfterMs: bigint | null): ModelDecision {
  return {
    allowed: false,
    remaining: num(remaining),
    resetAfterMs: num(resetAfterMs),
    retryAfterMs: retryAfterMs === null ? null : num(retryAfterMs),
  };
}

/**
 * token_bucket (and gcra, which must give identical decisions and numbers):
 * tokens = min(B, tokens + elapsed·L/P); admitted iff c ≤ tokens, then tokens −= c.
 * remaining = floor(tokens after); retryAfterMs = ceil((c − tokens)·P/L); resetAfterMs = ceil((B − tokens)·P/L).
 */
function evalBucket(lim: ModelLimit, state: BucketState | undefined, cost: bigint, t: bigint): Evaluation {
  const L = BigInt(lim.limit);
  const P = BigInt(lim.period);
  const B = BigInt(lim.burst ?? lim.limit);
  const now = effectiveTime(state, t);

  // limit 0: nothing can ever be spent, so nothing is reported as remaining either
  const tokens = L === 0n ? Q.of(0n)
    : state === undefined ? Q.of(B) : minQ(Q.of(B), state.tokens.add(new Q((now - state.lastSeen) * L, P)));

  // Time until the bucket is full again from `tk` tokens (0 when full; a limit-0 bucket never changes).
  const resetFrom = (tk: Q): bigint => (L === 0n ? 0n : Q.of(B).sub(tk).mul(P).div(L).ceil());

  // in debt (onLimit: delay) nothing is left: remaining is never negative
  if (cost === 0n) return { decision: allow(maxBig(0n, tokens.floor()), resetFrom(tokens)), next: undefined };
  if (L === 0n || cost > B) return { decision: deny(maxBig(0n, tokens.floor()), resetFrom(tokens), null), next: undefined };

  if (Q.of(cost).le(tokens)) {
    const after = tokens.sub(cost);
    return {
      decision: allow(after.floor(), resetFrom(after)),
      next: { kind: 'bucket', tokens: after, lastSeen: now },
    };
  }
  const retry = Q.of(cost).sub(tokens).mul(P).div(L).ceil();
  const maxDelay = BigInt(lim.maxDelayMs ?? 0);
  if (retry <= maxDelay) {
    const after = tokens.sub(cost); // a debt: repaid by the refill before the caller proceeds
    return {
      decision: { ...allow(0n, resetFrom(after)), delayMs: num(retry) },
      next: { kind: 'bucket', tokens: after, lastSeen: now },
    };
  }
  return { decision: deny(maxBig(0n, tokens.floor()), resetFrom(tokens), maxDelay > 0n ? retry - maxDelay : retry), next: undefined };
}

/**
 * fixed_window: windows [k·P, (k+1)·P) aligned to the epoch (or the calendar windows of `lim.window`); the
 * count resets when t' lies in a later window than lastSeen. Admitted iff count + c ≤ L. remaining = L − count; resetAfterMs = window end − t';
 * retryAfterMs (denied) = window end − t'.
 */
function evalFixed(lim: ModelLimit, state: FixedState | undefined, cost: bigint, t: bigint): Evaluation {
  const L = BigInt(lim.limit);
  const P = BigInt(lim.period);
  const now = effectiveTime(state, t);
  let count: bigint;
  let untilEnd: bigint;
  if (lim.window !== undefined) {
    // calendar windows: lastSeen ≤ now, so lastSeen ≥ the start of now's window means the same window
    const [start, end] = lim.window(now);
    count = state !== undefined && state.lastSeen >= start ? state.count : 0n;
    untilEnd = end - now;
  } else {
    const k = floorDiv(now, P);
    count = state !== undefined && floorDiv(state.lastSeen, P) === k ? state.count : 0n;
    untilEnd = (k + 1n) * P - now;
  }

  if (cost === 0n) return { decision: allow(L - count, untilEnd), next: undefined };
  if (L === 0n || cost > L) return { decision: deny(L - count, untilEnd, null), next: undefined };

  if (count + cost <= L) {
    return {
      decision: allow(L - (count + cost), untilEnd),
      next: { kind: 'fixed', count: count + cost, lastSeen: now },
    };
  }
  return { decision: deny(L - count, untilEnd, untilEnd), next: undefined };
}

/** The sliding window's estimate: prev·(P − e)/P + cur, exactly. */
function slidingEstimate(prev: bigint, cur: bigint, e: bigint, P: bigint): Q {
  return new Q(prev * (P - e), P).add(cur);
}

/**
 * The sliding window's retryAfterMs, in closed form: the smallest whole d ≥ 1 such that a check of cost c
 * made d ms after an instant at offset e in window k (counts prev, cur) would be admitted if nothing else
 * arrived. Preconditions: 0 < c ≤ L, 0 ≤ e < P, and the check is denied now.
 *
 * The estimate only falls with time inside a window, so in each window there is a least admitting offset:
 * - still in window k (offset x, e < x < P): prev·(P − x)/P + cur + c ≤ L ⇔ prev·(P − x) ≤ (L − cur − c)·P;
 * - in window k + 1 (prev' = cur, cur' = 0; offset x, 0 ≤ x < P): cur·(P − x) ≤ (L − c)·P;
 * - from window k + 2 on, the estimate is 0 and c ≤ L fits: d = 2P − e.
 */
export function slidingRetryAfter(
  prev: bigint,
  cur: bigint,
  e: bigint,
  P: bigint,
  L: bigint,
  c: bigint,
): bigint {
  // Least offset x in [0, P] with w·(P − x) ≤ room·P (room ≥ 0, w ≥ 0): x ≥ P − room·P/w.
  const leastOffset = (w: bigint, room: bigint): bigint => (w === 0n ? 0n : maxBig(0n, P - floorDiv(room * P, w)));

  const roomNow = L - cur - c;
  if (roomNow >= 0n) {
    const x = maxBig(e + 1n, leastOffset(prev, roomNow));
    if (x < P) return x - e;
  }
  const x = leastOffset(cur, L - c);
  if (x < P) return P - e + x;
  return 2n * P - e;
}

/**
 * sliding_window: current window k = floor(t'/P); prev = count of window k − 1, cur = count of window k.
 * e = t' − k·P; estimate = prev·(P − e)/P + cur. Admitted iff estimate + c ≤ L, then cur += c.
 * remaining = floor(L − estimate after); retryAfterMs: see {@link slidingRetryAfter};
 * resetAfterMs = cur > 0 ? (k+2)·P − t' : prev > 0 ? (k+1)·P − t' : 0.
 */
function evalSliding(lim: ModelLimit, state: SlidingState | undefined, cost: bigint, t: bigint): Evaluation {
  const L = BigInt(lim.limit);
  const P = BigInt(lim.period);
  const now = effectiveTime(state, t);
  const k = floorDiv(now, P);
  const e = now - k * P;

  // Roll the stored counts forward to window k.
  let prev = 0n;
  let cur = 0n;
  if (state !== undefined) {
    const passed = k - state.window;
    if (passed === 0n) {
      prev = state.prev;
      cur = state.cur;
    } else if (passed === 1n) {
      prev = state.cur;
    }
  }

  const resetFor = (p: bigint, c: bigint): bigint =>
    c > 0n ? (k + 2n) * P - now : p > 0n ? (k + 1n) * P - now : 0n;
  const estimate = slidingEstimate(prev, cur, e, P);
  const remainingNow = Q.of(L).sub(estimate).floor();

  if (cost === 0n) return { decision: allow(remainingNow, resetFor(prev, cur)), next: undefined };
  if (L === 0n || cost > L) return { decision: deny(remainingNow, resetFor(prev, cur), null), next: undefined };

  if (estimate.add(cost).le(Q.of(L))) {
    const curAfter = cur + cost;
    const remainingAfter = Q.of(L).sub(slidingEstimate(prev, curAfter, e, P)).floor();
    return {
      decision: allow(remainingAfter, resetFor(prev, curAfter)),
      next: { kind: 'sliding', window: k, prev, cur: curAfter, lastSeen: now },
    };
  }
  const retry = slidingRetryAfter(prev, cur, e, P, L, cost);
  return { decision: deny(remainingNow, resetFor(prev, cur), retry), next: undefined };
}

/**
 * sliding_log: the admitted cost whose t' lies in the trailing period (t' − P, t'] is `used`; admitted iff
 * used + c ≤ L. remaining = L − used after; resetAfterMs = (newest entry + P) − t' (0 with none in the period;
 * P right after an admission); retryAfterMs (denied) = the time until enough of the oldest entries have left
 * (an entry at ts leaves at ts + P) that used' + c ≤ L.
 */
function evalLog(lim: ModelLimit, state: LogState | undefined, cost: bigint, t: bigint): Evaluation {
  const L = BigInt(lim.limit);
  const P = BigInt(lim.period);
  const now = effectiveTime(state, t);
  const live = (state?.entries ?? []).filter(([ts]) => ts > now - P);
  const used = live.reduce((a, [, c]) => a + c, 0n);
  const remainingNow = used < L ? L - used : 0n;
  const resetNow = live.length > 0 ? live[live.length - 1][0] + P - now : 0n;
  if (cost === 0n) return { decision: allow(remainingNow, resetNow), next: undefined };
  if (L === 0n || cost > L) return { decision: deny(remainingNow, resetNow, null), next: undefined };
  if (used + cost <= L) {
    return {
      decision: allow(L - used - cost, P),
      next: { kind: 'log', entries: [...live, [now, cost] as const], lastSeen: now },
    };
  }
  let stay = used;
  for (const [ts, c] of live) {
    stay -= c;
    if (stay + cost <= L) return { decision: deny(remainingNow, resetNow, ts + P - now), next: undefined };
  }
  throw new Error('model: unreachable (an empty log admits any cost ≤ L)');
}

function evaluate(lim: ModelLimit, state: LimitState | undefined, cost: bigint, t: bigint): Evaluation {
  switch (lim.algorithm) {
    case 'token_bucket':
    case 'gcra':
      return evalBucket(lim, state as BucketState | undefined, cost, t);
    case 'fixed_window':
      return evalFixed(lim, state as FixedState | undefined, cost, t);
    case 'sliding_window':
      return evalSliding(lim, state as SlidingState | undefined, cost, t);
    case 'sliding_log':
      return evalLog(lim, state as LogState | undefined, cost, t);
  }
}

// ---------------------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------------------

function limitsOf(policy: ModelPolicy): ModelLimit[] {
  return 'limits' in policy ? policy.limits : [policy];
}

/**
 * Combines the per-limit decisions of a multi-limit policy.
 * Allowed: the limit with the smallest remaining (first on ties).
 * Denied: among the denying limits, one that says "never" (null) if any, else the largest retryAfterMs
 * (first on ties).
 */
export function combine(decisions: ModelDecision[]): ModelDecision {
  const denying = decisions.filter((d) => !d.allowed);
  if (denying.length === 0) {
    // the limit closest to denying: fewest tokens left, then the longest reset, then the first
    const best = decisions.reduce((b, d) =>
      d.remaining < b.remaining || (d.remaining === b.remaining && d.resetAfterMs > b.resetAfterMs) ? d : b);
    // onLimit: delay: the check waits for its slowest limit
    const delay = Math.max(0, ...decisions.map((d) => d.delayMs ?? 0));
    const { delayMs: _, ...rest } = best;
    return delay > 0 ? { ...rest, delayMs: delay } : rest;
  }
  const never = denying.find((d) => d.retryAfterMs === null);
  if (never !== undefined) return never;
  return denying.reduce((best, d) => ((d.retryAfterMs as number) > (best.retryAfterMs as number) ? d : best));
}

export class ReferenceModel {
  private readonly policies: Record<string, ModelPolicy>;
  /** policy name → key → one state per limit (undefined: never admitted, i.e. a new key). */
  private readonly states = new Map<string, Map<string, (LimitState | undefined)[]>>();

  constructor(policies: Record<string, ModelPolicy>) {
    this.policies = policies;
  }

  check(policy: string, key: string, cost: number, t: number): ModelDecision {
    const limits = limitsOf(this.policies[policy]);
    let byKey = this.states.get(policy);
    if (byKey === undefined) {
      byKey = new Map();
      this.states.set(policy, byKey);
    }
    const current = byKey.get(key) ?? limits.map(() => undefined);

    const c = BigInt(cost);
    const now = BigInt(t);
    const evaluations = limits.map((lim, i) => evaluate(lim, current[i], c, now));
    const allowed = evaluations.every((ev) => ev.decision.allowed);

    // Admitted with c > 0: every limit consumes. Otherwise (denied, or a peek) nothing changes.
    if (allowed && c > 0n) {
      byKey.set(
        key,
        evaluations.map((ev) => ev.next),
      );
    }
    return { ...combine(evaluations.map((ev) => ev.decision)) };
  }

  /** An independent copy (states are immutable values, so copying the maps is enough). */
  clone(): ReferenceModel {
    const copy = new ReferenceModel(this.policies);
    for (const [policy, byKey] of this.states) copy.states.set(policy, new Map(byKey));
    return copy;
  }
}
