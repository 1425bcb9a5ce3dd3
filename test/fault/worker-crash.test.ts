/**
 * Shard workers dying under load, shutdown, and overload, through the public limiter (`shards: 2`).
 *
 * Killing: the pool is reached through the limiter's engine handle (`engineOf(limiter).pool`); `pool.threads(s)` lists shard s's
 * piscina worker thread, and `worker.terminate()` kills it. A batch the front posts to that worker after
 * terminate() (in the same synchronous turn: the front flushes synchronously once a batch reaches 4081
 * legs) is certainly held by the dying worker, so every check in it must reject with SHARD_FAILED.
 * Batches posted just before the kill may have been answered first: those may resolve or fail, but must
 * settle. piscina then starts a replacement worker for the shard.
 *
 * Documented behaviour: the replacement worker starts with an EMPTY kernel. Every key of the dead shard
 * loses its state: a key that was over its limit before the crash is admitted again afterwards. Keys on
 * the other shards keep theirs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Worker } from 'node:worker_threads';
import { createLimiter, isSluiceError, SluiceError, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import type { ShardPool } from '../../src/shard/pool.js';
import { engineOf } from '../../src/engine/handle.js';
import { keysByShard, settleWithin, type Settled } from './support.js';

const POLICIES: Record<string, PolicySpec> = {
  hourly: { algorithm: 'token_bucket', limit: 1, period: 3_600_000 },
};
/** Checks that make the front flush synchronously: legs + 16 > 4096. */
const SYNC_FLUSH = 4081;


const KEYS = keysByShard(POLICIES, 'hourly', 2, 3 * SYNC_FLUSH + 200);


function codeOf(s: Settled): string {
  if (s.ok) return 'decided';
  return isSluiceError(s.error) ? s.error.code : `not a SluiceError: ${String(s.error)}`;
}

function tally(ss: Settled[]): Record<string, number> {
  const t: Record<string, number> = {};
  for (const s of ss) t[codeOf(s)] = (t[codeOf(s)] ?? 0) + 1;
  return t;
}

async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const poolOf = (l: Limiter): ShardPool => engineOf(l)!.pool!;
const check = (l: Limiter, key: string): Promise<Decision> => l.check({ policy: 'hourly', key, cost: 1 });

let open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.map((l) => l.close().catch(() => undefined)));
  open = [];
});

async function limiter(extra: { maxPending?: number } = {}): Promise<Limiter> {
  const l = await createLimiter({ policies: POLICIES, shards: 2, ...extra });
  open.push(l);
  return l;
}

describe('a shard worker dies while checks are in flight', () => {
  it('its held checks reject with SHARD_FAILED, none hangs, the other shard answers, the replacement starts fresh', async () => {
    const l = await limiter();
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    const A = s0[0], B = s1[0];

    // state on both shards: each key has spent its one token for the hour
    expect((await check(l, A)).allowed).toBe(true);
    expect((await check(l, B)).allowed).toBe(true);
    expect((await check(l, A)).allowed).toBe(false);
    expect((await check(l, B)).allowed).toBe(false);

    expect(pool.threads(0)).toHaveLength(1);
    const dead: Worker = pool.threads(0)[0];
    const exited = new Promise<number>((r) => dead.once('exit', r));

    // one synchronous turn:
    const before = s0.slice(1, 1 + SYNC_FLUSH).map((k) => check(l, k)); // posted, then the worker is killed
    void dead.terminate();
    const held = s0.slice(1 + SYNC_FLUSH, 1 + 2 * SYNC_FLUSH).map((k) => check(l, k)); // posted to the dying worker
    const other = s1.slice(1, 101).map((k) => check(l, k)); // the other shard, flushed at the end of the turn
    const late = s0.slice(1 + 2 * SYNC_FLUSH, 1 + 2 * SYNC_FLUSH + 10).map((k) => check(l, k));

    const [b, h, o, lt] = await Promise.all([before, held, other, late].map((ps) => settleWithin(ps, 15_000)));

    // every check held by the dead worker failed with a typed SHARD_FAILED
    expect(tally(h)).toStrictEqual({ SHARD_FAILED: SYNC_FLUSH });
    for (const s of h.slice(0, 3)) {
      expect(s.ok).toBe(false);
      const e = (s as { error: unknown }).error;
      expect(e).toBeInstanceOf(SluiceError);
      expect((e as SluiceError).code).toBe('SHARD_FAILED');
      expect((e as SluiceError).status).toBe(503);
      expect((e as Error).message).toMatch(/shard 0/);
    }
    // checks posted just before the kill, or after it, either were decided or failed the same way
    for (const ss of [b, lt]) {
      for (const s of ss) expect(['decided', 'SHARD_FAILED']).toContain(codeOf(s));
      for (const s of ss) if (s.ok) expect(s.value.allowed).toBe(true);
    }
    // the other shard kept answering
    expect(tally(o)).toStrictEqual({ decided: 100 });
    expect(o.every((s) => s.ok && s.value.allowed)).toBe(true);

    // piscina replaces the worker
    expect(await exited).not.toBe(0);
    await until(() => pool.threads(0).length === 1 && pool.threads(0)[0] !== dead, 15_000, 'a replacement worker on shard 0');

    // the dead shard's keys are decided again, from an empty kernel: A was over its limit before the crash
    // and is admitted now (its state died with the worker)...
    const again = await settleWithin([check(l, A)], 15_000);
    expect(again[0].ok && again[0].value).toMatchObject({ allowed: true, remaining: 0 });
    expect((await check(l, A)).allowed).toBe(false);
    // ...while B, on the surviving shard, is still over its limit
    expect((await check(l, B)).allowed).toBe(false);
    // and a fresh batch on shard 0 is fully decided
    const after = await settleWithin(s0.slice(1 + 3 * SYNC_FLUSH, 1 + 3 * SYNC_FLUSH + 100).map((k) => check(l, k)), 15_000);
    expect(tally(after)).toStrictEqual({ decided: 100 });
    const st = await l.stats();
    expect(st.shards).toBe(2);
    expect(st.pending).toBe(0);
  });

  it('a worker killed while idle is replaced and no check fails', async () => {
    const l = await limiter();
    const pool = poolOf(l);
    const [s0] = KEYS;
    expect((await check(l, s0[0])).allowed).toBe(true);
    const dead = pool.threads(0)[0];
    const exited = new Promise<number>((r) => dead.once('exit', r));
    await dead.terminate();
    await exited;
    const res = await settleWithin(s0.slice(1, 51).map((k) => check(l, k)), 15_000);
    expect(tally(res)).toStrictEqual({ decided: 50 });
    expect(pool.threads(0)[0]).not.toBe(dead);
    // fresh state on the replacement
    expect((await check(l, s0[0])).allowed).toBe(true);
  });

  it('close() right after a kill still resolves; the held checks fail, nothing hangs', async () => {
    const l = await limiter();
    const pool = poolOf(l);
    const [s0, s1] = KEYS;
    await check(l, s0[0]);
    const dead = pool.threads(0)[0];
    void dead.terminate();
    const held = s0.slice(1, 1 + SYNC_FLUSH).map((k) => check(l, k));
    const other = s1.slice(0, 20).map((k) => check(l, k));
    const closing = l.close();
    const [h, o] = await Promise.all([settleWithin(held, 15_000), settleWithin(other, 15_000)]);
    await Promise.race([closing, new Promise((_, rej) => setTimeout(() => rej(new Error('close() hung')), 15_000))]);
    expect(tally(h)).toStrictEqual({ SHARD_FAILED: SYNC_FLUSH });
    expect(tally(o)).toStrictEqual({ decided: 20 });
  });
});

describe('close', () => {
  it('decides what is queued, resolves, and then refuses checks with CLOSED', async () => {
    const l = await limiter();
    const [s0, s1] = KEYS;
    const queued = [...s0.slice(0, 10), ...s1.slice(0, 10)].map((k) => check(l, k));
    await expect(l.close()).resolves.toBeUndefined();
    const q = await settleWithin(queued, 5000);
    expect(tally(q)).toStrictEqual({ decided: 20 });
    expect(q.every((s) => s.ok && s.value.allowed)).toBe(true);

    const later = await settleWithin([check(l, s0[0]), check(l, s1[500])], 5000);
    expect(tally(later)).toStrictEqual({ CLOSED: 2 });
    const e = (later[0] as { error: unknown }).error;
    expect(e).toBeInstanceOf(SluiceError);
    expect((e as SluiceError).status).toBe(503);
    const many = await l.checkMany([{ policy: 'hourly', key: 'x', cost: 1 }]);
    expect(isSluiceError(many[0]) && many[0].code).toBe('CLOSED');
    // closing again is harmless
    await expect(l.close()).resolves.toBeUndefined();
  });
});

describe('overload', () => {
  it('maxPending 10: of 50 checks issued in one turn, the first 10 are decided and 40 rejected OVERLOADED', async () => {
    const l = await limiter({ maxPending: 10 });
    const [s0, s1] = KEYS;
    const keys = Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? s0 : s1)[100 + i]);
    const res = await settleWithin(keys.map((k) => check(l, k)), 10_000);
    expect(res.slice(0, 10).map(codeOf)).toStrictEqual(Array(10).fill('decided'));
    expect(res.slice(0, 10).every((s) => s.ok && s.value.allowed)).toBe(true);
    expect(res.slice(10).map(codeOf)).toStrictEqual(Array(40).fill('OVERLOADED'));
    const e = (res[10] as { error: unknown }).error;
    expect(e).toBeInstanceOf(SluiceError);
    expect((e as SluiceError).status).toBe(503);
    // the refused checks consumed nothing: their keys are still fresh; and the limiter accepts work again
    const retry = await settleWithin(keys.slice(10, 20).map((k) => check(l, k)), 10_000);
    expect(retry.every((s) => s.ok && s.value.allowed && s.value.remaining === 0)).toBe(true);
    expect((await l.stats()).pending).toBe(0);
  });
});
