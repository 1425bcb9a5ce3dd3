/** ADVERSARIAL (holds on 3b83af1). */
/**
 * checkMany with thousands of items whose legs exceed one kernel batch (4,096 legs): groups of 1 to 16 legs
 * must never be split across batches, and every decision must match the reference model (all-or-nothing).
 */
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { GuardedModel, pick, type PolicyDef } from '../../property/support.js';
import type { ModelLimit } from '../../helpers/model.js';

const T = 1_700_000_000_000;
const tb = (limit: number, period: number, burst?: number): ModelLimit => ({ algorithm: 'token_bucket', limit, period, ...(burst === undefined ? {} : { burst }) });

function defs(): Record<string, PolicyDef> {
  const eight = (base: number): ModelLimit[] => Array.from({ length: 8 }, (_, i) => tb(base + i, 60_000));
  return {
    g: { policy: { limits: eight(2000) } },            // guard: 8 limits, ~2000 shared tokens
    big: { policy: { limits: eight(3) }, guard: 'g' },  // 16 legs
    mid: { policy: tb(2, 60_000), guard: 'g' },         // 9 legs
    two: { policy: { limits: [tb(1, 60_000), tb(5, 1000)] } }, // 2 legs
    one: { policy: tb(1, 60_000) },                     // 1 leg
  };
}

describe.each([0, 2])('checkMany past one kernel batch, shards %i', (shards) => {
  it('every item equals the model, guard all-or-nothing', async () => {
    const d = defs();
    const spec: Record<string, unknown> = {};
    for (const [n, p] of Object.entries(d)) spec[n] = { ...('limits' in p.policy ? { limits: p.policy.limits } : p.policy), ...(p.guard ? { guard: p.guard } : {}) };
    const limiter = await createLimiter({ policies: spec as never, shards, clock: () => T, maxKeys: 100_000 });
    try {
      const model = new GuardedModel(d);
      const names = ['big', 'mid', 'two', 'one', 'big', 'big', 'mid'];
      const reqs = Array.from({ length: 3000 }, (_, i) => ({ policy: names[i % names.length], key: `k${i % 400}`, cost: 1 + (i % 3) }));
      const out = await limiter.checkMany(reqs);
      let admitted = 0;
      for (const [i, r] of out.entries()) {
        expect(r instanceof Error, `item ${i}: ${String(r)}`).toBe(false);
        const dec = r as Exclude<typeof r, Error>;
        expect(pick(dec), `item ${i} ${JSON.stringify(reqs[i])}`).toStrictEqual(model.check(reqs[i].policy, reqs[i].key, reqs[i].cost, T));
        if (dec.allowed) admitted++;
      }
      expect(admitted).toBeGreaterThan(100);
      expect((await limiter.stats()).pending).toBe(0);
    } finally {
      await limiter.close();
    }
  }, 60_000);
});
