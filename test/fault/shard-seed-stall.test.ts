/**
 * `onStoreError: local` with shards, the key's shard stalled in a batch when the store fails: the seed (the
 * key's state learned from the store, LocalDecider.seed) does not wait for that shard. It rides in the batch that
 * decides the check, on the shard worker's queue, and is set by the worker just before it decides that batch:
 * the front thread goes on answering other checks meanwhile, and once the shard is back the key's local
 * decisions start from the learned state, in order.
 *
 * Before, the seed went through the front thread's synchronous channel to the shard, which the worker serves
 * only between its tasks: the front thread slept up to 1 s on the stalled shard, then gave the seed up, and the
 * key was decided from a full bucket (remaining 9 where the store had left 6).
 *
 * The stall is the faulty worker's (test/fault/fixtures/faulty-worker.mjs: a batch with a leg of cost 77 waits
 * for a file); the store is a MemoryStore that fails on demand (test/helpers/flaky-store.ts); the clock stands
 * still.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { stallingRoot, keysByShard, poolOf, until } from './support.js';

const fake = vi.hoisted(() => ({ root: '' }));
vi.mock('../../src/util/paths.js', () => ({ packageRoot: () => fake.root }));

import { createLimiter, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { flakyStore } from '../helpers/flaky-store.js';

const T = 1_800_000_000_000;
const STALL_COST = 77;

const roots: string[] = [];
const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close().catch(() => undefined)));
});
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

const policies: Record<string, PolicySpec> = {
  // strict, 10 a day: nothing refills during the test
  p: { algorithm: 'token_bucket', limit: 10, period: '1d', consistency: 'strict', onStoreError: 'local' },
  // decided on the shards; a check of cost 77 stalls its shard
  q: { algorithm: 'token_bucket', limit: 1000, period: '1d' },
};

const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded === true ? ` ${d.degradedBy}` : ''}`;

describe('shards: a seed does not wait for a stalled shard', () => {
  it('the front answers other checks while the key\'s shard is stalled; the key\'s local decisions start from the learned state', async () => {
    const { root, stalled, release } = stallingRoot(STALL_COST);
    roots.push(root);
    fake.root = root;
    const { store, fail } = flakyStore(new MemoryStore({ clock: () => T, overLimitCache: false }));
    const l = await createLimiter({ policies, store, shards: 2, clock: () => T });
    open.push(l);
    const [[k]] = keysByShard(policies, 'p', 2, 1);
    const [[q0], [q1]] = keysByShard(policies, 'q', 2, 1);
    const strict = (): Promise<Decision> => l.check({ policy: 'p', key: k, cost: 1 });

    for (let i = 0; i < 3; i++) await strict();
    expect(brief(await strict())).toBe('allow r=6');

    // shard 0 (k's and q0's) stalls in a batch; then the store fails
    const stalling = l.check({ policy: 'q', key: q0, cost: STALL_COST });
    await until(() => existsSync(stalled), 10_000, 'shard 0 to stall');
    fail(true);
    let settled = false;
    const local = strict().finally(() => (settled = true));
    // the store's failure is handled (the key seeded, its check sent to shard 0) in the turns after the check's
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    // the front goes on: a check on shard 1 is answered while shard 0 is stalled, k's check waits for shard 0
    expect(brief(await l.check({ policy: 'q', key: q1, cost: 1 }))).toBe('allow r=999');
    expect(settled).toBe(false);
    expect(existsSync(release)).toBe(false);

    writeFileSync(release, '');
    expect(brief(await stalling)).toBe('allow r=923');
    // seeded with the 6 the store had left, before its first local decision, and not again in the stall
    expect(brief(await local)).toBe('allow r=5 local');
    const after: string[] = [];
    for (let i = 0; i < 6; i++) after.push(brief(await strict()));
    expect(after).toStrictEqual(['allow r=4 local', 'allow r=3 local', 'allow r=2 local', 'allow r=1 local', 'allow r=0 local', 'deny r=0 local']);
    // the seed was not given up: shard 0's kernel is the one it was set on
    expect(poolOf(l).kernelGeneration(0)).toBe(0);
  });
});
