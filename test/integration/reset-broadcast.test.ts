/**
 * A key reset on one instance takes effect on every instance (src/engine/reset-channel.ts): two limiters on
 * one store stand for two instances. Each holds a denial of the key in its over-limit cache (it answered a
 * check from it); the key is reset through one (the admin API's DELETE, or `limiter.reset`); the other hears
 * it, and its next check goes to the store and is admitted. On Redis and on a shared MemoryStore; for sync
 * (the other's view is read again from Redis at its next merge) and lease policies (the other's lease of the
 * key is dropped); with a check in flight on the other instance when it hears the reset (its answer,
 * decided before the reset, is not learned); and what the other instance keeps to seed `onStoreError: local`
 * stays (a message anyone can publish must not make a stall start a key fresh).
 *
 * Policies refill one token a day (or count a day's window), so nothing refills during a test; waits are for
 * a message to arrive (bounded polls), never on time.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter, type LimiterStats, type PolicySpec } from '../../src/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/contract.js';
import { startAdminServer } from '../../src/server/admin.js';
import { connected, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { flakyStore } from '../helpers/flaky-store.js';

let redis: SharedRedis;
beforeAll(async () => { redis = await sharedRedis(); });
afterAll(async () => { await redis?.stop(); });

const TOKEN = 'reset-broadcast-token-0123456789';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits (up to 10 s) until `ok` holds. */
async function until(what: string, ok: () => Promise<boolean> | boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`not within 10 s: ${what}`);
    await sleep(5);
  }
}

type StoreStats = NonNullable<LimiterStats['store']>;
const storeStats = async (l: Limiter): Promise<StoreStats> => (await l.stats()).store!;

/** 2 a day, burst 2: two admitted, then denied for the rest of the test. */
const STRICT: Record<string, PolicySpec> = {
  p: { algorithm: 'token_bucket', limit: 2, period: '1d', burst: 2, consistency: 'strict', onStoreError: 'closed' },
};

async function redisPair(prefix: string, policies: Record<string, PolicySpec>, extra: { syncIntervalMs?: number } = {}): Promise<[Limiter, Limiter]> {
  const make = async (): Promise<Limiter> => {
    const l = await createLimiter({ policies, redis: { url: redis.url, prefix, ...extra } });
    await connected(l);
    return l;
  };
  const pair: [Limiter, Limiter] = [await make(), await make()];
  // both subscribed: a reset published before a subscription is made reaches nobody
  await until('both channels subscribed', async () => {
    const n = Number((await redis.client.call('PUBSUB', 'NUMSUB', `${prefix}resets`) as [string, number])[1]);
    return n >= 2;
  });
  return pair;
}

/** Exhausts `key` through `a`, then has each of `a` and `b` answer a denial of it from its cache. */
async function deniedOnBoth(a: Limiter, b: Limiter, key: string): Promise<void> {
  expect((await a.check({ policy: 'p', cost: 1, key })).allowed).toBe(true);
  expect((await a.check({ policy: 'p', cost: 1, key })).allowed).toBe(true);
  for (const l of [a, b]) {
    // the first denial comes from the store and is learned; the second is answered by the cache
    expect((await l.check({ policy: 'p', cost: 1, key })).allowed).toBe(false);
    const before = (await storeStats(l)).overLimitAnswers;
    expect(await l.check({ policy: 'p', cost: 1, key })).toMatchObject({ allowed: false, remaining: 0 });
    expect((await storeStats(l)).overLimitAnswers, 'answered from the cache').toBe(before + 1);
  }
}

/** `l`'s next check of `key` goes to the store (the cache answers nothing) and is admitted, leaving `remaining`. */
async function admittedByStore(l: Limiter, key: string, remaining = 1): Promise<void> {
  const before = (await storeStats(l)).overLimitAnswers;
  expect(await l.check({ policy: 'p', cost: 1, key })).toMatchObject({ allowed: true, remaining });
  expect((await storeStats(l)).overLimitAnswers, 'not answered from the cache').toBe(before);
}

describe('a reset on one instance drops the key on the others (Redis)', () => {
  it('through the admin API: the other instance\'s cached denial goes, its next check is admitted by Redis', async () => {
    const [a, b] = await redisPair('rb1:', STRICT);
    const admin = await startAdminServer({ limiter: a, token: TOKEN, port: 0 });
    try {
      await deniedOnBoth(a, b, 'tenant-1');
      const res = await fetch(`http://127.0.0.1:${admin.port}/v1/keys/p/tenant-1`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(200);
      expect(await res.json()).toStrictEqual({ removed: 1 });
      await until('b heard the reset', async () => (await storeStats(b)).resets.applied === 1);
      expect((await storeStats(a)).resets).toMatchObject({ sent: 1, applied: 0, malformed: 0 });
      await admittedByStore(b, 'tenant-1');
      await admittedByStore(a, 'tenant-1', 0);
      // another key's denial stays
      await deniedOnBoth(a, b, 'tenant-2');
    } finally {
      await admin.close();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('through limiter.reset; a guard\'s key: what guarded policies learned through it goes too', async () => {
    const policies: Record<string, PolicySpec> = {
      ...STRICT,
      g: { algorithm: 'fixed_window', limit: 3, period: '1d', consistency: 'strict', onStoreError: 'closed' },
      q: { algorithm: 'token_bucket', limit: 100, period: '1d', guard: 'g', consistency: 'strict', onStoreError: 'closed' },
    };
    const [a, b] = await redisPair('rb2:', policies);
    try {
      await deniedOnBoth(a, b, 'k');
      expect((await a.reset({ policy: 'p', key: 'k' })).removed).toBe(1);
      await until('b heard the reset', async () => (await storeStats(b)).resets.applied === 1);
      await admittedByStore(b, 'k');

      // the guard's 3 spent through a; then each instance learns (and answers) q's denial by the guard
      for (let i = 0; i < 3; i++) expect((await a.check({ policy: 'q', cost: 1, key: `u${i}` })).allowed).toBe(true);
      for (const l of [a, b]) {
        expect((await l.check({ policy: 'q', cost: 1, key: 'u9' })).allowed).toBe(false);
        const before = (await storeStats(l)).overLimitAnswers;
        expect((await l.check({ policy: 'q', cost: 1, key: 'u9' })).allowed).toBe(false);
        expect((await storeStats(l)).overLimitAnswers).toBe(before + 1);
      }
      await a.reset({ policy: 'g', key: '*' });
      await until('b heard the guard\'s reset', async () => (await storeStats(b)).resets.applied === 2);
      for (const l of [b, a]) {
        const before = (await storeStats(l)).overLimitAnswers;
        expect((await l.check({ policy: 'q', cost: 1, key: 'u9' })).allowed).toBe(true);
        expect((await storeStats(l)).overLimitAnswers).toBe(before);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('sync: the other instance reads the key from Redis at its next merge (its view was spent)', async () => {
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 2, period: '1d', consistency: 'sync' } };
    const [a, b] = await redisPair('rb3:', policies, { syncIntervalMs: 20 });
    const merges = async (l: Limiter): Promise<number> => (await storeStats(l)).sync?.merges ?? 0;
    try {
      expect((await a.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      expect((await a.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      await until('a merged', async () => (await storeStats(a)).sync?.pendingKeys === 0 && (await merges(a)) > 0);
      // b's own view starts empty: it admits once, merges, and then sees the whole day's count
      expect((await b.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      await until('b merged', async () => (await storeStats(b)).sync?.pendingKeys === 0 && (await merges(b)) > 0);
      expect((await b.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(false);
      const before = await merges(b);
      await a.reset({ policy: 'p', key: 'k' });
      await until('b heard the reset and merged since', async () => (await storeStats(b)).resets.applied === 1 && (await merges(b)) > before
        && (await storeStats(b)).sync?.pendingKeys === 0);
      expect(await b.check({ policy: 'p', cost: 1, key: 'k' })).toMatchObject({ allowed: true, remaining: 1 });
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('lease: the other instance\'s lease of the key is dropped; its next check takes a new one', async () => {
    const policies: Record<string, PolicySpec> = { p: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'lease' } };
    const [a, b] = await redisPair('rb4:', policies);
    try {
      for (let i = 0; i < 20; i++) expect((await b.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      expect((await b.stats()).lease!.heldByPolicy.p ?? 0, 'b holds leased tokens of the key').toBeGreaterThan(0);
      const acquired = (await b.stats()).lease!.policies.p.acquired;
      await a.reset({ policy: 'p', key: 'k' });
      await until('b heard the reset', async () => (await storeStats(b)).resets.applied === 1);
      expect((await b.stats()).lease!.heldByPolicy.p ?? 0).toBe(0);
      expect((await b.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      expect((await b.stats()).lease!.policies.p.acquired).toBe(acquired + 1);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('messages that are not a reset, or name a policy or version not in force, change nothing (counted)', async () => {
    const [a, b] = await redisPair('rb5:', STRICT);
    try {
      await deniedOnBoth(a, b, 'k');
      const bad = ['not json', '[]', 'null', '{"v":2,"origin":"x","policy":"p","version":"v","key":"k"}',
        JSON.stringify({ v: 1, origin: 'x', policy: 'p', version: 'v', key: '' }), JSON.stringify({ v: 1, origin: 'x', policy: 'p', version: 'v', key: 7 }),
        JSON.stringify({ v: 1, origin: 'x', policy: 'p', version: 'v', key: 'k'.repeat(1025) })];
      for (const m of bad) await redis.client.publish('rb5:resets', m);
      await redis.client.publish('rb5:resets', JSON.stringify({ v: 1, origin: 'x', policy: 'nope', version: 'v', key: 'k' }));
      await redis.client.publish('rb5:resets', JSON.stringify({ v: 1, origin: 'x', policy: 'p', version: 'not-this-one', key: 'k' }));
      // each instance hears the channel on its own connection: wait for both to have heard the last message
      const heard = async (l: typeof a): Promise<boolean> => {
        const r = (await storeStats(l)).resets;
        return r.malformed === bad.length && r.ignored === 2;
      };
      await until('both heard every message', async () => (await heard(a)) && (await heard(b)));
      for (const l of [a, b]) {
        expect((await storeStats(l)).resets).toStrictEqual({ sent: 0, applied: 0, ignored: 2, malformed: bad.length });
        const before = (await storeStats(l)).overLimitAnswers;
        expect((await l.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(false);
        expect((await storeStats(l)).overLimitAnswers, 'the denial is still answered from the cache').toBe(before + 1);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('a reset on one instance drops the key on the others (MemoryStore)', () => {
  it('two limiters on one MemoryStore: library reset on one, the other\'s next check is admitted by the store', async () => {
    const store = new MemoryStore({ prefix: 'mem:' });
    const a = await createLimiter({ policies: STRICT, store });
    const b = await createLimiter({ policies: STRICT, store });
    try {
      await deniedOnBoth(a, b, 'k');
      await a.reset({ policy: 'p', key: 'k' });
      await until('b heard the reset', async () => (await storeStats(b)).resets.applied === 1);
      await admittedByStore(b, 'k');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a check in flight on the other instance when it hears the reset: its answer (decided before) is not learned', async () => {
    const store = new MemoryStore({ prefix: 'mem2:' });
    // b's store calls are decided at once but answered only when released
    let hold = false;
    const held: Array<() => void> = [];
    const gated = Object.create(store) as Store;
    gated.decideWide = (keys, args, now) => {
      const answer = store.decideWide(keys, args, now);
      return hold ? new Promise((r) => held.push(() => r(answer))) : answer;
    };
    const a = await createLimiter({ policies: STRICT, store });
    const b = await createLimiter({ policies: STRICT, store: gated });
    try {
      expect((await a.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      expect((await a.check({ policy: 'p', cost: 1, key: 'k' })).allowed).toBe(true);
      hold = true;
      const inFlight = b.check({ policy: 'p', cost: 1, key: 'k' });
      await until('b\'s check decided', () => held.length === 1);
      await a.reset({ policy: 'p', key: 'k' });
      await until('b heard the reset', async () => (await storeStats(b)).resets.applied === 1);
      hold = false;
      held.shift()!();
      // decided before the reset: denied, as the store said
      expect((await inFlight).allowed).toBe(false);
      // but not learned: the next check goes to the store, which no longer holds the key
      await admittedByStore(b, 'k');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('what the other instance keeps for onStoreError: local (its last-known state) stays: a message cannot make a stall start the key fresh', async () => {
    const store = new MemoryStore({ prefix: 'mem3:' });
    const { store: flaky, fail } = flakyStore(store);
    const policies: Record<string, PolicySpec> = { p: { ...STRICT.p, onStoreError: 'local' } };
    const a = await createLimiter({ policies, store });
    const b = await createLimiter({ policies, store: flaky });
    try {
      await deniedOnBoth(a, b, 'k');
      // a message as anyone could publish it: b drops its denial, not what it knows of the key
      const chan = store.channel('mem3:resets', () => undefined);
      await chan.publish(JSON.stringify({ v: 1, origin: 'someone', policy: 'p', version: a.policies.get('p')!.version, key: 'k' }));
      await until('b heard it', async () => (await storeStats(b)).resets.applied === 1);
      await chan.close();
      fail(true);
      expect(await b.check({ policy: 'p', cost: 1, key: 'k' })).toMatchObject({ allowed: false, degraded: true, degradedBy: 'local' });
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
