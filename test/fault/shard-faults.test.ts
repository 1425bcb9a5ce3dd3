/**
 * Shard workers that fail in ways a `terminate()` from outside cannot show: a handler that throws inside a
 * batch, a worker that exits while holding a batch, a worker that cannot load at all, and a replacement
 * worker that cannot load after the first one died.
 *
 * How: src/shard/pool.ts loads the worker from `packageRoot()/dist/src/shard/worker.js` under vitest. This
 * file mocks `packageRoot` to a temporary folder holding the real `build/` (the kernel) and, as the worker,
 * test/fault/fixtures/faulty-worker.mjs: it wraps the real built worker and injects the faults a faults.json
 * beside it asks for. `piscina` is wrapped only to record each pool, so a test can see that no worker thread
 * is left. The product code has no fault hooks.
 */
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { Piscina as PiscinaType } from 'piscina';
import { PROJECT_ROOT } from '../helpers/server.js';
import { codeOf, faultyRoot, keysByShard, osThreads, parseMetrics, poolOf, settleWithin, tally, until, type Faults } from './support.js';

const fake = vi.hoisted(() => ({ root: '', pools: [] as unknown[] }));
vi.mock('../../src/util/paths.js', () => ({ packageRoot: () => fake.root }));
vi.mock('piscina', async (importOriginal) => {
  const mod = await importOriginal<typeof import('piscina')>();
  class Recorded extends mod.Piscina {
    constructor(...args: ConstructorParameters<typeof mod.Piscina>) {
      super(...args);
      fake.pools.push(this);
    }
  }
  return { ...mod, Piscina: Recorded, default: Recorded };
});

import { createLimiter, SluiceError, type Decision, type Limiter, type LimiterOptions, type PolicySpec } from '../../src/index.js';
import { createMetrics } from '../../src/metrics/registry.js';

const POLICIES: Record<string, PolicySpec> = {
  hourly: { algorithm: 'token_bucket', limit: 1, period: 3_600_000 },
};
/** Costs the faulty worker reacts to. */
const THROW_COST = 777;
const EXIT_COST = 888;
const KEYS = keysByShard(POLICIES, 'hourly', 2, 200);

const roots: string[] = [];
/** A package root whose shard worker is the faulty fixture with `faults`; sets it as packageRoot(). */
function useFaultyWorker(faults: Faults): string {
  const dir = faultyRoot(faults);
  roots.push(dir);
  fake.root = dir;
  return dir;
}

const recordedPools = (): PiscinaType[] => fake.pools as PiscinaType[];
const liveThreads = (): number => recordedPools().reduce((a, p) => a + p.threads.length, 0);

let open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.map((l) => l.close().catch(() => undefined)));
  open = [];
  fake.pools.length = 0;
});
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

async function limiter(extra: Partial<LimiterOptions> = {}): Promise<Limiter> {
  const l = await createLimiter({ policies: POLICIES, shards: 2, maxKeys: 1024, ...extra });
  open.push(l);
  return l;
}
const check = (l: Limiter, key: string, cost = 1): Promise<Decision> => l.check({ policy: 'hourly', key, cost });

describe('a worker that fails inside a batch', () => {
  it('throws in its handler: the batch it held fails with SHARD_FAILED, the worker and its keys live on, the other shard answers', async () => {
    useFaultyWorker({ throwCost: THROW_COST });
    const l = await limiter();
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    const A = s0[0], B = s1[0];
    expect((await check(l, A)).allowed).toBe(true);
    expect((await check(l, B)).allowed).toBe(true);
    const worker = pool.threads(0)[0];

    // one turn: one batch per shard; shard 0's holds the leg that makes its handler throw
    const held = [...s0.slice(1, 11).map((k) => check(l, k)), check(l, s0[11], THROW_COST)];
    const other = s1.slice(1, 11).map((k) => check(l, k));
    const [h, o] = await Promise.all([settleWithin(held, 10_000), settleWithin(other, 10_000)]);
    expect(tally(h)).toStrictEqual({ SHARD_FAILED: 11 });
    const e = (h[0] as { error: SluiceError }).error;
    expect(e).toBeInstanceOf(SluiceError);
    expect(e.status).toBe(503);
    expect(e.message).toMatch(/^shard 0 failed while deciding: faulty worker: threw inside a batch/);
    expect(tally(o)).toStrictEqual({ decided: 10 });

    // the same worker goes on with its state: A is still over its limit, the failed checks spent nothing
    expect(pool.threads(0)).toStrictEqual([worker]);
    expect((await check(l, A)).allowed).toBe(false);
    const again = await settleWithin(s0.slice(1, 11).map((k) => check(l, k)), 10_000);
    expect(again.every((s) => s.ok && s.value.allowed && s.value.remaining === 0)).toBe(true);
    expect((await check(l, B)).allowed).toBe(false);
    expect((await l.stats()).pending).toBe(0);
  });

  it('exits while holding a batch: its checks fail with SHARD_FAILED, the other shard answers, a replacement starts empty', async () => {
    useFaultyWorker({ exitCost: EXIT_COST });
    const l = await limiter();
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    const A = s0[0], B = s1[0];
    expect((await check(l, A)).allowed).toBe(true);
    expect((await check(l, B)).allowed).toBe(true);
    const dead = pool.threads(0)[0];
    const exited = new Promise<number>((r) => dead.once('exit', r));

    const held = [...s0.slice(1, 21).map((k) => check(l, k)), check(l, s0[21], EXIT_COST)];
    const other = s1.slice(1, 21).map((k) => check(l, k));
    const [h, o] = await Promise.all([settleWithin(held, 10_000), settleWithin(other, 10_000)]);
    expect(tally(h)).toStrictEqual({ SHARD_FAILED: 21 });
    expect((h[0] as { error: Error }).error.message).toMatch(/^shard 0 failed while deciding: worker exited with code: 9/);
    expect(tally(o)).toStrictEqual({ decided: 20 });
    expect(await exited).toBe(9);

    await until(() => pool.threads(0).length === 1 && pool.threads(0)[0] !== dead, 10_000, 'a replacement worker');
    // the replacement's table is empty: A, over its limit before, is admitted again; B (shard 1) is not
    expect((await check(l, A)).allowed).toBe(true);
    expect((await check(l, B)).allowed).toBe(false);
  });
});

describe('a worker that fails while starting', () => {
  for (const atLoad of ['throw', 'exit'] as const) {
    it(`${atLoad === 'throw' ? 'throws' : 'exits'} while loading: createLimiter rejects with SHARD_FAILED naming the cause, no respawn loop, no thread left`, async () => {
      useFaultyWorker({ atLoad });
      const before = await osThreads();
      const started = Date.now();
      let err: unknown;
      try {
        open.push(await limiter());
      } catch (e) {
        err = e;
      }
      const took = Date.now() - started;
      expect(err).toBeInstanceOf(SluiceError);
      expect((err as SluiceError).code).toBe('SHARD_FAILED');
      expect((err as Error).message).toMatch(atLoad === 'throw'
        ? /^shard [01]: worker failed to start: faulty worker: failed while loading$/
        : /^shard [01]: worker failed to start: worker exited with code: 3$/);
      expect(took).toBeLessThan(20_000); // not piscina's 30 s close timeout

      // both shards' pools are empty the moment createLimiter rejects...
      expect(recordedPools()).toHaveLength(2);
      expect(liveThreads()).toBe(0);
      // ...and stay empty: nothing respawns. Worker threads are OS threads; none is left behind.
      let destroys = 0;
      for (const p of recordedPools()) p.on('workerDestroy', () => destroys++);
      for (let i = 0; i < 10; i++) {
        await new Promise((r) => setTimeout(r, 50));
        expect(liveThreads()).toBe(0);
      }
      expect(destroys).toBe(0);
      expect(await osThreads()).toBeLessThanOrEqual(before);
    });
  }

  it('a replacement that fails while starting takes its shard down: its checks fail at once with SHARD_FAILED, the other shard answers, close() resolves', async () => {
    const root = useFaultyWorker({});
    const flag = path.join(root, 'replacements-crash');
    writeFileSync(path.join(root, 'dist', 'src', 'shard', 'faults.json'),
      JSON.stringify({ real: pathToFileURL(path.join(PROJECT_ROOT, 'dist', 'src', 'shard', 'worker.js')).href, loadFlag: flag }));
    const l = await limiter();
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    expect((await check(l, s0[0])).allowed).toBe(true);
    expect((await check(l, s1[0])).allowed).toBe(true);

    writeFileSync(flag, '');
    // checks queued while shard 0 has no worker that can take them
    await pool.threads(0)[0].terminate();
    const queued = s0.slice(1, 11).map((k) => check(l, k));
    const q = await settleWithin(queued, 10_000);
    expect(tally(q)).toStrictEqual({ SHARD_FAILED: 10 });
    await until(() => pool.threads(0).length === 0, 10_000, 'shard 0 to be given up');

    // from now on shard 0 refuses at once, naming why; shard 1 decides as before
    const later = await settleWithin(s0.slice(11, 21).map((k) => check(l, k)), 10_000);
    expect(tally(later)).toStrictEqual({ SHARD_FAILED: 10 });
    expect((later[0] as { error: Error }).error.message)
      .toMatch(/^shard 0 is down: its worker failed to start \(faulty worker: replacement failed while loading\); it is being restarted$/);
    const other = await settleWithin(s1.slice(1, 11).map((k) => check(l, k)), 10_000);
    expect(tally(other)).toStrictEqual({ decided: 10 });
    expect((await check(l, s1[0])).allowed).toBe(false);
    // stats count what is left; the limiter closes; no thread is left
    const st = await l.stats();
    expect(st.keys).toBe(11);
    await Promise.race([l.close(), new Promise((_, rej) => setTimeout(() => rej(new Error('close() hung')), 10_000))]);
    expect(liveThreads()).toBe(0);
    expect(codeOf((await settleWithin([check(l, s1[0])], 1000))[0])).toBe('CLOSED');
  });
});

describe('a worker that hangs while starting', () => {
  it('createLimiter rejects within startTimeoutMs with SHARD_FAILED, no thread left, nothing respawned', async () => {
    useFaultyWorker({ atLoad: 'hang' });
    const before = await osThreads();
    const started = Date.now();
    let err: unknown;
    try {
      open.push(await limiter({ startTimeoutMs: 500 }));
    } catch (e) {
      err = e;
    }
    const took = Date.now() - started;
    expect(err).toBeInstanceOf(SluiceError);
    expect((err as SluiceError).code).toBe('SHARD_FAILED');
    expect((err as Error).message).toBe('shard 0: worker failed to start: it did not answer within 500 ms');
    expect(took).toBeLessThan(20_000); // bounded: not a hang

    expect(recordedPools()).toHaveLength(2);
    expect(liveThreads()).toBe(0);
    let creates = 0;
    for (const p of recordedPools()) p.on('workerCreate', () => creates++);
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 50));
      expect(liveThreads()).toBe(0);
    }
    expect(creates).toBe(0);
    expect(recordedPools()).toHaveLength(2);
    // the hung threads were terminated: none is left behind (terminate() may take a moment to finish)
    const deadline = Date.now() + 10_000;
    while ((await osThreads()) > before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await osThreads()).toBeLessThanOrEqual(before);
  });

  it('the default start-up limit is 5 s, and startTimeoutMs is checked', async () => {
    useFaultyWorker({});
    await expect(createLimiter({ policies: POLICIES, shards: 1, startTimeoutMs: 0 })).rejects.toMatchObject({ code: 'CONFIG', field: 'startTimeoutMs' });
    await expect(createLimiter({ policies: POLICIES, shards: 1, shardRecovery: { minDelayMs: 1.5 } })).rejects.toMatchObject({ code: 'CONFIG', field: 'shardRecovery.minDelayMs' });
    const { DEFAULT_START_TIMEOUT_MS } = await import('../../src/shard/pool.js');
    expect(DEFAULT_START_TIMEOUT_MS).toBe(5000);
  });

  it('a replacement that hangs while starting: the checks queued for it fail within startTimeoutMs, and the shard is down', async () => {
    const root = useFaultyWorker({});
    const hang = path.join(root, 'replacements-hang');
    writeFileSync(path.join(root, 'dist', 'src', 'shard', 'faults.json'),
      JSON.stringify({ real: pathToFileURL(path.join(PROJECT_ROOT, 'dist', 'src', 'shard', 'worker.js')).href, loadHangFlag: hang }));
    // restarts are far off, so the shard stays down for the whole test
    const l = await limiter({ startTimeoutMs: 2000, shardRecovery: { minDelayMs: 60_000 } });
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    expect((await check(l, s0[0])).allowed).toBe(true);

    writeFileSync(hang, '');
    await pool.threads(0)[0].terminate();
    // queued for a replacement that never answers: they fail (not hang) once its start-up limit passes
    const queued = await settleWithin(s0.slice(1, 11).map((k) => check(l, k)), 10_000);
    expect(tally(queued)).toStrictEqual({ SHARD_FAILED: 10 });
    expect((queued[0] as { error: Error }).error.message)
      .toBe('shard 0 is down: its replacement worker did not start within 2000 ms; it is being restarted');
    const st = (await l.stats()).perShard;
    expect(st.map((x) => [x.up, x.downs, x.recoveries, x.queuedChecks])).toStrictEqual([[false, 1, 0, 0], [true, 0, 0, 0]]);
    // later checks fail at once; shard 1 answers
    expect(tally(await settleWithin(s0.slice(11, 16).map((k) => check(l, k)), 1000))).toStrictEqual({ SHARD_FAILED: 5 });
    expect(tally(await settleWithin(s1.slice(0, 5).map((k) => check(l, k)), 10_000))).toStrictEqual({ decided: 5 });
    await Promise.race([l.close(), new Promise((_, rej) => setTimeout(() => rej(new Error('close() hung')), 10_000))]);
    expect(liveThreads()).toBe(0);
  });
});

describe('a shard that is down recovers', () => {
  it('answers with SHARD_FAILED at once while down, restarts with backoff while its worker cannot load, and decides exactly again once it can', async () => {
    const root = useFaultyWorker({});
    const flag = path.join(root, 'replacements-crash');
    writeFileSync(path.join(root, 'dist', 'src', 'shard', 'faults.json'),
      JSON.stringify({ real: pathToFileURL(path.join(PROJECT_ROOT, 'dist', 'src', 'shard', 'worker.js')).href, loadFlag: flag }));
    const l = await limiter({ startTimeoutMs: 2000, shardRecovery: { minDelayMs: 100, maxDelayMs: 200 } });
    const pool = poolOf(l);
    const metrics = createMetrics(l);
    const up = async (): Promise<number[]> => {
      const m = parseMetrics(await metrics.render());
      return [0, 1].map((s) => m.get(`sluice_shard_up{shard="${s}"}`)!);
    };
    const [s0, s1] = KEYS;
    const A = s0[0];
    expect((await check(l, A)).allowed).toBe(true);
    expect((await check(l, A)).allowed).toBe(false);
    expect((await check(l, s1[0])).allowed).toBe(true);
    expect(await up()).toStrictEqual([1, 1]);

    // the worker dies and its replacement (and every restart while the flag is there) fails while loading
    writeFileSync(flag, '');
    await pool.threads(0)[0].terminate();
    await until(() => !pool.shardStates()[0].up, 10_000, 'shard 0 to go down');
    expect(await up()).toStrictEqual([0, 1]);
    const down = await settleWithin(s0.slice(1, 11).map((k) => check(l, k)), 1000);
    expect(tally(down)).toStrictEqual({ SHARD_FAILED: 10 });
    expect((down[0] as { error: Error }).error.message)
      .toBe('shard 0 is down: its worker failed to start (faulty worker: replacement failed while loading); it is being restarted');
    // restarts are tried (each a fresh single-thread pool) and fail, without a tight loop: 100-200 ms apart
    const pools = recordedPools().length;
    await until(() => recordedPools().length >= pools + 2, 10_000, 'two restart attempts');
    expect(pool.shardStates()[0].up).toBe(false);
    expect(tally(await settleWithin([check(l, A)], 1000))).toStrictEqual({ SHARD_FAILED: 1 });
    expect(tally(await settleWithin(s1.slice(1, 6).map((k) => check(l, k)), 10_000))).toStrictEqual({ decided: 5 });

    // the fault is gone: the next restart brings shard 0 back, with an empty table
    rmSync(flag);
    await until(() => pool.shardStates()[0].up, 10_000, 'shard 0 to recover');
    const st = pool.shardStates()[0];
    expect([st.up, st.downs, st.recoveries, st.downReason]).toStrictEqual([true, 1, 1, null]);
    expect(pool.threads(0)).toHaveLength(1);
    // exact decisions again: A's spent token is forgotten (fresh table), then A is over its limit again
    expect(await check(l, A)).toStrictEqual({ allowed: true, limit: 1, remaining: 0, resetAfterMs: 3_600_000, retryAfterMs: 0, policy: 'hourly' });
    const again = await check(l, A);
    expect([again.allowed, again.remaining]).toStrictEqual([false, 0]);
    expect(again.retryAfterMs).toBeGreaterThan(3_590_000);
    // shard 1 kept its state throughout
    expect((await check(l, s1[0])).allowed).toBe(false);
    const m = parseMetrics(await metrics.render());
    expect([0, 1].map((s) => m.get(`sluice_shard_up{shard="${s}"}`))).toStrictEqual([1, 1]);
    expect([0, 1].map((s) => m.get(`sluice_shard_downs_total{shard="${s}"}`))).toStrictEqual([1, 0]);
    expect([0, 1].map((s) => m.get(`sluice_shard_recoveries_total{shard="${s}"}`))).toStrictEqual([1, 0]);
    // stats count the recovered shard's keys again (A), plus shard 1's six
    expect((await l.stats()).keys).toBe(7);
    await Promise.race([l.close(), new Promise((_, rej) => setTimeout(() => rej(new Error('close() hung')), 10_000))]);
    expect(liveThreads()).toBe(0);
  });
});
