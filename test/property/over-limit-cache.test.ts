/**
 * The over-limit cache (src/engine/strict/over-limit.ts) changes no decision: the same calls, made on three
 * instances sharing one Redis, give row for row the decisions three instances without the cache give
 * (`redis.overLimitCache: false`, another key prefix on the same Redis), on one controlled clock.
 *
 * - One cost per key (and cost-0 peeks): every field is equal (allowed, limit, remaining, resetAfterMs,
 *   retryAfterMs, policy, reason).
 * - Any costs: `allowed` is equal row for row (another instance's smaller cost may spend from a key this
 *   instance holds a denial for: the denial stands, but Redis would then report less remaining).
 * - Calendar periods (`1d` in a time zone, `1mo`, alone, with a token bucket, guarded): the same, each run
 *   starting up to 1.5 s before a window edge (a Tokyo midnight, a UTC or a Tokyo month's start), so denials
 *   learned in one window meet checks in the next; the cache evaluates them in the window of the time it
 *   answers at, as the script would.
 * - The TS twins (src/store/lua-algorithms.ts) give the script's numbers for any state: lua/check.lua run on
 *   one leg (EVAL, the time given) against evaluateLeg, for every algorithm the cache answers.
 *
 * Redis's wall clock is frozen (test/helpers/redis.ts startFrozenRedis) and the script runs on the limiter's
 * clock (`clock: 'limiter'`), so keys live exactly as long as the controlled clock says. Calls are sequential
 * (each awaited), as the rows of a table.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkBe, checkStrictEqual } from '../helpers/assert.js';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { startFrozenRedis, type FrozenRedis, connected } from '../helpers/redis.js';
import { calendarWindow } from '../../src/util/calendar.js';
import { evaluateLeg } from '../../src/store/lua-algorithms.js';
import { checkScript } from '../../src/store/scripts.js';
import { unpackReply } from '../../src/store/reply.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

const INSTANCES = 3;
const POLICIES = {
  tb: { algorithm: 'token_bucket', limit: 5, period: 1000, burst: 5 },
  gcra: { algorithm: 'gcra', limit: 5, period: 1000, burst: 3 },
  fw: { algorithm: 'fixed_window', limit: 5, period: 1000 },
  sw: { algorithm: 'sliding_window', limit: 5, period: 1000 },
  two: { limits: [{ algorithm: 'token_bucket', limit: 3, period: 500 }, { algorithm: 'fixed_window', limit: 8, period: 2000 }] },
  g: { algorithm: 'token_bucket', limit: 6, period: 1000 },
  guarded: { algorithm: 'fixed_window', limit: 4, period: 1000, guard: 'g' },
  // calendar windows (lua/calendar_window.lua): only in the calendar runs, which start near a window edge
  day: { algorithm: 'fixed_window', limit: 5, period: '1d', timeZone: 'Asia/Tokyo' },
  month: { algorithm: 'fixed_window', limit: 2, period: '1mo' },
  calTwo: { limits: [{ algorithm: 'fixed_window', limit: 6, period: '1mo', timeZone: 'Asia/Tokyo' }, { algorithm: 'token_bucket', limit: 3, period: 500 }] },
  calGuarded: { algorithm: 'fixed_window', limit: 3, period: '1d', timeZone: 'Asia/Tokyo', guard: 'g' },
} as const;
type Name = keyof typeof POLICIES;
const CALENDAR: Name[] = ['day', 'month', 'calTwo', 'calGuarded'];
const NAMES = (Object.keys(POLICIES) as Name[]).filter((n) => !CALENDAR.includes(n));
const strictPolicies = Object.fromEntries(Object.entries(POLICIES).map(([k, v]) => [k, { ...v, consistency: 'strict', onStoreError: 'closed' }])) as unknown as Policies;

let redis: FrozenRedis;
let now = 1_700_000_000_000;
const cached: Limiter[] = [];
const plain: Limiter[] = [];
let run = 0;

async function limiter(prefix: string, overLimitCache: boolean): Promise<Limiter> {
  const l = await createLimiter({ policies: strictPolicies, clock: () => now, maxKeys: 4096, redis: { url: redis.url, prefix, clock: 'limiter', timeoutMs: 1000, overLimitCache } });
  await connected(l);
  return l;
}

beforeAll(async () => {
  redis = await startFrozenRedis();
  for (let i = 0; i < INSTANCES; i++) {
    cached.push(await limiter('olc-a:', true));
    plain.push(await limiter('olc-b:', false));
  }
}, 30_000);

afterAll(async () => {
  await Promise.all([...cached, ...plain].map((l) => l.close()));
  await redis?.stop();
});

interface Row { inst: number; policy: number; key: number; dt: number; cost: number }

const rowArb = (costOf: (r: { policy: number; key: number; pick: number }) => number, names = NAMES.length): fc.Arbitrary<Row> =>
  fc.record({
    inst: fc.integer({ min: 0, max: INSTANCES - 1 }),
    policy: fc.integer({ min: 0, max: names - 1 }),
    key: fc.integer({ min: 0, max: 1 }),
    // mostly no time or a little (denials repeat), sometimes about a period (refills)
    dt: fc.oneof({ arbitrary: fc.constant(0), weight: 5 }, { arbitrary: fc.integer({ min: 1, max: 50 }), weight: 3 },
      { arbitrary: fc.integer({ min: 100, max: 1500 }), weight: 1 }),
    pick: fc.integer({ min: 0, max: 9 }),
  }).map((r) => ({ inst: r.inst, policy: r.policy, key: r.key, dt: r.dt, cost: costOf(r) }));

/** One cost per (policy, key): 1, 2 or 3 (a peek, cost 0, one row in ten). */
const uniform = rowArb((r) => (r.pick === 0 ? 0 : 1 + ((r.policy + r.key) % 3)));
/** Any cost from 0 to 4. */
const mixed = rowArb((r) => r.pick % 5);

/** As {@link uniform} and {@link mixed}, over the calendar policies. */
const calendarUniform = rowArb((r) => (r.pick === 0 ? 0 : 1 + ((r.policy + r.key) % 3)), CALENDAR.length);
const calendarMixed = rowArb((r) => r.pick % 5, CALENDAR.length);

const view = (d: Decision): Decision => ({ ...d });

/** What a replay saw: the cache's answers, and keys admitted in a window after a denial in the one before. */
interface Replayed { answers: number; acrossEdge: number }

/**
 * Replays `rows` on both sets of instances. With `edge` (Unix ms: a calendar window's end the run starts
 * before), counts the keys denied before it and admitted after it.
 */
async function replay(rows: Row[], fields: 'all' | 'allowed', names: readonly Name[] = NAMES, edge = Number.NaN): Promise<Replayed> {
  run++;
  let answers = 0, acrossEdge = 0;
  const deniedBefore = new Set<string>();
  const before = await Promise.all(cached.map(async (l) => (await l.stats()).store!.overLimitAnswers));
  for (const [i, r] of rows.entries()) {
    now += r.dt;
    const policy = names[r.policy];
    // the guarded policy's keys share the guard "*"; direct checks on the guard use its own key space
    const req = { policy, key: `r${run}k${r.key}`, cost: r.cost };
    const a = view(await cached[r.inst].check(req));
    const b = view(await plain[r.inst].check(req));
    // check*: expect() only on a difference (test/helpers/assert.ts): this runs for every row of every run
    const where = (): string => `row ${i} ${JSON.stringify({ ...r, policy })}`;
    if (fields === 'all') checkStrictEqual(a, b, where);
    else checkBe(a.allowed, b.allowed, where);
    checkBe(a.degraded, undefined, where);
    if (now < edge && !a.allowed) deniedBefore.add(req.key + policy);
    else if (now >= edge && a.allowed && deniedBefore.delete(req.key + policy)) acrossEdge++;
  }
  const after = await Promise.all(cached.map(async (l) => (await l.stats()).store!.overLimitAnswers));
  after.forEach((n, k) => (answers += n - before[k]));
  return { answers, acrossEdge };
}

/**
 * Moves the clock to 1 to 1,500 ms before the next window edge of one of the calendar policies' periods (by
 * run: a Tokyo midnight, a UTC month's start, a Tokyo month's start) and returns that edge.
 */
function nearEdge(): number {
  const periods = [{ unit: 'd', timeZone: 'Asia/Tokyo' }, { unit: 'mo', timeZone: 'UTC' }, { unit: 'mo', timeZone: 'Asia/Tokyo' }] as const;
  const edge = calendarWindow(periods[run % 3], now + 2000).endMs;
  now = edge - 1 - ((run * 397) % 1500);
  return edge;
}

describe('the over-limit cache changes no decision (3 instances, one Redis, a controlled clock)', () => {
  it('one cost per key: every field equal, row for row; the cache answered some', async () => {
    let answers = 0;
    await fc.assert(fc.asyncProperty(fc.array(uniform, { minLength: 40, maxLength: 80 }), async (rows) => {
      answers += (await replay(rows, 'all')).answers;
    }), { numRuns: 60, seed: 13 });
    // (a fixed seed: the count is then the same every run; the equality above holds for any seed)
    expect(answers, 'checks answered by the cache over all runs').toBeGreaterThan(30);
  }, 120_000);

  it('any costs: allowed equal, row for row', async () => {
    await fc.assert(fc.asyncProperty(fc.array(mixed, { minLength: 20, maxLength: 60 }), async (rows) => {
      await replay(rows, 'allowed');
    }), { numRuns: 30 });
  }, 120_000);

  it('calendar periods, across a window edge: every field equal, row for row; denials answered until the edge', async () => {
    let answers = 0, acrossEdge = 0;
    await fc.assert(fc.asyncProperty(fc.array(calendarUniform, { minLength: 40, maxLength: 80 }), async (rows) => {
      const r = await replay(rows, 'all', CALENDAR, nearEdge());
      answers += r.answers;
      acrossEdge += r.acrossEdge;
    }), { numRuns: 45, seed: 13 });
    // (a fixed seed: the counts are then the same every run, 570 and 55 when written)
    expect(answers, 'calendar checks answered by the cache over all runs').toBeGreaterThan(100);
    expect(acrossEdge, 'keys denied before a window edge and admitted after it').toBeGreaterThan(10);
  }, 120_000);

  it('calendar periods, any costs: allowed equal, row for row', async () => {
    await fc.assert(fc.asyncProperty(fc.array(calendarMixed, { minLength: 20, maxLength: 60 }), async (rows) => {
      await replay(rows, 'allowed', CALENDAR, nearEdge());
    }), { numRuns: 30 });
  }, 120_000);
});

/**
 * One leg for the twins to decide: algorithm (token bucket, GCRA, fixed, sliding window), L, P, B, two fractions
 * the state is made from, cost, time, and lastSeen relative to it.
 */
const LEG_DRAW = {
  alg: fc.integer({ min: 0, max: 3 }),
  L: fc.integer({ min: 1, max: 6 }),
  P: fc.constantFrom(500, 1000, 1500),
  B: fc.integer({ min: 1, max: 8 }),
  x: fc.double({ min: 0, max: 1, noNaN: true }),
  y: fc.double({ min: 0, max: 1, noNaN: true }),
  c: fc.integer({ min: 0, max: 9 }),
  t: fc.integer({ min: 1_700_000_000_000, max: 1_700_000_005_000 }),
  lastDt: fc.integer({ min: -4000, max: 500 }),
};

describe('the TS twins give lua/check.lua\'s numbers (one leg, EVAL at a given time)', () => {
  const P_END = Date.parse('2026-02-01T00:00:00Z');
  const B_END = P_END + 10_000;
  /** lua/check.lua on one leg whose key holds (w0, w1, last) (last < 0: absent), at time t: its 4 numbers. */
  async function lua(alg: number, L: number, P: number, B: number, w0: number, w1: number, last: number, c: number, t: number): Promise<number[]> {
    const key = 'twin:k';
    if (last < 0) await redis.client.del(key);
    else {
      const v = Buffer.alloc(24);
      [w0, w1, last].forEach((x, i) => v.writeDoubleLE(x, 8 * i));
      await redis.client.set(key, v);
    }
    const args = [alg, L, P, B, c, 1];
    const packed = Buffer.alloc(48);
    args.forEach((x, i) => packed.writeDoubleLE(x, 8 * i));
    return unpackReply(await redis.client.callBuffer('eval', checkScript(), 1, key, '0', String(t), '1', packed), args, 0).slice(0, 4);
  }
  function twin(alg: number, L: number, P: number, B: number, w0: number, w1: number, last: number, c: number, t: number): number[] {
    const out = new Float64Array(4);
    evaluateLeg(alg, L, P, B, w0, w1, last, c, t, out, 0);
    return [...out];
  }

  it('calendar window: the caller\'s window, the next, past both (UNREADABLE), a stored count in force or over', async () => {
    const arb = fc.record({
      L: fc.integer({ min: 1, max: 8 }),
      count: fc.integer({ min: 0, max: 9 }),
      // the stored count's window: an earlier one, the caller's, the next
      w1: fc.constantFrom(P_END - 20_000, P_END, B_END),
      absent: fc.boolean(),
      c: fc.integer({ min: 0, max: 10 }),
      t: fc.integer({ min: P_END - 3000, max: B_END + 2000 }),
      // lastSeen: before t, or after it (another caller's clock ahead)
      lastDt: fc.integer({ min: -5000, max: 1000 }),
    });
    await fc.assert(fc.asyncProperty(arb, async (a) => {
      const last = a.absent ? -1 : Math.max(0, a.t + a.lastDt);
      const args = [4, a.L, P_END, B_END, a.count, a.w1, last, a.c, a.t] as const;
      expect(twin(...args), JSON.stringify(a)).toStrictEqual(await lua(...args));
    }), { numRuns: 400, seed: 4 });
  });

  it('token bucket, GCRA, fixed and sliding window', async () => {
    const arb = fc.record({ ...LEG_DRAW, absent: fc.boolean() });
    await fc.assert(fc.asyncProperty(arb, async (a) => {
      const last = a.absent ? -1 : a.t + a.lastDt;
      const { L, P, B } = a;
      // a state the algorithm can hold: tokens·P up to B·P; a TAT up to B·P / L past last (w1 < L); counts
      // up to L (a sliding window's previous and current)
      let w0 = 0, w1 = 0;
      if (a.alg === 0) w0 = Math.floor(a.x * B * P);
      else if (a.alg === 1) {
        const debt = Math.floor(a.x * B * P);
        w0 = last + Math.floor(debt / L);
        w1 = debt % L;
      } else if (a.alg === 2) w0 = Math.floor(a.x * (L + 1));
      else {
        w0 = Math.floor(a.x * (L + 1));
        w1 = Math.floor(a.y * (L + 1));
      }
      if (last < 0) w0 = w1 = 0;
      const args = [a.alg, L, P, B, w0, w1, last, a.c, a.t] as const;
      expect(twin(...args), JSON.stringify({ ...a, w0, w1, last })).toStrictEqual(await lua(...args));
    }), { numRuns: 400, seed: 5 });
  });

  it('states past the limits, as delayed admissions and sync merges leave them: a bucket in debt, a TAT past B·P, counts past L', async () => {
    // (a reload from onLimit: delay to deny keeps the version and so the keys, as does a key moved from sync to
    // strict: the cache then meets such a state, and its answer must be the script's, remaining 0 not below)
    const arb = fc.record(LEG_DRAW);
    await fc.assert(fc.asyncProperty(arb, async (a) => {
      const last = a.t + a.lastDt;
      const { L, P, B } = a;
      let w0 = 0, w1 = 0;
      if (a.alg === 0) w0 = -Math.floor(a.x * 2 * B * P); // up to 2·B·P of debt
      else if (a.alg === 1) {
        const debt = B * P + Math.floor(a.x * 2 * B * P); // from B·P to 3·B·P past last
        w0 = last + Math.floor(debt / L);
        w1 = debt % L;
      } else {
        w0 = L + Math.floor(a.x * 2 * L); // counts from L to 3·L
        w1 = a.alg === 3 ? L + Math.floor(a.y * 2 * L) : 0;
      }
      const args = [a.alg, L, P, B, w0, w1, last, a.c, a.t] as const;
      const got = twin(...args);
      expect(got, JSON.stringify({ ...a, w0, w1, last })).toStrictEqual(await lua(...args));
      expect(got[1], 'remaining').toBeGreaterThanOrEqual(0);
    }), { numRuns: 400, seed: 6 });
  });
});
