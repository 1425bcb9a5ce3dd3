/**
 * The Redis scripts (lua/) against the WASM kernel, call for call: the differential property of strict mode.
 *
 * fast-check draws policies (every algorithm; single limits, `limits: [a, b]`, and guarded policies; the
 * property support's limits, kept to the ones Redis can hold exactly: B·P, or L·P for windows, ≤ 2^51) and
 * sequences of calls (time steps of 0, a few ms, about a period, huge, NEGATIVE, and jumps around window
 * edges; costs 0 (a peek), 1, each capacity and above it). Each sequence runs through two limiters on one
 * controlled clock:
 * - strict: every policy `consistency: 'strict'`, Redis with `clock: 'limiter'` (the script is handed the
 *   limiter's time), `onStoreError: 'closed'` so a store failure shows up as a `degraded` answer;
 * - local: the same policies without `consistency` (the in-thread kernel).
 * The two decisions must be identical field by field (allowed, limit, remaining, resetAfterMs, retryAfterMs,
 * policy, reason; no `degraded`). Consecutive calls at one t are sometimes sent in one event-loop turn, so the
 * batch driver (lua/check.lua) decides several checks, of one key or several, in one script call.
 *
 * Then every engine case of ../shared/cases/cases.json runs through strict mode with the limiter clock and
 * must give the expected values; a case whose policy exceeds the 2^51 Redis bound must instead be refused by
 * createLimiter with a CONFIG error naming the policy and the field.
 *
 * Redis time is FROZEN for these tests. With `clock: 'limiter'` the script computes in the limiter's
 * (logical) ms but Redis expires keys after `PX` REAL ms: a controlled clock that stands still while real
 * time passes would see a key vanish (e.g. `PX 1` set at t = 999 of a 1 s fixed window) that the kernel
 * still holds, and the two would differ for reasons that have nothing to do with the arithmetic. So this
 * file runs its own redis-server with gettimeofday() pinned by a tiny LD_PRELOAD library (built here with
 * cc): no key ever expires, and Redis state lives exactly as long as the kernel's. Expiry itself is tested
 * against real time in test/integration/redis-strict.test.ts (case 03 and 05).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkStrictEqual } from '../helpers/assert.js';
import { createLimiter, type Decision } from '../../src/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';
import { checkInput, loadCases, missingMentions, pickExpected, type Case } from '../helpers/cases.js';
import type { ModelLimit } from '../helpers/model.js';
import {
  Clock,
  MAX_KEYS,
  engineSpecs,
  isBucket,
  limitArb,
  runArb,
  timeline,
  type Call,
  type Limiter,
  type PolicyDef,
  type Shape,
  type TimedCall,
} from './support.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

/** Lua numbers are doubles: the loader admits a Redis-backed limit only up to this B·P (L·P for windows). */
const LUA_BOUND = 2n ** 51n;

let redis: FrozenRedis;
let prefixes = 0;

beforeAll(async () => {
  redis = await startFrozenRedis();
  // the premise of the whole file: a key set with PX 1 is still there later
  await redis.client.set('frozen-probe', '1', 'PX', 1);
  await new Promise((r) => setTimeout(r, 20));
  expect(await redis.client.get('frozen-probe'), 'Redis time must stand still (LD_PRELOAD shim)').toBe('1');
});

afterAll(async () => {
  await redis?.stop();
});

// ---------------------------------------------------------------------------------------------------------
// Limiters
// ---------------------------------------------------------------------------------------------------------

/** The same policies, every one `consistency: 'strict'` and failing closed (a store failure is visible). */
function strictSpecs(specs: Record<string, unknown>): Policies {
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(specs)) {
    out[name] = { ...(spec as Record<string, unknown>), consistency: 'strict', onStoreError: 'closed' };
  }
  return out as Policies;
}

/** Waits until the limiter's Redis connection is up: before that a check would take its failure rule. */
async function connected(limiter: Limiter): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await limiter.stats()).store?.connected) {
    if (Date.now() > deadline) throw new Error('strict limiter did not connect to Redis within 5 s');
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function strictLimiter(policies: Policies, clock: () => number): Promise<Limiter> {
  const limiter = await createLimiter({
    policies,
    shards: 0,
    clock,
    maxKeys: MAX_KEYS,
    // a generous timeout: a slow turn on a busy machine must not turn into a degraded answer
    redis: { url: redis.url, prefix: `p${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 },
  });
  try {
    await connected(limiter);
  } catch (e) {
    await limiter.close();
    throw e;
  }
  return limiter;
}

// ---------------------------------------------------------------------------------------------------------
// The property
// ---------------------------------------------------------------------------------------------------------

/** The support's limits (every algorithm, limit 0, large limits, short and long periods) that Redis holds exactly. */
function withinLuaBound(l: ModelLimit): boolean {
  const n = BigInt(isBucket(l.algorithm) ? (l.burst ?? l.limit) : l.limit) * BigInt(l.period);
  return n <= LUA_BOUND;
}
const luaLimitArb = limitArb().filter(withinLuaBound);

/** Consecutive calls at one t that go out in one turn: `together[i]` joins call i to the batch before it. */
function batches(calls: TimedCall[], together: boolean[]): TimedCall[][] {
  const out: TimedCall[][] = [];
  calls.forEach((c, i) => {
    const last = out[out.length - 1];
    if (last !== undefined && together[i] === true && last[last.length - 1].t === c.t) last.push(c);
    else out.push([c]);
  });
  return out;
}

/** Everything a caller sees of a decision (and an error as its code and message). */
function view(r: PromiseSettledResult<Decision>): unknown {
  if (r.status === 'rejected') {
    const e = r.reason as { code?: string; message?: string };
    return { error: e.code ?? 'Error', message: e.message };
  }
  return { ...r.value };
}

async function compare(defs: Record<string, PolicyDef>, start: number, calls: Call[], together: boolean[]): Promise<void> {
  const specs = engineSpecs(defs) as Record<string, unknown>;
  const clock = new Clock();
  const local = await createLimiter({ policies: specs as Policies, shards: 0, clock: clock.read, maxKeys: MAX_KEYS });
  let strict: Limiter | undefined;
  try {
    strict = await strictLimiter(strictSpecs(specs), clock.read);
    let i = 0;
    for (const batch of batches(timeline(start, calls), together)) {
      clock.now = batch[0].t;
      // each limiter gets the whole batch in one turn
      const fire = (l: Limiter) => Promise.allSettled(batch.map((c) => l.check({ policy: c.policy, key: c.key, cost: c.cost })));
      const [a, b] = [await fire(local), await fire(strict)];
      for (let j = 0; j < batch.length; j++, i++) {
        const c = batch[j];
        // expect() only on a difference (test/helpers/assert.ts): this runs for every check of every run
        checkStrictEqual(view(b[j]), view(a[j]), () => `call #${i} (t=${c.t} policy=${c.policy} key=${c.key} cost=${c.cost}; batch of ${batch.length})`);
      }
    }
  } finally {
    await strict?.close();
    await local.close();
  }
}

const SHAPES: Array<[Shape, string]> = [
  ['single', 'one limit, every algorithm'],
  ['two-limits', 'limits: [a, b] on one key: all admit or none changes'],
  ['guarded', 'a guarded policy (its limits on the key plus the guard\'s on "*"), and direct checks on the guard'],
];

const PARAMS = { numRuns: 120, interruptAfterTimeLimit: 35_000, markInterruptAsFailure: false };

describe('strict (Lua in Redis, limiter clock) = local (WASM kernel), decision for decision', () => {
  it.each(SHAPES)(
    '%s: %s',
    async (shape) => {
      await fc.assert(
        fc.asyncProperty(
          runArb(shape, luaLimitArb, { maxLength: 120 }),
          fc.array(fc.boolean(), { minLength: 120, maxLength: 120 }),
          async ([setup, start, calls], together) => {
            await compare(setup.defs, start, calls, together);
          },
        ),
        PARAMS,
      );
    },
    90_000,
  );

  // Fixed sequences worth keeping whatever the generator draws: a batch mixing keys and policies in one
  // script call, time stepping backwards, cost 0 and costs above the capacity, at window edges.
  it('a hand-written sequence: edges, backwards time, peeks, oversize costs, batches', async () => {
    const defs: Record<string, PolicyDef> = {
      tb: { policy: { algorithm: 'token_bucket', limit: 3, period: 1000, burst: 5 } },
      gc: { policy: { algorithm: 'gcra', limit: 3, period: 1000, burst: 5 } },
      fw: { policy: { algorithm: 'fixed_window', limit: 3, period: 1000 } },
      sw: { policy: { algorithm: 'sliding_window', limit: 3, period: 1000 } },
      two: {
        policy: {
          limits: [
            { algorithm: 'sliding_window', limit: 4, period: 700 },
            { algorithm: 'token_bucket', limit: 2, period: 300, burst: 3 },
          ],
        },
        guard: 'g',
      },
      g: { policy: { algorithm: 'fixed_window', limit: 6, period: 2000 } },
    };
    const names = Object.keys(defs);
    const calls: Call[] = [];
    const moves = [0, 0, 998, 1, 1, -5, 0, 2000, -3000, 1, 0, 699, 1, 0, 0, 300, -1, 5000, 0];
    const costs = [1, 1, 0, 1, 5, 6, 3, 1, 0, 2, 1, 1, 1, 4, 0, 1, 1, 3, 1];
    for (let m = 0; m < moves.length; m++) {
      for (const [n, name] of names.entries()) {
        for (const key of ['a', 'b']) {
          calls.push({ move: { dt: n === 0 && key === 'a' ? moves[m] : 0 }, policy: name, key, cost: costs[(m + n) % costs.length] });
        }
      }
    }
    const together = calls.map((_, i) => i % 5 !== 0);
    await compare(defs, 1_700_000_039_000, calls, together);
  });
});

// ---------------------------------------------------------------------------------------------------------
// The shared cases, in strict mode
// ---------------------------------------------------------------------------------------------------------

const cases = loadCases();

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The field a Redis-backed policy of this case is refused for (B·P or L·P over 2^51), or null if none. */
function luaRefusal(c: Case): { policy: string; field: string } | null {
  let compiled;
  try {
    compiled = compilePolicies(c.policies);
  } catch {
    return null; // invalid anyway: the case's own config error applies
  }
  for (const p of compiled.values()) {
    for (const l of p.limits) {
      const bucket = l.algorithm === 'token_bucket' || l.algorithm === 'gcra';
      if (BigInt(bucket ? l.burst : l.limit) * BigInt(l.periodMs) > LUA_BOUND) {
        return { policy: p.name, field: bucket ? 'burst' : 'limit' };
      }
    }
  }
  return null;
}

async function runCaseStrict(c: Case): Promise<void> {
  let t = 0;
  const refusal = luaRefusal(c);
  let limiter: Limiter;
  try {
    limiter = await strictLimiter(strictSpecs(c.policies), () => t);
  } catch (err) {
    const code = (err as { code?: string }).code;
    expect(code, `${c.id}: createLimiter failed with ${messageOf(err)}`).toBe('CONFIG');
    let words: string[];
    if (c.expectConfigError) words = c.configErrorMentions;
    else if (refusal !== null) words = [refusal.policy, refusal.field, '2^51'];
    else if (c.orConfigError !== undefined) words = c.orConfigError.errorMentions;
    else throw err;
    expect(missingMentions(messageOf(err), words), `${c.id}: "${messageOf(err)}" must name ${words.join(', ')}`).toStrictEqual([]);
    return;
  }
  try {
    expect(c.expectConfigError, `${c.id}: createLimiter should have refused the policies`).toBe(false);
    expect(refusal, `${c.id}: a policy over the 2^51 Redis bound must be refused at load`).toBeNull();
    for (const call of c.calls) {
      t = call.t;
      const where = `${c.id} call #${call.index + 1} at t=${call.t}`;
      const input = checkInput(call) as unknown as Parameters<Limiter['check']>[0];
      const outcome = await (async () => limiter.check(input))().then(
        (decision) => ({ ok: true as const, decision }),
        (error: unknown) => ({ ok: false as const, error }),
      );
      if (call.expectError) {
        expect(outcome.ok, `${where}: expected an error naming ${call.errorMentions.join(', ')}`).toBe(false);
        if (!outcome.ok) {
          expect(missingMentions(messageOf(outcome.error), call.errorMentions), `${where}: ${messageOf(outcome.error)}`).toStrictEqual([]);
        }
        continue;
      }
      if (!outcome.ok) throw outcome.error;
      expect(outcome.decision.degraded, `${where}: decided by Redis, not by the failure rule`).toBeUndefined();
      if (call.expect !== undefined) {
        expect(pickExpected(outcome.decision as unknown as Record<string, unknown>, call.expect), where).toStrictEqual(call.expect);
      }
    }
  } finally {
    await limiter.close();
  }
}

describe('shared cases (cases.json) in strict mode, limiter clock', () => {
  it('some case policies exceed the Redis bound (so the refusal path is exercised)', () => {
    expect(cases.filter((c) => luaRefusal(c) !== null).length).toBeGreaterThan(0);
  });

  it.each(cases.map((c) => [c.id, c] as [string, Case]))('%s', async (_id, c) => {
    await runCaseStrict(c);
  });
});
