/**
 * `sluice_degraded_decisions_total{rule="local"}` counts decisions the instance's kernel made because the store
 * failed (src/engine/deciders/local.ts), once made: a fallback check the kernel then fails (its shard down) is
 * an error to its caller, not a degraded decision. (It was counted when the store failed, before the kernel
 * was asked.) `open` and `closed` are counted by the failure rule itself (src/engine/failure.ts).
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { buildRuntimes } from '../../../src/engine/runtime.js';
import { LimitTable } from '../../../src/engine/limits.js';
import { Hasher } from '../../../src/keys/hasher.js';
import { Kernel, kernelModule } from '../../../src/shard/kernel.js';
import { LocalDecider } from '../../../src/engine/deciders/local.js';
import { Flight } from '../../../src/engine/decider.js';
import { DegradedCounts } from '../../../src/engine/degraded.js';
import { storeFailure } from '../../../src/engine/failure.js';
import { emptyBatch, type Batch } from '../../../src/engine/queue.js';
import type { PolicyCounters } from '../../../src/engine/shadow.js';
import type { ShardPool } from '../../../src/shard/pool.js';
import type { ShardTask } from '../../../src/shard/protocol.js';
import type { Decision } from '../../../src/types/decision.js';
import { shardOf } from '../../../src/shard/router.js';

function setup() {
  const compiled = compilePolicies({
    p: { algorithm: 'token_bucket', limit: 10, period: '1m', consistency: 'strict', onStoreError: 'local' },
    c: { algorithm: 'token_bucket', limit: 10, period: '1m', consistency: 'strict', onStoreError: 'closed' },
  });
  const table = new LimitTable(64);
  const plan = table.plan(compiled);
  table.commit(plan);
  const kernel = new Kernel(kernelModule(), { maxKeys: 64, maxBatch: 16, limits: table.limits });
  const hasher = new Hasher(kernel, 16);
  return { kernel, hasher, rts: buildRuntimes(compiled, plan.ids, hasher, 'p:') };
}

/** One fallback check of `policy` on `key`, and what it settled to. */
function fallback(s: ReturnType<typeof setup>, policy: string, key: string): { b: Batch; got: Array<Decision | Error> } {
  const rt = s.rts.get(policy)!;
  const [lo, hi] = s.hasher.hashOne(key, rt.seedLo, rt.seedHi);
  const got: Array<Decision | Error> = [];
  const b = emptyBatch(true);
  b.rts.push(rt);
  b.costs.push(1);
  b.keys.push(key);
  (b.hashes as number[]).push(lo, hi);
  b.resolves.push((d) => got.push(d));
  b.rejects.push((e) => got.push(e));
  b.n = 1;
  return { b, got };
}

describe('degraded decisions counted under local', () => {
  it('a fallback check the kernel decides: marked local and counted once', () => {
    const s = setup();
    const degraded = new DegradedCounts();
    const local = new LocalDecider({ kernel: s.kernel, pool: null, counters: {} as PolicyCounters, flight: new Flight(), degraded });
    // the failure rule hands a `local` check over without counting it
    expect(storeFailure(s.rts.get('p')!, degraded, 1)).toBeNull();
    expect(degraded.snapshot()).toEqual({});
    const { b, got } = fallback(s, 'p', 'k');
    local.decide(b, 1_700_000_000_000);
    expect(got).toEqual([expect.objectContaining({ allowed: true, remaining: 9, degraded: true, degradedBy: 'local' })]);
    expect(degraded.snapshot()).toEqual({ p: { open: 0, closed: 0, local: 1 } });
    // `closed` is counted by the rule, with its decision
    expect(storeFailure(s.rts.get('c')!, degraded, 1)).toMatchObject({ allowed: false, degradedBy: 'closed' });
    expect(degraded.snapshot()).toEqual({ p: { open: 0, closed: 0, local: 1 }, c: { open: 0, closed: 1, local: 0 } });
  });

  it('a fallback check its shard fails: the caller gets the error, and nothing is counted', async () => {
    const s = setup();
    const degraded = new DegradedCounts();
    const down = Object.assign(new Error('shard 0 is down'), { code: 'SHARD_FAILED', status: 503 });
    const pool = { size: 1, run: () => Promise.reject(down) } as unknown as ShardPool;
    const local = new LocalDecider({ kernel: s.kernel, pool, counters: {} as PolicyCounters, flight: new Flight(), degraded });
    // (a fallback batch goes on its shard's queue even while checkNow flushes)
    local.now = true;
    expect(storeFailure(s.rts.get('p')!, degraded, 1)).toBeNull();
    const { b, got } = fallback(s, 'p', 'k');
    local.decide(b, 1_700_000_000_000);
    await new Promise((r) => setImmediate(r));
    expect(got).toEqual([down]);
    expect(degraded.snapshot()).toEqual({});
  });

  it('a batch over two shards, one of which fails: each check its kernel decided counted once, the failed ones not', async () => {
    const s = setup();
    const degraded = new DegradedCounts();
    const down = Object.assign(new Error('shard 1 is down'), { code: 'SHARD_FAILED', status: 503 });
    const pool = {
      size: 2,
      run: (shard: number, task: ShardTask) => {
        if (shard === 1) return Promise.reject(down);
        s.kernel.legIn.set(task.legs);
        s.kernel.decide(task.n, task.now);
        return Promise.resolve(s.kernel.legOut.slice(0, task.n * 4));
      },
    } as unknown as ShardPool;
    const local = new LocalDecider({ kernel: s.kernel, pool, counters: {} as PolicyCounters, flight: new Flight(), degraded });
    local.now = true;
    const rt = s.rts.get('p')!;
    const b = emptyBatch(true);
    const got: Array<Decision | Error> = [];
    const on = [0, 0];
    for (let i = 0; on[0] < 3 || on[1] < 2; i++) {
      const [lo, hi] = s.hasher.hashOne(`k${i}`, rt.seedLo, rt.seedHi);
      const shard = shardOf(hi, 2);
      if (on[shard] >= (shard === 0 ? 3 : 2)) continue;
      on[shard]++;
      b.rts.push(rt);
      b.costs.push(1);
      b.keys.push(`k${i}`);
      (b.hashes as number[]).push(lo, hi);
      b.resolves.push((d) => got.push(d));
      b.rejects.push((e) => got.push(e));
      b.n++;
    }
    local.decide(b, 1_700_000_000_000);
    await new Promise((r) => setImmediate(r));
    expect(got.filter((d) => d === down)).toHaveLength(2);
    expect(got.filter((d) => !(d instanceof Error) && d.degradedBy === 'local')).toHaveLength(3);
    expect(degraded.snapshot()).toEqual({ p: { open: 0, closed: 0, local: 3 } });
  });
});
