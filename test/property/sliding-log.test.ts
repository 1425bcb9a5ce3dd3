/**
 * sliding_log: the engine (createLimiter, shards 0 and 2) against the reference model (test/helpers/model.ts,
 * which keeps every admitted check uncoalesced), call for call. fast-check draws limits 0..64 with periods
 * 1..5000 ms (the loader's bound: min(limit, period) ≤ 64), single policies and a sliding log paired with a
 * token bucket on one key (`limits: [a, b]`), and up to 150 calls over 1–3 keys whose time moves by 0, 1 ms,
 * a few ms, about a period, a lot, or backwards; costs 0..L+1 biased to 1. Then strict mode
 * (lua/sliding_log.lua in a frozen-clock Redis, `clock: 'limiter'`) against the local kernel, decision for
 * decision, on the same draws.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkStrictEqual } from '../helpers/assert.js';
import { connected, startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';
import { createLimiter } from '../../src/index.js';
import { ReferenceModel, type ModelLimit } from '../helpers/model.js';
import { Clock, MAX_KEYS, expectWellFormed, pick, type Limiter } from './support.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

const logArb: fc.Arbitrary<ModelLimit> = fc.oneof(
  fc.record({ limit: fc.integer({ min: 0, max: 64 }), period: fc.integer({ min: 1, max: 5000 }) }),
  fc.record({ limit: fc.integer({ min: 65, max: 10_000 }), period: fc.integer({ min: 1, max: 64 }) }),
).map(({ limit, period }) => ({ algorithm: 'sliding_log' as const, limit, period }));

const bucketArb: fc.Arbitrary<ModelLimit> = fc.record({
  algorithm: fc.constant('token_bucket' as const), limit: fc.integer({ min: 1, max: 20 }), period: fc.integer({ min: 1, max: 3000 }),
});

interface Call { dt: number; key: string; cost: number; policy: 'one' | 'two' }

function callArb(cap: number): fc.Arbitrary<Call> {
  return fc.record({
    dt: fc.oneof(
      { weight: 3, arbitrary: fc.constant(0) },
      { weight: 3, arbitrary: fc.integer({ min: 1, max: 20 }) },
      { weight: 2, arbitrary: fc.integer({ min: 1, max: 6000 }) },
      { weight: 1, arbitrary: fc.integer({ min: 6000, max: 10_000_000 }) },
      { weight: 1, arbitrary: fc.integer({ min: -3000, max: -1 }) },
    ),
    key: fc.constantFrom('a', 'b', 'c'),
    cost: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 0, max: cap + 1 }) }),
    policy: fc.constantFrom('one' as const, 'two' as const),
  });
}

const runArb = fc.tuple(logArb, bucketArb).chain(([log, tb]) => fc.tuple(
  fc.constant(log), fc.constant(tb), fc.integer({ min: 0, max: 2 ** 40 }), fc.array(callArb(Math.min(log.limit, 70)), { minLength: 1, maxLength: 150 }),
));

function policiesOf(log: ModelLimit, tb: ModelLimit, extra: Record<string, unknown> = {}): Policies {
  return {
    one: { algorithm: 'sliding_log', limit: log.limit, period: log.period, ...extra },
    two: { limits: [{ algorithm: 'sliding_log', limit: log.limit, period: log.period }, { algorithm: 'token_bucket', limit: tb.limit, period: tb.period }], ...extra },
  } as unknown as Policies;
}

async function compare(shards: number, log: ModelLimit, tb: ModelLimit, start: number, calls: Call[]): Promise<void> {
  const model = new ReferenceModel({ one: log, two: { limits: [log, tb] } });
  const policies = policiesOf(log, tb);
  const clock = new Clock();
  const limiter = await createLimiter({ policies, shards, clock: clock.read, maxKeys: MAX_KEYS });
  try {
    let t = start;
    for (const [i, c] of calls.entries()) {
      t = Math.max(0, t + c.dt);
      clock.now = t;
      const d = await limiter.check({ policy: c.policy, key: c.key, cost: c.cost });
      // check*: expect() only on a difference (test/helpers/assert.ts): this runs for every check of every run
      const where = (): string => `call #${i} t=${t} ${c.policy} ${c.key} cost ${c.cost}`;
      expectWellFormed(d, c.cost, where);
      checkStrictEqual(pick(d), model.check(c.policy, c.key, c.cost, t), where);
    }
  } finally {
    await limiter.close();
  }
}

describe.each([0, 2])('sliding_log: engine = reference model, shards: %i', (shards) => {
  it('single and paired with a token bucket', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ([log, tb, start, calls]) => {
      await compare(shards, log, tb, start, calls);
    }), { numRuns: shards === 0 ? 200 : 20, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});

describe('sliding_log: strict (lua/sliding_log.lua, limiter clock) = local kernel', () => {
  let redis: FrozenRedis;
  let prefixes = 0;
  beforeAll(async () => { redis = await startFrozenRedis(); });
  afterAll(async () => { await redis?.stop(); });


  it('decision for decision; several checks of one turn in one script call', async () => {
    await fc.assert(fc.asyncProperty(runArb, fc.array(fc.boolean(), { minLength: 150, maxLength: 150 }), async ([log, tb, start, calls], together) => {
      const clock = new Clock();
      const local = await createLimiter({ policies: policiesOf(log, tb), shards: 0, clock: clock.read, maxKeys: MAX_KEYS });
      const strict = await createLimiter({
        policies: policiesOf(log, tb, { consistency: 'strict', onStoreError: 'closed' }), shards: 0, clock: clock.read, maxKeys: MAX_KEYS,
        redis: { url: redis.url, prefix: `slog${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 },
      });
      try {
        await connected(strict);
        let t = start;
        let i = 0;
        while (i < calls.length) {
          t = Math.max(0, t + calls[i].dt);
          clock.now = t;
          // calls after the first with dt 0 and `together` go out in the same turn
          let j = i + 1;
          while (j < calls.length && calls[j].dt === 0 && together[j]) j++;
          const batch = calls.slice(i, j);
          const fire = (l: Limiter) => Promise.all(batch.map((c) => l.check({ policy: c.policy, key: c.key, cost: c.cost })));
          const [x, y] = [await fire(local), await fire(strict)];
          batch.forEach((c, k) => checkStrictEqual({ ...y[k] }, { ...x[k] }, () => `call #${i + k} t=${t} ${c.policy} ${c.key} cost ${c.cost}`));
          i = j;
        }
      } finally {
        await strict.close();
        await local.close();
      }
    }), { numRuns: 80, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});
