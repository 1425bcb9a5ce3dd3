/**
 * A policy reload against shards that are busy, stalled or restarting: the new limits are on every kernel
 * before any check can name them, whichever way the check reaches its shard (a batch through the worker's
 * queue, the synchronous channel of checkNow / the HTTP front, or another front thread's channel), so no check
 * fails, or is decided under numbers other than its set's, because of a reload.
 *
 * The interleavings are made, not waited for: piscina hands a worker at most 16 tasks at a time
 * (concurrentTasksPerWorker, src/shard/pool.ts) and keeps the rest on this thread until it reads an answer,
 * which it cannot do while this thread runs. So 16 full batches issued in one synchronous run leave whatever is
 * sent to the shard's queue next waiting on this thread, while a synchronous channel call reaches the kernel at
 * once: a reload's limits sent through that queue were still on this thread when the next checkNow was decided
 * (`kernel rejected leg 0 of policy ... (code 3)`). A restarting shard is held while loading by the faulty
 * worker (test/fault/fixtures/faulty-worker.mjs, loadWaitFlag), a stalled one by a batch it stalls on.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { faultyRoot, keysByShard, poolOf, until } from './support.js';

const fake = vi.hoisted(() => ({ root: '' }));
vi.mock('../../src/util/paths.js', () => ({ packageRoot: () => fake.root }));

import { createLimiter, isSluiceError, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { engineOf } from '../../src/engine/handle.js';
import { ManualClock } from '../helpers/clock.js';

/** Checks in one full batch: the front sends a batch once another check of MAX_GROUP legs would not fit 4096. */
const FULL_BATCH = 4096 - 16 + 1;
/** Full batches that fill piscina's 16 places on a worker. */
const BATCHES = 16;

const roots: string[] = [];
function root(faults: Parameters<typeof faultyRoot>[0] = {}): string {
  const dir = faultyRoot(faults);
  roots.push(dir);
  fake.root = dir;
  return dir;
}
const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close().catch(() => undefined)));
});
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

/** A token a day (`l` per `l` days): no token comes back during a test. */
const bucket = (l: number) => ({ algorithm: 'token_bucket' as const, limit: l, period: `${l}d` });

/** What a check came to: its policy's limit and what it had left, or the error's code and message. */
function outcome(x: Decision | unknown): string {
  if (isSluiceError(x)) return `${x.code}: ${x.message}`;
  const d = x as Decision;
  return `${d.limit} ${d.remaining}`;
}
function now(l: Limiter, policy: string, key: string): string {
  try {
    return outcome(engineOf(l)!.checkNow!({ policy, key, cost: 1 }));
  } catch (e) {
    return outcome(e);
  }
}
const later = (l: Limiter, policy: string, key: string): Promise<string> =>
  l.check({ policy, key, cost: 1 }).then(outcome, outcome);

/** Checks {@link fillQueues} issues. */
const LOAD = (BATCHES + 1) * FULL_BATCH;

/**
 * Issues, in this synchronous run, {@link LOAD} checks: more than BATCHES full batches to each of 2 shards (each
 * check on a key of its own, so each is the key's first: remaining limit − 1), and returns their outcomes'
 * tally once decided.
 */
function fillQueues(l: Limiter, policy: string): Promise<Record<string, number>> {
  const ps: Array<Promise<string>> = [];
  for (let i = 0; i < LOAD; i++) ps.push(later(l, policy, `load-${i}`));
  return Promise.all(ps).then((all) => {
    const t: Record<string, number> = {};
    for (const o of all) t[o] = (t[o] ?? 0) + 1;
    return t;
  });
}

describe('a reload while every shard has a full queue', () => {
  it('a check through the synchronous channel right after it is decided under the new limits, on every shard', async () => {
    root();
    const policies = { api: bucket(1000) };
    const l = await createLimiter({ policies, shards: 2, clock: new ManualClock().now, maxKeys: 200_000 });
    open.push(l);
    const [[k0], [k1]] = keysByShard(policies, 'api', 2, 1);
    expect([now(l, 'api', k0), now(l, 'api', k1)]).toStrictEqual(['1000 999', '1000 999']);

    const load = fillQueues(l, 'api');
    const reloaded = l.reload({ api: bucket(2000) });
    // the set in force from the call on; the shards hold its limits already, queue or no queue
    const after = [now(l, 'api', k0), now(l, 'api', k1), now(l, 'api', 'fresh')];
    expect(after).toStrictEqual(['2000 1999', '2000 1999', '2000 1999']);
    expect(await reloaded).toMatchObject({ changed: ['api'] });
    // the batches in flight were decided whole under the old set, none failed
    expect(await load).toStrictEqual({ '1000 999': LOAD });
    expect(await Promise.all([later(l, 'api', k0), later(l, 'api', k1)])).toStrictEqual(['2000 1998', '2000 1998']);
  });

  it('a reload that removes a policy and changes the number of limits of two others: queued checks keep the old set, new ones get the new', async () => {
    root();
    const two = (l: number): PolicySpec => ({ limits: [{ ...bucket(l), name: 'day' }, { algorithm: 'fixed_window', limit: l + 1, period: '365d', name: 'year' }] });
    const before = { grow: bucket(1000), shrink: two(3000), gone: bucket(5000) };
    const after = { grow: two(2000), shrink: bucket(4000) };
    const l = await createLimiter({ policies: before, shards: 2, clock: new ManualClock().now, maxKeys: 200_000 });
    open.push(l);
    const loads = [fillQueues(l, 'grow'), later(l, 'shrink', 'q'), later(l, 'gone', 'q')];
    const reloaded = l.reload(after);
    const checks = ['grow', 'shrink', 'gone'].map((p) => now(l, p, 'k'));
    expect(checks).toStrictEqual(['2000 1999', '4000 3999', 'UNKNOWN_POLICY: policy: unknown policy "gone"']);
    expect(await reloaded).toMatchObject({ removed: ['gone'], changed: ['grow', 'shrink'] });
    expect(await Promise.all(loads)).toStrictEqual([{ '1000 999': LOAD }, '3000 2999', '5000 4999']);
  });
});

describe('a reload while a shard is restarting', () => {
  it('the restarted worker, started from data made before the reload, decides nothing until it holds the new limits', async () => {
    const dir = root((d) => ({ loadFlag: path.join(d, 'crash'), loadWaitFlag: path.join(d, 'wait'), loadWaitingFlag: path.join(d, 'waiting') }));
    const [crash, wait, waiting] = ['crash', 'wait', 'waiting'].map((f) => path.join(dir, f));
    const policies = { api: bucket(1000) };
    const l = await createLimiter({ policies, shards: 2, maxKeys: 1024, startTimeoutMs: 10_000, shardRecovery: { minDelayMs: 50, maxDelayMs: 100 } });
    open.push(l);
    const pool = poolOf(l);
    const [[k0], [k1]] = keysByShard(policies, 'api', 2, 1);
    // shard 0 goes down: its worker dies, and its replacement fails while loading
    writeFileSync(crash, '');
    await pool.threads(0)[0].terminate();
    await until(() => !pool.shardStates()[0].up, 10_000, 'shard 0 to go down');
    // a restart attempt is created (its start-up data copied) and held while loading; then the reload
    writeFileSync(wait, '');
    rmSync(crash);
    await until(() => existsSync(waiting), 10_000, 'a restart attempt loading');
    await l.reload({ api: bucket(2000) });

    // another front thread (thread 1 of the channels, as src/server/front-thread.ts builds it) on the new set
    const front = await createLimiter({ policies: { api: bucket(2000) }, shards: 2, maxKeys: 1 }, { frontThread: { channels: pool.channels, thread: 1 } });
    open.push(front);
    engineOf(front)!.frontThreads!.adopt(engineOf(l)!.frontThreads!.current());
    // the held worker loads and serves the channels, but its kernel is older than the set in force: the call
    // waits for the limits (which this thread, blocked in the call, cannot send yet) and is given up undecided
    rmSync(wait);
    expect(now(front, 'api', k0)).toMatch(/^OVERLOADED: shard 0 did not answer within \d+ ms$/);

    await until(() => pool.shardStates()[0].up, 10_000, 'shard 0 to recover');
    // every path to the recovered shard decides under the new limits, from its empty table
    expect([now(front, 'api', k0), now(l, 'api', k0), await later(l, 'api', k0)]).toStrictEqual(['2000 1999', '2000 1998', '2000 1997']);
    expect([now(front, 'api', k1), now(l, 'api', k1)]).toStrictEqual(['2000 1999', '2000 1998']);
  });
});

describe('a reload while a shard is stalled', () => {
  it('is rejected with SHARD_FAILED, the set in force kept, when a shard does not take the new limits; it applies once the shard is back', async () => {
    const STALL = 999;
    const dir = root((d) => ({ stallCost: STALL, stalledFlag: path.join(d, 'stalled'), releaseFlag: path.join(d, 'release') }));
    const policies = { api: bucket(1000) };
    const l = await createLimiter({ policies, shards: 2, clock: new ManualClock().now, maxKeys: 1024 });
    open.push(l);
    const [[k0], [k1]] = keysByShard(policies, 'api', 2, 1);
    const stalled = l.check({ policy: 'api', key: k0, cost: STALL }).then(outcome, outcome);
    await until(() => existsSync(path.join(dir, 'stalled')), 10_000, 'shard 0 to stall');
    const version = l.version;
    const refused = await l.reload({ api: bucket(2000) }).then(() => null, (e: unknown) => e);
    expect(outcome(refused)).toMatch(/^SHARD_FAILED: shard 0 did not take new limits within \d+ ms$/);
    expect(l.version).toBe(version);
    expect(now(l, 'api', k1)).toBe('1000 999');

    writeFileSync(path.join(dir, 'release'), '');
    expect(await stalled).toBe('1000 1');
    await l.reload({ api: bucket(2000) });
    expect([now(l, 'api', k0), now(l, 'api', k1), await later(l, 'api', k0)]).toStrictEqual(['2000 1999', '2000 1999', '2000 1998']);
  });
});
