/**
 * `onStoreError: local` with shards: the key state a strict check's fallback starts from (LocalDecider.seed)
 * reaches the owning shard's kernel before the key's local decisions. It rides in the batch that decides the
 * check (ShardTask.states), set by the worker before that batch's legs, and every local decision of a
 * store-backed key goes on the worker's queue after it, even while checkNow flushes (the synchronous channel,
 * which the worker serves between its queued tasks, used to overtake a seed sent as a task of its own). A
 * stalled shard does not hold the front for it: test/fault/shard-seed-stall.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import type { ShardPool } from '../../src/shard/pool.js';
import { engineOf } from '../../src/engine/handle.js';
import { STATE_ROW, type Kernel } from '../../src/shard/kernel.js';
import { GROUP_SHIFT } from '../../src/shard/protocol.js';
import { LocalDecider } from '../../src/engine/deciders/local.js';
import { Flight } from '../../src/engine/decider.js';
import { DegradedCounts } from '../../src/engine/degraded.js';
import type { PolicyCounters } from '../../src/engine/shadow.js';
import type { Batch } from '../../src/engine/queue.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';
import { keysByShard, poolOf, runtimeOf, until } from './support.js';

const T = 1_800_000_000_000;

const open: Limiter[] = [];
const redises: TestRedis[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
  await Promise.all(redises.splice(0).map((r) => r.stop()));
});

/** Puts piscina's limit of tasks in flight (concurrentTasksPerWorker: 16) on shard 0's worker: the next task waits on this thread. */
function fillQueue(pool: ShardPool): Promise<unknown>[] {
  return Array.from({ length: 16 }, () => pool.keys(0, { kind: 'peek', n: 0, legs: new Float64Array(0) }));
}

describe('shards: a seeded state precedes the decisions sent after it', () => {
  it('a batch carrying states (ShardTask.states): they are set before its legs are decided, in parts the kernel takes', async () => {
    const policies = { p: { algorithm: 'fixed_window' as const, limit: 10, period: 3_600_000 } };
    const l = await createLimiter({ policies, shards: 1, clock: () => T, maxKeys: 8192 });
    open.push(l);
    const pool = poolOf(l);
    const id = engineOf(l)!.frontThreads!.limitIds().get('p')![0];
    const start = Math.floor(T / 3_600_000) * 3_600_000;
    // more rows than the kernel's input holds at once (4096 legs of 4 f64s: 2730 rows)
    const n = 6000;
    const rows: number[] = [];
    for (let k = 0; k < n; k++) rows.push(1000 + k, 7, id, k % 10, start, T);
    // the batch decides the last key set (9 counted: its 10th is admitted) and key 5 (5 counted) twice
    const legs = Float64Array.of(1000 + n - 1, 7, id + GROUP_SHIFT, 1, 1005, 7, id + GROUP_SHIFT, 1, 1005, 7, id + GROUP_SHIFT, 1);
    const out = await pool.run(0, { kind: 'batch', now: T, n: 3, legs, states: Float64Array.from(rows) });
    expect([0, 1, 2].map((j) => [out[4 * j], out[4 * j + 1]])).toStrictEqual([[0, 0], [0, 4], [0, 3]]);
    const counts = Array.from({ length: n }, (_, k) => k % 10 + (k === n - 1 ? 1 : k === 5 ? 2 : 0));
    for (let from = 0; from < n; from += 2000) {
      const legs = new Float64Array(2000 * 4);
      for (let k = 0; k < 2000; k++) legs.set([1000 + from + k, 7, id, 0], 4 * k);
      const peek = (await pool.keys(0, { kind: 'peek', n: 2000, legs })) as Float64Array;
      for (let k = 0; k < 2000; k++) {
        // (a key decided since holds the count the kernel wrote, its other fields in its own terms)
        const decided = from + k === 5 || from + k === n - 1;
        const got = decided ? [...peek.subarray(4 * k, 4 * k + 2)] : [...peek.subarray(4 * k, 4 * k + 4)];
        expect(got).toStrictEqual(decided ? [1, counts[from + k]] : [1, counts[from + k], start, T]);
      }
    }
    expect(pool.kernelGeneration(0)).toBe(0);
    // a shard that is down refuses the batch: to whoever seeds, its kernel is another one now
    await pool.threads(0)[0].terminate();
    let err: unknown;
    for (let i = 0; i < 20 && err === undefined; i++) {
      await new Promise((r) => setTimeout(r, 50));
      await pool.run(0, { kind: 'batch', now: T, n: 0, legs: new Float64Array(0), states: Float64Array.from(rows.slice(0, STATE_ROW)) })
        .catch((e: unknown) => (err = e));
    }
    if (err !== undefined) {
      expect((err as { status?: number }).status).toBe(503);
      expect(pool.kernelGeneration(0)).toBeGreaterThan(0);
    }
  });

  it('LocalDecider.seed, then fallback decisions while checkNow flushes: they go on the queue, after the seed', async () => {
    const policies = { p: { algorithm: 'token_bucket' as const, limit: 10, period: 3_600_000 } };
    const l = await createLimiter({ policies, shards: 1, clock: () => T });
    open.push(l);
    const pool = poolOf(l);
    const { rt, lo, hi } = runtimeOf(policies, 'p', 'k');
    expect([...rt.limitIds]).toStrictEqual([...engineOf(l)!.frontThreads!.limitIds().get('p')!]);
    const id = rt.limitIds[0];
    // the state a key with 7 of 10 tokens left has: made by the kernel, read back, then forgotten
    for (let i = 0; i < 3; i++) await l.check({ policy: 'p', key: 'k', cost: 1 });
    const legs = Float64Array.of(lo, hi, id, 0);
    const st = (await pool.keys(0, { kind: 'peek', n: 1, legs: legs.slice() })) as Float64Array;
    expect(st[0]).toBe(1);
    expect(await pool.keys(0, { kind: 'remove', n: 1, legs: legs.slice() })).toBe(1);

    const local = new LocalDecider({ kernel: null as unknown as Kernel, pool, counters: {} as PolicyCounters, flight: new Flight(), degraded: new DegradedCounts() });
    const got: Array<Decision | Error> = [];
    const batch = (): Batch => ({
      n: 1, rts: [rt], costs: [1], keys: ['k'], hashes: [lo, hi], fallback: true,
      resolves: [(d: Decision) => got.push(d)], rejects: [(e: Error) => got.push(e)],
    });
    const queued = fillQueue(pool);
    local.seed(batch(), 0, [lo, hi, id, st[1], st[2], st[3]], T);
    // (the synchronous channel, served between the worker's tasks, would overtake the batches piscina still
    // holds on this thread behind the 16 peeks)
    local.now = true;
    for (let i = 0; i < 9; i++) local.decide(batch(), T);
    local.now = false;
    await Promise.all(queued);
    await until(() => got.length === 9, 5000, 'the 9 decisions');
    // 7 tokens learned: 7 admitted (6 .. 0 left), then denials; none from a full bucket
    expect(got.map((d) => (d instanceof Error ? d.message : [d.allowed, d.remaining]))).toStrictEqual([
      [true, 6], [true, 5], [true, 4], [true, 3], [true, 2], [true, 1], [true, 0], [false, 0], [false, 0],
    ]);
  });

  it('a strict policy under onStoreError: local, Redis killed: the local decisions start from the learned state', async () => {
    const redis = await startRedis();
    redises.push(redis);
    const l = await createLimiter({
      shards: 1, redis: { url: redis.url },
      policies: { p: { algorithm: 'token_bucket', limit: 10, period: '1h', consistency: 'strict', onStoreError: 'local' } },
    });
    open.push(l);
    const check = (key: string): Promise<Decision> => l.check({ policy: 'p', key, cost: 1 });
    for (const key of ['a', 'b']) {
      for (let i = 0; i < 3; i++) expect(await check(key)).toMatchObject({ allowed: true, remaining: 9 - i });
    }
    expect((await check('a')).degraded).toBeUndefined();
    await redis.kill();
    // one by one: 'a' had 6 left in Redis
    const seq: number[] = [];
    for (let i = 0; i < 3; i++) {
      const d = await check('a');
      expect(d).toMatchObject({ allowed: true, degraded: true, degradedBy: 'local' });
      seq.push(d.remaining);
    }
    expect(seq).toStrictEqual([5, 4, 3]);
    // a burst of one turn: 'b' had 7 left; no more admissions than that (a refill of at most 1 token may come
    // in the seconds since, hence up to 8)
    const burst = await Promise.all(Array.from({ length: 12 }, () => check('b')));
    const admitted = burst.filter((d) => d.allowed).length;
    expect(admitted).toBeGreaterThanOrEqual(7);
    expect(admitted).toBeLessThanOrEqual(8);
    expect(burst.every((d) => d.degradedBy === 'local')).toBe(true);
    expect(Math.max(...burst.map((d) => d.remaining))).toBeLessThanOrEqual(7);
  });

  it('a shard worker lost during a stall: its keys are seeded again on the replacement, from the state learned', async () => {
    const redis = await startRedis();
    redises.push(redis);
    // 10 an hour: nothing refills during the test
    const policies = { api: { algorithm: 'token_bucket', limit: 10, period: '1h', consistency: 'strict', onStoreError: 'local' } } as const;
    const l = await createLimiter({ shards: 2, redis: { url: redis.url }, policies });
    open.push(l);
    const [lost, kept] = keysByShard(policies, 'api', 2, 4);
    const keys = [...lost, ...kept];
    const admitted = new Map<string, number>();
    const round = async (): Promise<void> => {
      await Promise.all(keys.map(async (key) => {
        const d = await l.check({ policy: 'api', key, cost: 1 });
        if (d.allowed) admitted.set(key, (admitted.get(key) ?? 0) + 1);
      }));
    };
    for (let i = 0; i < 8; i++) await round(); // each key: 2 left in Redis
    admitted.clear();
    redis.pause();
    try {
      await round(); // seeded with 2, 1 admitted each
      const pool = poolOf(l);
      const old = pool.threads(0)[0];
      await old.terminate();
      await until(() => pool.threads(0).length === 1 && pool.threads(0)[0] !== old, 5000, 'shard 0 replaced');
      // a check may meet the replacement before it serves: it fails, and is not counted
      for (let i = 0; i < 10; i++) await round().catch(() => undefined);
    } finally {
      redis.resume();
    }
    // shard 1 kept its kernel: 2 in all. Shard 0's replacement started empty and was seeded again with the 2
    // learned (the one admitted on the lost kernel is handed back): 3 in all, not 1 + a full bucket of 10
    for (const key of kept) expect(admitted.get(key), key).toBe(2);
    for (const key of lost) expect(admitted.get(key), key).toBe(3);
  });
});
