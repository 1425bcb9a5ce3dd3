/**
 * Calendar windows (fixed_window over `1d` in a time zone, `1w`, `1mo`), differentially:
 * - the engine (createLimiter, shards 0 and 2) against the reference model, whose windows come from
 *   test/helpers/calendar-model.ts (an independent computation of local midnights);
 * - strict mode (lua/calendar_window.lua in a frozen-clock Redis, `clock: 'limiter'`) against the local
 *   kernel, decision for decision;
 * - src/util/calendar.ts's windows against the model's, at random instants.
 *
 * fast-check draws a time zone (UTC, Asia/Tokyo, Europe/Berlin, America/Santiago whose DST starts at
 * midnight, Australia/Lord_Howe whose DST shift is 30 min, America/St_Johns at −03:30), units, limits 0..5
 * and sequences of calls whose time moves by 0, a few ms, hours, days, backwards, or to just before, at and
 * after the current window's end (computed by the model); start times span 2024..2030.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkStrictEqual } from '../helpers/assert.js';
import { createLimiter, type Decision } from '../../src/index.js';
import { calendarWindow } from '../../src/util/calendar.js';
import { modelWindow } from '../helpers/calendar-model.js';
import { connected, startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';
import { ReferenceModel, type ModelLimit } from '../helpers/model.js';
import { Clock, MAX_KEYS, pick, type Limiter } from './support.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];
type Unit = 'd' | 'w' | 'mo';

const ZONES = ['UTC', 'Asia/Tokyo', 'Europe/Berlin', 'America/Santiago', 'Australia/Lord_Howe', 'America/St_Johns'];
const UNITS: Unit[] = ['d', 'w', 'mo'];
const PERIOD: Record<Unit, string> = { d: '1d', w: '1w', mo: '1mo' };
const FROM = Date.UTC(2024, 0, 1);
const TO = Date.UTC(2030, 0, 1);

interface CalLimit { unit: Unit; zone: string; limit: number }
interface Move { kind: 'dt'; dt: number }
interface Edge { kind: 'edge'; off: -1 | 0 | 1 }
interface CalCall { move: Move | Edge; key: string; cost: number; policy: 'one' | 'two' }

const calLimitArb: fc.Arbitrary<CalLimit> = fc.record({
  unit: fc.constantFrom(...UNITS), zone: fc.constantFrom(...ZONES), limit: fc.integer({ min: 0, max: 5 }),
});

const moveArb: fc.Arbitrary<Move | Edge> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(-1, 0, 1).map((off) => ({ kind: 'edge' as const, off: off as -1 | 0 | 1 })) },
  { weight: 2, arbitrary: fc.constant({ kind: 'dt' as const, dt: 0 }) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 5000 }).map((dt) => ({ kind: 'dt' as const, dt })) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 30 * 3_600_000 }).map((dt) => ({ kind: 'dt' as const, dt })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 40 * 86_400_000 }).map((dt) => ({ kind: 'dt' as const, dt })) },
  { weight: 1, arbitrary: fc.integer({ min: -3 * 3_600_000, max: -1 }).map((dt) => ({ kind: 'dt' as const, dt })) },
);

const callArb: fc.Arbitrary<CalCall> = fc.record({
  move: moveArb,
  key: fc.constantFrom('a', 'b'),
  cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 0, max: 6 }) }),
  policy: fc.constantFrom('one' as const, 'two' as const),
});

const runArb = fc.tuple(calLimitArb, calLimitArb, fc.integer({ min: FROM, max: TO }), fc.array(callArb, { minLength: 1, maxLength: 60 }));

function modelLimit(l: CalLimit): ModelLimit {
  return { algorithm: 'fixed_window', limit: l.limit, period: 86_400_000, window: modelWindow(l.unit, l.zone) };
}

function spec(l: CalLimit): Record<string, unknown> {
  return { algorithm: 'fixed_window', limit: l.limit, period: PERIOD[l.unit], timeZone: l.zone };
}

function policiesOf(a: CalLimit, b: CalLimit, extra: Record<string, unknown> = {}): Policies {
  return {
    one: { ...spec(a), ...extra },
    two: { limits: [{ ...spec(a), name: 'a' }, { ...spec(b), name: 'b' }], ...extra },
  } as unknown as Policies;
}

/** The calls' times: a move to an edge goes to the end of the window of the first limit at the current time. */
function times(a: CalLimit, start: number, calls: CalCall[]): number[] {
  const w = modelWindow(a.unit, a.zone);
  let t = start;
  return calls.map((c) => {
    if (c.move.kind === 'dt') t += c.move.dt;
    else t = Number(w(BigInt(t))[1]) + c.move.off;
    t = Math.min(Math.max(t, 0), 2 ** 48 - 1);
    return t;
  });
}

async function engineVsModel(shards: number, a: CalLimit, b: CalLimit, start: number, calls: CalCall[]): Promise<void> {
  const model = new ReferenceModel({ one: modelLimit(a), two: { limits: [modelLimit(a), modelLimit(b)] } });
  const clock = new Clock();
  const limiter = await createLimiter({ policies: policiesOf(a, b), shards, clock: clock.read, maxKeys: MAX_KEYS });
  try {
    const ts = times(a, start, calls);
    for (const [i, c] of calls.entries()) {
      clock.now = ts[i];
      const d = await limiter.check({ policy: c.policy, key: c.key, cost: c.cost });
      // expect() only on a difference (test/helpers/assert.ts): this runs for every check of every run
      const where = (): string => `call #${i} t=${ts[i]} (${new Date(ts[i]).toISOString()}) ${c.policy} ${c.key} cost ${c.cost}`;
      checkStrictEqual(pick(d), model.check(c.policy, c.key, c.cost, ts[i]), where);
    }
  } finally {
    await limiter.close();
  }
}

describe('calendar windows: src/util/calendar.ts = the model\'s independent windows', () => {
  it('at random instants of 2024..2030, every zone and unit', () => {
    fc.assert(fc.property(fc.constantFrom(...UNITS), fc.constantFrom(...ZONES), fc.integer({ min: FROM, max: TO }), (unit, zone, t) => {
      const w = calendarWindow({ unit, timeZone: zone }, t);
      const [s, e] = modelWindow(unit, zone)(BigInt(t));
      expect([w.startMs, w.endMs]).toStrictEqual([Number(s), Number(e)]);
    }), { numRuns: 300 });
  });
});

describe.each([0, 2])('calendar windows: engine = reference model, shards: %i', (shards) => {
  it('one limit and two limits, random zones, units and clocks', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ([a, b, start, calls]) => {
      await engineVsModel(shards, a, b, start, calls);
    }), { numRuns: shards === 0 ? 150 : 15, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});

describe('calendar windows: strict (lua/calendar_window.lua, limiter clock) = local kernel', () => {
  let redis: FrozenRedis;
  let prefixes = 0;
  beforeAll(async () => { redis = await startFrozenRedis(); });
  afterAll(async () => { await redis?.stop(); });


  function view(d: Decision): unknown {
    return { ...d };
  }

  it('decision for decision', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ([a, b, start, calls]) => {
      const clock = new Clock();
      const local = await createLimiter({ policies: policiesOf(a, b), shards: 0, clock: clock.read, maxKeys: MAX_KEYS });
      const strict = await createLimiter({
        policies: policiesOf(a, b, { consistency: 'strict', onStoreError: 'closed' }), shards: 0, clock: clock.read, maxKeys: MAX_KEYS,
        redis: { url: redis.url, prefix: `cal${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 },
      });
      try {
        await connected(strict);
        const ts = times(a, start, calls);
        for (const [i, c] of calls.entries()) {
          clock.now = ts[i];
          const x = await local.check({ policy: c.policy, key: c.key, cost: c.cost });
          const y = await strict.check({ policy: c.policy, key: c.key, cost: c.cost });
          checkStrictEqual(view(y), view(x), () => `call #${i} t=${ts[i]} ${c.policy} ${c.key} cost ${c.cost}`);
        }
      } finally {
        await strict.close();
        await local.close();
      }
    }), { numRuns: 60, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});
