/**
 * Strict mode on a Redis Cluster against the in-thread kernel (an exact single-instance limiter), decision for
 * decision, on one controlled clock: the Cluster's split of a call by slot (src/store/slots.ts), a guarded
 * policy's keys placed in its guard's slot, several limits per key and per guard, direct checks on the guard's
 * key `*`, and checks of one event-loop turn sent together. Both with the over-limit cache (one instance: every
 * spend of a guard goes through it, so the cache must give Redis's answer field for field, whatever the costs)
 * and without.
 *
 * The script runs on the limiter's clock (`clock: 'limiter'`), while Redis expires keys on its own (real)
 * clock, relative to when it wrote them: so the controlled clock never runs slower than real time here (each
 * step is at least what real time moved, plus a margin), and a key never expires before the kernel's state
 * would have carried no information any more. (A Cluster cannot run on a frozen clock as the single-server
 * differential tests do: its nodes' gossip stops.)
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type PolicySpec } from '../../src/index.js';
import { checkStrictEqual } from '../helpers/assert.js';
import { connected } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';

const SPECS: Record<string, PolicySpec> = {
  tb: { algorithm: 'token_bucket', limit: 5, period: 1000, burst: 5 },
  two: { limits: [{ algorithm: 'token_bucket', limit: 3, period: 500 }, { algorithm: 'gcra', limit: 8, period: 2000, burst: 4 }] },
  g: { limits: [{ algorithm: 'token_bucket', limit: 6, period: 1000 }, { algorithm: 'sliding_window', limit: 9, period: 3000 }] },
  guarded: { limits: [{ algorithm: 'fixed_window', limit: 4, period: 1000 }, { algorithm: 'token_bucket', limit: 2, period: 700 }], guard: 'g' },
  guarded2: { algorithm: 'gcra', limit: 3, period: 1000, guard: 'g' },
};
const NAMES = Object.keys(SPECS);
const STRICT = Object.fromEntries(Object.entries(SPECS).map(([k, v]) => [k, { ...v, consistency: 'strict', onStoreError: 'closed' } as PolicySpec]));

/** How far ahead of real time the controlled clock stays at each step (ms): a step's checks take less. */
const AHEAD_MS = 100;

let c: TestCluster;
beforeAll(async () => {
  c = await startCluster();
}, 60_000);
afterAll(async () => {
  await c?.stop();
});

const rowArb = fc.record({
  policy: fc.integer({ min: 0, max: NAMES.length - 1 }),
  key: fc.integer({ min: 0, max: 3 }),
  dt: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 1, max: 60 }), fc.integer({ min: 100, max: 1500 })),
  cost: fc.integer({ min: 0, max: 5 }),
  together: fc.boolean(),
});

let run = 0;
describe('strict on a Redis Cluster = the local kernel, decision for decision (controlled clock)', () => {
  for (const overLimitCache of [true, false]) {
    it(`over-limit cache ${overLimitCache ? 'on' : 'off'}: every field equal, row for row`, async () => {
      let answers = 0;
      await fc.assert(fc.asyncProperty(fc.array(rowArb, { minLength: 5, maxLength: 60 }), async (rows) => {
        run++;
        let now = Date.now() + AHEAD_MS;
        const clock = (): number => now;
        const strict = await createLimiter({ policies: STRICT, clock, maxKeys: 4096, shards: 0, redis: { cluster: c.nodes, prefix: `cd${run}:`, clock: 'limiter', timeoutMs: 2000, overLimitCache } });
        const local = await createLimiter({ policies: SPECS, clock, maxKeys: 4096, shards: 0 });
        try {
          await connected(strict);
          for (let i = 0; i < rows.length;) {
            const batch = [rows[i++]];
            while (i < rows.length && rows[i].together) batch.push(rows[i++]);
            now = Math.max(now + batch[0].dt, Date.now() + AHEAD_MS);
            // the guarded policies' key "*" too (a tenant named like the guard's key)
            const reqs = batch.map((r) => ({ policy: NAMES[r.policy], key: r.key === 3 && NAMES[r.policy] !== 'tb' ? '*' : `k${r.key}`, cost: r.cost }));
            // each limiter gets the batch in one turn
            const want = await Promise.all(reqs.map((q) => local.check(q)));
            const got = await Promise.all(reqs.map((q) => strict.check(q)));
            reqs.forEach((q, j) => checkStrictEqual({ ...got[j] }, { ...want[j] }, () => `row ${i - batch.length + j} ${JSON.stringify(q)} (batch of ${batch.length})`));
          }
          answers += (await strict.stats()).store!.overLimitAnswers;
        } finally {
          await strict.close();
          await local.close();
        }
      }), { numRuns: 80 });
      if (overLimitCache) expect(answers).toBeGreaterThan(0);
    }, 120_000);
  }
});
