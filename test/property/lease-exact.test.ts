/**
 * Lease mode's guarantee, zero overshoot in the strong sense: over any interval, the checks several instances
 * admit from leased tokens are checks ONE exact limiter would admit. Several lease deciders (simulated
 * instances: src/engine/lease/decider.ts on one real Redis, lua/lease.lua) take random steps on one controlled
 * clock: bursts of checks spread over the instances and issued together (their lease calls interleave in
 * Redis as they come), clock moves (small, about a lease's life, about a period), idle sweeps (returns),
 * close() (everything returned), and deaths (an instance stops: its leases expire in Redis). Every admitted
 * check is then replayed, in the order and at the time it was admitted, into one exact limiter (a local
 * limiter, the kernel, on the same clock): it must admit every one of them. A sequence one exact limiter
 * admits whole never passes its limit over any interval: that is the claim, for token buckets, GCRA, fixed and
 * sliding windows, a policy of two limits, and a guarded policy.
 *
 * Redis's wall clock is frozen (startFrozenRedis) and the scripts run on the limiter's clock, so keys live
 * exactly as long as the controlled clock says.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type PolicySpec } from '../../src/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { buildRuntimes, type PolicyRuntime } from '../../src/engine/runtime.js';
import { LimitTable } from '../../src/engine/limits.js';
import { Hasher } from '../../src/keys/hasher.js';
import { Kernel, kernelModule } from '../../src/shard/kernel.js';
import { RedisStore } from '../../src/store/redis.js';
import { LeaseStore } from '../../src/store/lease.js';
import { LeaseDecider } from '../../src/engine/lease/decider.js';
import { DegradedCounts } from '../../src/engine/degraded.js';
import { PolicyCounters } from '../../src/engine/shadow.js';
import { startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';

const LEASE = { ttlMs: 300, idleMs: 100, maxShare: 0.5 };
const POLICIES: Record<string, PolicySpec> = {
  tb: { algorithm: 'token_bucket', limit: 20, period: 1000, burst: 12 },
  gcra: { algorithm: 'gcra', limit: 10, period: 500, burst: 6 },
  fw: { algorithm: 'fixed_window', limit: 15, period: 700 },
  sw: { algorithm: 'sliding_window', limit: 15, period: 600 },
  two: { limits: [{ algorithm: 'token_bucket', limit: 8, period: 400 }, { algorithm: 'fixed_window', limit: 20, period: 1500 }] },
  g: { algorithm: 'token_bucket', limit: 10, period: 1000 },
  guarded: { algorithm: 'sliding_window', limit: 8, period: 800, guard: 'g' },
};
const NAMES = ['tb', 'gcra', 'fw', 'sw', 'two', 'guarded'];
const INSTANCES = 3;

const leased = Object.fromEntries(Object.entries(POLICIES).map(([k, v]) => [k, { ...v, consistency: 'lease', lease: LEASE, onStoreError: 'closed' }]));
const local = Object.fromEntries(Object.entries(POLICIES).map(([k, v]) => [k, { ...v }]));

let redis: FrozenRedis;
let store: RedisStore;
let runtimes: Map<string, PolicyRuntime>;
let now = 1_700_000_000_000;
let run = 0;

beforeAll(async () => {
  redis = await startFrozenRedis();
  store = RedisStore.create({ url: redis.url, prefix: 'lx:', clock: 'limiter', timeoutMs: 2000 });
  await store.connected(2000);
  const compiled = compilePolicies(leased);
  const table = new LimitTable(4096);
  const plan = table.plan(compiled);
  table.commit(plan);
  const hasher = new Hasher(new Kernel(kernelModule(), { maxKeys: 1, maxBatch: 16, limits: table.limits }), 16);
  runtimes = buildRuntimes(compiled, plan.ids, hasher, 'lx:');
}, 30_000);

afterAll(async () => {
  await store?.close();
  await redis?.stop();
});

/** The front's parts a decider uses: no shadow policies here, and Redis does not fail (onStoreError closed). */
const engine = {
  counters: new PolicyCounters(null), degraded: new DegradedCounts(),
  localFallback: { decide: () => { throw new Error('no local fallback in this test'); }, seed: () => undefined, kernelOf: () => 0 },
};

function instance(id: number): LeaseDecider {
  return new LeaseDecider({
    store: new LeaseStore(store, 2000), prefix: 'lx:', clock: () => now, maxWaiting: 10_000, engine: () => engine, instanceId: `r${run}i${id}.${Math.random().toString(36).slice(2, 8)}`, sweepTimer: false,
  });
}

type Step =
  | { kind: 'burst'; checks: Array<{ inst: number; key: number; cost: number }> }
  | { kind: 'advance'; ms: number }
  | { kind: 'sweep'; inst: number }
  | { kind: 'close'; inst: number }
  | { kind: 'die'; inst: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('burst' as const), checks: fc.array(fc.record({ inst: fc.integer({ min: 0, max: INSTANCES - 1 }), key: fc.integer({ min: 0, max: 1 }), cost: fc.integer({ min: 0, max: 3 }) }), { minLength: 1, maxLength: 12 }) }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 50, max: 350 }), fc.integer({ min: 400, max: 1600 })) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('sweep' as const), inst: fc.integer({ min: 0, max: INSTANCES - 1 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('close' as const), inst: fc.integer({ min: 0, max: INSTANCES - 1 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('die' as const), inst: fc.integer({ min: 0, max: INSTANCES - 1 }) }) },
);

interface Admitted { at: number; key: string; cost: number }

/** Runs `steps` on the instances for one policy; returns what they admitted, in order. */
async function simulate(policy: string, steps: Step[]): Promise<{ admitted: Admitted[]; denied: number }> {
  run++;
  const rt = runtimes.get(policy)!;
  const insts = Array.from({ length: INSTANCES }, (_, i) => instance(i));
  const admitted: Admitted[] = [];
  let denied = 0;
  for (const s of steps) {
    if (s.kind === 'advance') now += s.ms;
    else if (s.kind === 'sweep') insts[s.inst].sweep(now);
    else if (s.kind === 'close') {
      await insts[s.inst].close();
      insts[s.inst] = instance(s.inst);
    } else if (s.kind === 'die') insts[s.inst] = instance(s.inst); // the old one is never called again
    else {
      const ds = await Promise.all(s.checks.map((c) => new Promise<{ d: Decision; key: string; cost: number }>((resolve, reject) => {
        const key = `r${run}k${c.key}`;
        insts[c.inst].check(rt, key, c.cost, now, (d) => resolve({ d, key, cost: c.cost }), reject);
      })));
      // every check of a burst is decided at `now`: the clock moves only between steps
      for (const { d, key, cost } of ds) {
        if (d.allowed) admitted.push({ at: now, key, cost });
        else denied++;
      }
    }
  }
  for (const i of insts) await i.close();
  return { admitted, denied };
}

/** The admitted checks one exact limiter does not admit (none, if leasing never overshoots). */
async function overshoot(policy: string, admitted: Admitted[]): Promise<Admitted[]> {
  const clock = { t: 0 };
  const exact = await createLimiter({ policies: local, clock: () => clock.t, maxKeys: 1024 });
  try {
    const refused: Admitted[] = [];
    for (const a of admitted) {
      clock.t = a.at;
      if (!(await exact.check({ policy, key: a.key, cost: a.cost })).allowed) refused.push(a);
    }
    return refused;
  } finally {
    await exact.close();
  }
}

describe('lease mode never admits more than one exact limiter would, over any interval (3 instances, one Redis)', () => {
  for (const policy of NAMES) {
    it(`${policy}: every admitted check is one the exact limiter admits`, async () => {
      let admittedTotal = 0;
      await fc.assert(fc.asyncProperty(fc.array(stepArb, { minLength: 10, maxLength: 40 }), async (steps) => {
        const { admitted } = await simulate(policy, steps);
        admittedTotal += admitted.length;
        expect(await overshoot(policy, admitted)).toEqual([]);
      }), { numRuns: 25 });
      // the property is not vacuous: checks were admitted
      expect(admittedTotal).toBeGreaterThan(50);
    }, 120_000);
  }
});
