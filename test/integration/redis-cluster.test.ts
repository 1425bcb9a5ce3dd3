/**
 * Redis Cluster: the strict and sync essentials against three masters the test starts
 * (test/helpers/redis-cluster.ts), with the keys of one batch spread over many slots.
 *
 * - strict: concurrent checks from two limiters over 64 keys admit exactly the limit per key; a policy with
 *   two limits (two legs, one slot); keys land on every master; no CROSSSLOT or other store error anywhere
 *   (the store's error counter stays 0, no decision is degraded); every key left has 0 < PTTL ≤ its bound.
 * - guarded: a guarded check (own key + guard key) is one atomic step in the guard's slot: the exact per
 *   tenant admissions of one ordered batch, mixed with unguarded checks in other slots.
 * - check library lost on every master (FUNCTION FLUSH; SCRIPT FLUSH does not touch it): decisions continue, no error.
 * - a reset through one limiter reaches the other on the cluster's pub/sub: its cached denials go.
 * - sync: two instances over 40 keys converge on the merged state; merge markers live in their keys' slots.
 * - config: `cluster` with `url`, or a malformed node, is a CONFIG error naming `redis.cluster`.
 * - CLI: `sluice serve --redis-cluster ...` answers a strict check from the cluster (runs the BUILT dist/).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { RedisStore } from '../../src/store/redis.js';
import { connected, insideWindow } from '../helpers/redis.js';
import { startCluster, type TestCluster } from '../helpers/redis-cluster.js';
import { send, spawnServe } from '../helpers/server.js';
import { readState } from '../helpers/state.js';

const HOUR = 3_600_000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

let c: TestCluster;
const open: Limiter[] = [];

beforeAll(async () => {
  c = await startCluster();
}, 60_000);
afterAll(async () => {
  await Promise.all(open.map((l) => l.close()));
  await c?.stop();
});

async function limiter(policies: Record<string, PolicySpec>, prefix: string, extra: { syncIntervalMs?: number } = {}): Promise<Limiter> {
  const l = await createLimiter({ policies, maxKeys: 4096, redis: { cluster: c.nodes, prefix, timeoutMs: 1000, ...extra } });
  open.push(l);
  await connected(l);
  return l;
}

/** The store's failed calls (a CROSSSLOT would be one) and its breaker: 0 and closed. */
async function expectNoStoreError(...ls: Limiter[]): Promise<void> {
  for (const l of ls) expect((await l.stats()).store).toMatchObject({ storeErrors: 0, breaker: 'closed', connected: true });
}

/** The master (index into c.clients) that serves `key`'s slot. */
async function masterOf(key: string): Promise<number> {
  const slot = (await c.clients[0].cluster('KEYSLOT', key)) as number;
  const slots = (await c.clients[0].cluster('SLOTS')) as unknown as Array<[number, number, [string, number]]>;
  const range = slots.find(([lo, hi]) => slot >= lo && slot <= hi)!;
  return c.ports.indexOf(Number(range[2][1]));
}

/**
 * Every key under `prefix` on every master with its PTTL, each checked against `bound(key)` (ms): 0 < PTTL ≤ bound.
 * A key the strict script wrote expires at its bound rounded up to the next whole second (lua/check.lua): those
 * callers pass `STRICT_SLACK`.
 */
/** How much later than its state matters the strict script lets a key expire: up to the next whole second. */
const STRICT_SLACK = 999;

async function expectTtls(prefix: string, bound: (key: string) => number, slackMs = 0): Promise<number> {
  const keys = await c.keysUnder(prefix);
  for (const { key, node } of keys) {
    const ttl = await c.clients[node].pttl(key);
    expect(ttl, `${key}: PTTL ${ttl}`).toBeGreaterThan(0);
    expect(ttl, `${key}: PTTL ${ttl}`).toBeLessThanOrEqual(bound(key) + slackMs);
  }
  return keys.length;
}

const strict = (spec: Record<string, unknown>): PolicySpec => ({ ...spec, consistency: 'strict', onStoreError: 'closed' }) as PolicySpec;

describe('strict mode on a Redis Cluster', () => {
  it('admits exactly the limit per key over 64 keys spread across every master, from two limiters at once', async () => {
    const policies = {
      // 5 tokens an hour: nothing refills during the test (one token per 720 s)
      tb: strict({ algorithm: 'token_bucket', limit: 5, period: '1h' }),
      // two limits: two legs of one check, one hash tag, decided together
      two: strict({ limits: [{ algorithm: 'token_bucket', limit: 4, period: '1h' }, { algorithm: 'gcra', limit: 100, period: '1h', burst: 7 }] }),
    };
    const a = await limiter(policies, 'cs1:');
    const b = await limiter(policies, 'cs1:');
    const keys = Array.from({ length: 64 }, (_, i) => `tenant-${i}`);
    // every check issued in one turn per limiter: one batch each, split by slot
    const all = [a, b].flatMap((l) => keys.flatMap((key) => [
      ...Array.from({ length: 6 }, () => l.check({ policy: 'tb', key, cost: 1 }).then((d) => ({ policy: 'tb', key, d }))),
      ...Array.from({ length: 3 }, () => l.check({ policy: 'two', key, cost: 1 }).then((d) => ({ policy: 'two', key, d }))),
    ]));
    const results = await Promise.all(all);
    expect(results.filter((r) => r.d.degraded === true)).toStrictEqual([]);
    const admitted = new Map<string, number>();
    for (const r of results) if (r.d.allowed) admitted.set(`${r.policy}/${r.key}`, (admitted.get(`${r.policy}/${r.key}`) ?? 0) + 1);
    for (const key of keys) {
      expect(admitted.get(`tb/${key}`) ?? 0, `tb/${key}`).toBe(5);
      expect(admitted.get(`two/${key}`) ?? 0, `two/${key}`).toBe(4);
    }
    // the two limiters' batches interleave, but each decision saw the other's spending
    expect(results.filter((r) => r.policy === 'tb' && !r.d.allowed).every((r) => r.d.remaining === 0)).toBe(true);
    await expectNoStoreError(a, b);

    // 64 tb keys + 2 × 64 `two` keys, on all three masters, each where its slot lives
    const stored = await c.keysUnder('cs1:');
    expect(stored.length).toBe(3 * 64);
    expect(new Set(stored.map((s) => s.node)).size).toBe(3);
    for (const s of stored.slice(0, 12)) expect(await masterOf(s.key), s.key).toBe(s.node);
    // a bucket spent to empty matters until full again: 5 tokens at 720 s each = 3,600,000 ms; `two`: its
    // bucket 4 × 900 s, its gcra 4 × 36 s
    const n = await expectTtls('cs1:', (k) => (k.includes('{tb:') ? HOUR : k.endsWith(':0') ? HOUR : 4 * 36_000), STRICT_SLACK);
    expect(n).toBe(3 * 64);
  }, 30_000);

  it('decides a guarded check (own key + guard key) atomically in the guard\'s slot, in batch order, beside unguarded checks', async () => {
    const policies = {
      free: strict({ algorithm: 'token_bucket', limit: 3, period: '1h', guard: 'global' }),
      global: strict({ algorithm: 'token_bucket', limit: 20, period: '1h' }),
      plain: strict({ algorithm: 'fixed_window', limit: 2, period: '1h' }),
    };
    const l = await limiter(policies, 'cs2:');
    const tenants = Array.from({ length: 10 }, (_, i) => `t${i}`);
    // one turn: 4 checks per tenant in tenant order, each followed by unguarded checks on other keys
    const pending: Array<Promise<Decision>> = [];
    const plain: Array<Promise<Decision>> = [];
    for (const t of tenants) {
      for (let i = 0; i < 4; i++) {
        pending.push(l.check({ policy: 'free', key: t, cost: 1 }));
        plain.push(l.check({ policy: 'plain', key: `${t}-${i % 2}`, cost: 1 }));
      }
    }
    const ds = await Promise.all(pending);
    const perTenant = tenants.map((_, i) => ds.slice(4 * i, 4 * i + 4).filter((d) => d.allowed).length);
    // each tenant may spend 3, the guard 20 in all: the first six tenants get 3, the seventh 2, the rest none
    expect(perTenant).toStrictEqual([3, 3, 3, 3, 3, 3, 2, 0, 0, 0]);
    expect(ds.filter((d) => d.degraded === true)).toStrictEqual([]);
    // the binding limit names the guard once it is spent
    expect(ds[4 * 6 + 3]).toMatchObject({ allowed: false, policy: 'global', remaining: 0 });
    expect(ds[4 * 9]).toMatchObject({ allowed: false, policy: 'global' });
    // each `plain` key got 2 checks (i % 2), both within its limit of 2
    expect((await Promise.all(plain)).every((d) => d.allowed && d.degraded === undefined)).toBe(true);
    // the guard itself, read directly: spent
    expect(await l.check({ policy: 'global', key: '*', cost: 0 })).toMatchObject({ allowed: true, remaining: 0 });
    await expectNoStoreError(l);

    const stored = await c.keysUnder('cs2:');
    const guardKey = stored.find((s) => /^cs2:\{global:[^}]*:\*\}:0$/.test(s.key));
    expect(guardKey).toBeDefined();
    const own = stored.filter((s) => s.key.includes('{free:'));
    expect(own.length).toBe(7); // tenants 7..9 were denied: nothing written for them
    for (const s of own) {
      // tagged by the guard, on the guard's master
      expect(s.key.startsWith(guardKey!.key.slice(0, -':0'.length) + '{free:'), s.key).toBe(true);
      expect(s.node).toBe(guardKey!.node);
    }
    const plainKeys = stored.filter((s) => s.key.includes('{plain:'));
    expect(plainKeys.length).toBe(20);
    expect(new Set(plainKeys.map((s) => s.node)).size).toBe(3);
    // buckets until full again (≤ 1 h); fixed windows until the hour ends (≤ 1 h)
    expect(await expectTtls('cs2:', () => HOUR, STRICT_SLACK)).toBe(1 + 7 + 20);
  }, 30_000);

  it('carries on without an error after every master lost its check library (FUNCTION FLUSH) and its script cache (SCRIPT FLUSH)', async () => {
    const l = await limiter({ p: strict({ algorithm: 'fixed_window', limit: 3, period: '1h' }) }, 'cs3:');
    const keys = Array.from({ length: 30 }, (_, i) => `k${i}`);
    const round = async (): Promise<number[]> =>
      (await Promise.all(keys.map((key) => l.check({ policy: 'p', key, cost: 1 })))).map((d) => (d.degraded ? -1 : d.remaining));
    expect(await round()).toStrictEqual(keys.map(() => 2));
    await Promise.all(c.clients.map(async (r) => {
      await r.script('FLUSH');
      await r.call('FUNCTION', 'FLUSH');
    }));
    const loads = (): Promise<number[]> => Promise.all(c.clients.map(async (r) =>
      Number(/cmdstat_function\|load:calls=(\d+)/.exec(await r.info('commandstats'))?.[1] ?? 0)));
    const before = await loads();
    expect(await round()).toStrictEqual(keys.map(() => 1));
    // every master answered "Function not found" and was given the library again, once
    const after = await loads();
    expect(after.map((n, i) => n - before[i]), `FUNCTION LOAD calls ${before} -> ${after}`).toStrictEqual(c.clients.map(() => 1));
    expect(await round()).toStrictEqual(keys.map(() => 0));
    await expectNoStoreError(l);
    expect(await expectTtls('cs3:', () => HOUR, STRICT_SLACK)).toBe(30);
  }, 30_000);

  it('a reset through one limiter reaches the other (the reset channel on the cluster): its cached denials go', async () => {
    const policies = { p: strict({ algorithm: 'fixed_window', limit: 1, period: '1h' }) };
    const [a, b] = [await limiter(policies, 'cs4:'), await limiter(policies, 'cs4:')];
    const keys = Array.from({ length: 12 }, (_, i) => `k${i}`);
    const answers = async (l: Limiter): Promise<number> => (await l.stats()).store!.overLimitAnswers;
    // both subscribed (a subscriber connects to one master: the count is summed over them)
    const subscribers = async (): Promise<number> => (await Promise.all(c.clients.map(async (r) =>
      Number(((await r.call('PUBSUB', 'NUMSUB', 'cs4:resets')) as [string, number])[1])))).reduce((x, y) => x + y, 0);
    const subscribedBy = Date.now() + 10_000;
    while ((await subscribers()) < 2 && Date.now() < subscribedBy) await sleep(5);
    expect(await subscribers()).toBe(2);
    for (const key of keys) expect((await a.check({ policy: 'p', key, cost: 1 })).allowed).toBe(true);
    for (const l of [a, b]) {
      // each learns the denials from Redis, then answers them itself
      for (const key of keys) expect((await l.check({ policy: 'p', key, cost: 1 })).allowed).toBe(false);
      const before = await answers(l);
      for (const key of keys) expect((await l.check({ policy: 'p', key, cost: 1 })).allowed).toBe(false);
      expect(await answers(l)).toBe(before + keys.length);
    }
    for (const key of keys) await a.reset({ policy: 'p', key });
    const end = Date.now() + 10_000;
    while ((await b.stats()).store!.resets.applied < keys.length && Date.now() < end) await sleep(5);
    expect((await b.stats()).store!.resets.applied).toBe(keys.length);
    const before = await answers(b);
    for (const key of keys) expect((await b.check({ policy: 'p', key, cost: 1 })).allowed).toBe(true);
    expect(await answers(b)).toBe(before);
    await expectNoStoreError(a, b);
  }, 30_000);
});

describe('a master lost (SIGKILL, no replica), then back', () => {
  it('decides the checks of the other masters, answers those of the lost one under onStoreError, and is exact again once it is back', async () => {
    const policies = {
      closed: strict({ algorithm: 'fixed_window', limit: 3, period: '1h' }),
      open: { algorithm: 'fixed_window', limit: 3, period: '1h', consistency: 'strict', onStoreError: 'open' } as PolicySpec,
    };
    const l = await limiter(policies, 'ck1:');
    // one hour's fixed windows (Redis's clock), their counts asserted exactly over a kill, a restart and up to
    // 20 s of waiting for the slot map: started well inside an hour, so no count resets or key expires meanwhile
    await insideWindow(c.clients[0], HOUR, 30_000);
    const keys = Array.from({ length: 30 }, (_, i) => `k${i}`);
    const batch = (policy: string): Promise<Decision[]> => Promise.all(keys.map((key) => l.check({ policy, key, cost: 1 })));
    expect((await batch('closed')).map((d) => [d.allowed, d.remaining, d.degraded])).toStrictEqual(keys.map(() => [true, 2, undefined]));
    expect((await batch('open')).map((d) => [d.allowed, d.remaining, d.degraded])).toStrictEqual(keys.map(() => [true, 2, undefined]));

    // where each (policy, key) lives
    const nodeOf = new Map((await c.keysUnder('ck1:')).map((s) => [`${/\{(\w+):/.exec(s.key)![1]}/${/:(k\d+)\}/.exec(s.key)![1]}`, s.node]));
    expect(nodeOf.size).toBe(60);
    const victim = nodeOf.get('closed/k0')!;
    const lost = (policy: string, key: string): boolean => nodeOf.get(`${policy}/${key}`) === victim;
    expect(keys.filter((k) => lost('closed', k)).length).toBeGreaterThan(0);
    expect(keys.filter((k) => !lost('closed', k)).length).toBeGreaterThan(0);

    await c.kill(victim);
    try {
      const closed = await batch('closed');
      expect(closed.map((d) => [d.allowed, d.remaining, d.retryAfterMs, d.degraded])).toStrictEqual(keys.map((k) =>
        (lost('closed', k) ? [false, 0, 1000, true] : [true, 1, 0, undefined])));
      const open = await batch('open');
      expect(open.map((d) => [d.allowed, d.degraded])).toStrictEqual(keys.map((k) => (lost('open', k) ? [true, true] : [true, undefined])));
      expect(open.filter((d) => d.degraded === undefined).map((d) => d.remaining)).toStrictEqual(keys.filter((k) => !lost('open', k)).map(() => 1));
      expect((await l.stats()).store!.storeErrors).toBeGreaterThanOrEqual(2);
    } finally {
      await c.restart(victim);
    }

    // back (the client re-reads the slot map every second): the lost master's keys start over (no
    // persistence), the others kept their counts, which the outage's failed calls did not touch
    const deadline = Date.now() + 20_000;
    while ((await Promise.all(keys.map((key) => l.check({ policy: 'open', key, cost: 0 })))).some((x) => x.degraded === true)) {
      if (Date.now() > deadline) throw new Error('never decided in Redis again within 20 s');
      await sleep(50);
    }
    const after = await batch('closed');
    expect(after.map((d) => [d.allowed, d.remaining, d.degraded])).toStrictEqual(keys.map((k) =>
      (lost('closed', k) ? [true, 2, undefined] : [true, 0, undefined])));
  }, 60_000 + 30_000); // and insideWindow's longest wait
});

describe('sync mode on a Redis Cluster', () => {
  /** Waits (up to 5 s) until `l` has merged at least `n` times with nothing pending. */
  async function merged(l: Limiter, n: number): Promise<void> {
    const end = Date.now() + 5000;
    for (;;) {
      const s = (await l.stats()).store?.sync;
      if ((s?.merges ?? 0) >= n && s?.pendingKeys === 0) return;
      if (Date.now() > end) throw new Error(`no merge #${n} within 5 s: ${JSON.stringify(s)}`);
      await sleep(10);
    }
  }

  it('two instances over 40 keys (and a guard) across every master converge on the merged state', async () => {
    const policies: Record<string, PolicySpec> = {
      // nothing refills during the test: one token per 360 s, and per 86.4 s for the guard
      p: { algorithm: 'token_bucket', limit: 10, period: '1h', consistency: 'sync', guard: 'g' },
      g: { algorithm: 'token_bucket', limit: 1000, period: '1d', consistency: 'sync' },
    };
    const a = await limiter(policies, 'cy1:', { syncIntervalMs: 20 });
    const b = await limiter(policies, 'cy1:', { syncIntervalMs: 20 });
    const keys = Array.from({ length: 40 }, (_, i) => `key-${i}`);
    const spend = async (l: Limiter, each: number): Promise<void> => {
      const ds = await Promise.all(keys.flatMap((key) => Array.from({ length: each }, () => l.check({ policy: 'p', key, cost: 1 }))));
      expect(ds.every((d) => d.allowed)).toBe(true);
    };
    await spend(a, 4);
    await merged(a, 1);
    await spend(b, 3); // b decides on its own view (10 each), then learns a's 4
    await merged(b, 1);
    for (const key of keys) expect((await b.check({ policy: 'p', key, cost: 0 })).remaining, key).toBe(3);
    await spend(a, 1); // a learns b's 3 at this merge
    await merged(a, 2);
    for (const key of keys) expect((await a.check({ policy: 'p', key, cost: 0 })).remaining, key).toBe(2);
    // the guard saw every admitted check of both: 40 × 8
    expect((await a.check({ policy: 'g', key: '*', cost: 0 })).remaining).toBe(1000 - 40 * 8);
    await expectNoStoreError(a, b);
    expect((await a.stats()).store?.sync).toMatchObject({ failures: 0, dropped: 0 });
    expect((await b.stats()).store?.sync).toMatchObject({ failures: 0, dropped: 0 });

    // the stored state: 8 tokens spent per key (x = tokens·P, refill of a few seconds at most)
    const stored = await c.keysUnder('cy1:');
    const state = stored.filter((s) => s.key.startsWith('cy1:{p:'));
    expect(state.length).toBe(40);
    expect(new Set(state.map((s) => s.node)).size).toBe(3);
    for (const s of state) {
      const [x] = (await readState(c.clients[s.node], s.key))!.split(' ').map(Number);
      expect(Math.floor(x / HOUR), s.key).toBe(2);
    }
    // merge markers: one per slot part of each merge, in that part's slot, expiring after 10 minutes
    const markers = stored.filter((s) => s.key.startsWith('cy1:merged:'));
    expect(markers.length).toBeGreaterThan(0);
    for (const m of markers) expect(await masterOf(m.key), m.key).toBe(m.node);
    // state keys: until refilled to full, 8 tokens at 360 s each (≤ 2,880,000 ms); the guard: 320 × 86.4 s
    const n = await expectTtls('cy1:', (k) => (k.startsWith('cy1:merged:') ? 600_000 : k.includes('{g:') ? 320 * 86_400 : 8 * 360_000));
    expect(n).toBe(40 + 1 + markers.length);
  }, 30_000);
});

describe('Redis Cluster configuration', () => {
  it('refuses cluster with url, an empty list and a malformed node, naming redis.cluster', async () => {
    const policies = { p: strict({ algorithm: 'fixed_window', limit: 1, period: '1h' }) };
    await expect(createLimiter({ policies, redis: { url: 'redis://127.0.0.1:1', cluster: c.nodes } }))
      .rejects.toMatchObject({ code: 'CONFIG', field: 'redis.cluster' });
    await expect(createLimiter({ policies, redis: { cluster: [] } })).rejects.toMatchObject({ code: 'CONFIG', field: 'redis.cluster' });
    await expect(createLimiter({ policies, redis: { cluster: ['127.0.0.1'] } }))
      .rejects.toThrow('redis: redis.cluster: each node must be host:port with a port in 1..65535 (got "127.0.0.1")');
  });

  it('holds no small call behind another (redis.holdUnder 0), and refuses another value, naming redis.holdUnder', async () => {
    const stores = [RedisStore.create({ cluster: c.nodes }), RedisStore.create({ cluster: c.nodes, holdUnder: 0 })];
    try {
      expect(stores.map((st) => [st.holdUnder, st.pipelineCalls])).toEqual([[0, 1], [0, 1]]);
    } finally {
      await Promise.all(stores.map((st) => st.close()));
    }
    const policies = { p: strict({ algorithm: 'fixed_window', limit: 1, period: '1h' }) };
    await expect(createLimiter({ policies, redis: { cluster: c.nodes, holdUnder: 16 } }))
      .rejects.toMatchObject({ code: 'CONFIG', field: 'redis.holdUnder' });
  });

  it('sluice serve --redis-cluster answers a strict check from the cluster', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-cluster-cli-'));
    const file = path.join(dir, 'policies.yaml');
    writeFileSync(file, 'policies:\n  s:\n    algorithm: fixed_window\n    limit: 2\n    period: 1h\n    consistency: strict\n    onStoreError: closed\n');
    let proc: Awaited<ReturnType<typeof spawnServe>> | undefined;
    try {
      proc = await spawnServe(['--config', file, '--redis-cluster', c.nodes.join(',')]);
      // the connection comes up after the listening socket: peek until the answer comes from Redis
      const deadline = Date.now() + 10_000;
      while ((await send(`${proc.url}/v1/check?policy=s&key=warm&cost=0`)).json.degraded === true) {
        if (Date.now() > deadline) throw new Error('sluice serve never decided in the cluster');
        await sleep(20);
      }
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push((await send(`${proc.url}/v1/check?policy=s&key=cli&cost=1`)).json);
      expect(answers.map((j) => [j.allowed, j.remaining, j.degraded])).toStrictEqual([[true, 1, undefined], [true, 0, undefined], [false, 0, undefined]]);
      // the state is in the cluster, where its slot lives
      const [stored] = (await c.keysUnder('sluice:')).filter((s) => s.key.includes(':cli}'));
      expect(stored).toBeDefined();
      expect(await masterOf(stored.key)).toBe(stored.node);
      expect(await readState(c.clients[stored.node], stored.key)).toMatch(/^2 0 \d+$/);
    } finally {
      await proc?.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
