/**
 * Strict mode against a real redis-server (a database of its own per block on the run's shared server,
 * test/helpers/redis.ts sharedRedis), in real time with Redis's clock (`TIME`) unless a test says otherwise.
 *
 * - Case 03: every key sluice writes has an expiry (PTTL > 0, never −1), no longer than the time its state
 *   still matters, up to the next whole second (the script rounds it up: the case allows 1 s), and no shorter;
 *   a peek writes nothing; old policy versions expire too; after 2·P + 2 s no key
 *   remains. (Periods of 2 s instead of the case's 10 s, to keep the wait short.)
 * - Case 05: the fixed window's expiry is the window end, never pushed back by later hits; the allow/deny
 *   pattern of the case's table for the three algorithms, in real time (scaled: P = 2 s, one call every
 *   600 ms, starting within 50 ms after a multiple of P on Redis's clock).
 * - Case 16: awkward keys stay independent in Redis; every leg of one check shares one non-empty hash tag.
 * - Skewed clocks: two limiters whose own clocks differ by 5 s agree when Redis's clock decides.
 * - Case 14 across processes: 4 `sluice serve --redis` instances, 200 concurrent checks for one key →
 *   exactly the limit admitted; the same with `consistency: local` admits one quota per instance.
 *
 * Tests that depend on where Redis's clock is within a window wait until they are safely inside one.
 * `sluice serve` runs the BUILT CLI (dist/): run `npm run build` first (npm test does).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { loadCases } from '../helpers/cases.js';
import { sharedRedis, type SharedRedis, redisNow, insideWindow, keysUnder } from '../helpers/redis.js';
import { send, serveStrict, type ServeProcess } from '../helpers/server.js';
import { readState } from '../helpers/state.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];
type RedisClient = SharedRedis['client'];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));



/** Waits until Redis's clock is 5..`maxLateMs` ms past a multiple of `period`. */
async function atWindowStart(client: RedisClient, period: number, maxLateMs: number): Promise<number> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const now = await redisNow(client);
    await sleep(period - (now % period) + 5);
    const start = await redisNow(client);
    if (start % period <= maxLateMs) return start;
  }
  throw new Error(`could not start within ${maxLateMs} ms of a window edge`);
}


/** The hash tag of a store key: what stands between its first `{` and the next `}`. */
function tagOf(key: string): string | null {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close < 0 ? null : key.slice(open + 1, close);
}

/** Waits until the limiter's Redis connection is up (before that, checks take their failure rule). */
async function connected(limiter: Limiter): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await limiter.stats()).store?.connected) {
    if (Date.now() > deadline) throw new Error('limiter did not connect to Redis within 5 s');
    await sleep(5);
  }
}

function strict(spec: Record<string, unknown>): Record<string, unknown> {
  // closed: a store failure shows up as a degraded denial instead of silently deciding locally
  return { ...spec, consistency: 'strict', onStoreError: 'closed' };
}

async function strictLimiter(
  r: SharedRedis,
  policies: Record<string, unknown>,
  o: { prefix: string; clock?: () => number; redisClock?: 'redis' | 'limiter' },
): Promise<Limiter> {
  const limiter = await createLimiter({
    policies: policies as Policies,
    ...(o.clock ? { clock: o.clock } : {}),
    maxKeys: 4096,
    redis: { url: r.url, prefix: o.prefix, timeoutMs: 1000, clock: o.redisClock ?? 'redis' },
  });
  try {
    await connected(limiter);
  } catch (e) {
    await limiter.close();
    throw e;
  }
  return limiter;
}

function brief(d: Decision): string {
  return d.allowed ? `allow r=${d.remaining}` : `deny r=${d.remaining}`;
}

// ---------------------------------------------------------------------------------------------------------

describe('strict mode, one Redis', () => {
  let r: SharedRedis;
  const open: Limiter[] = [];
  const track = (l: Limiter): Limiter => (open.push(l), l);

  beforeAll(async () => {
    r = await sharedRedis();
  });
  afterAll(async () => {
    await Promise.all(open.map((l) => l.close()));
    await r?.stop();
  });

  // ------------------------------------------------------------------------------------------ case 03
  // cases 03 and 05 wait on Redis's clock far more than they compute: they run at once (their own prefixes and
  // limiters), each asserting with its own test's expect
  it.concurrent('case 03: every key has an expiry no longer than its state matters and no shorter; a peek writes nothing; all gone after 2·P + 2 s', async ({ expect }) => {
    const P = 2000;
    const prefix = 'c03:';
    const algorithms = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'] as const;
    const policies = Object.fromEntries(algorithms.map((a) => [a, strict({ algorithm: a, limit: 5, period: P })]));
    const limiter = track(await strictLimiter(r, policies, { prefix }));

    for (const algorithm of algorithms) {
      // the bounds below assume both checks (and the PTTL reads) fall in one window
      await insideWindow(r.client, P, 800);
      const sent = performance.now();
      const d1 = await limiter.check({ policy: algorithm, key: 'k1', cost: 1 });
      const d3 = await limiter.check({ policy: algorithm, key: 'k3', cost: 3 });
      expect([brief(d1), brief(d3)], algorithm).toStrictEqual(['allow r=4', 'allow r=2']);
      expect(d1.degraded ?? d3.degraded, algorithm).toBeUndefined();

      const keys = (await keysUnder(r.client, prefix)).filter((k) => k.includes(`{${algorithm}:`));
      const ttls = await Promise.all(keys.map((k) => r.client.pttl(k)));
      const elapsed = performance.now() - sent;
      for (const [name, d] of [['k1', d1], ['k3', d3]] as const) {
        // the time this state still matters, per the case: window end (fixed), end of the NEXT window
        // (sliding), time to refill to full (buckets): in every case the decision's resetAfterMs
        const bound = d.resetAfterMs;
        if (algorithm === 'fixed_window') expect(bound).toBeLessThanOrEqual(P);
        if (algorithm === 'sliding_window') expect(bound).toBeGreaterThan(P);
        if (algorithm === 'sliding_window') expect(bound).toBeLessThanOrEqual(2 * P);
        if (algorithm === 'token_bucket' || algorithm === 'gcra') expect(bound).toBe(name === 'k1' ? 400 : 1200);
        const i = keys.findIndex((k) => k.endsWith(`:${name}}:0`));
        const where = `${algorithm} ${name}: PTTL ${ttls[i]}, state matters for ${bound} ms, ${elapsed.toFixed(1)} ms elapsed`;
        if (i < 0) {
          // gone: only acceptable if the machine was so slow that its time was up
          expect(elapsed, where).toBeGreaterThanOrEqual(bound - 2);
          continue;
        }
        expect(ttls[i], where).toBeGreaterThan(0);
        // the script rounds the expiry up to the next whole second: at most 999 ms past the bound (the case
        // allows 1 000), never before it
        expect(ttls[i], where).toBeLessThanOrEqual(bound + 999);
        expect(ttls[i], where).toBeGreaterThanOrEqual(bound - Math.ceil(elapsed) - 2);
      }
      expect(keys.length, `${algorithm}: no other key (${keys.join(', ')})`).toBeLessThanOrEqual(2);

      // a peek on a fresh key writes nothing
      const peek = await limiter.check({ policy: algorithm, key: 'k0', cost: 0 });
      expect(peek.allowed).toBe(true);
      expect((await keysUnder(r.client, prefix)).filter((k) => k.includes(`{${algorithm}:`) && k.includes(':k0}'))).toStrictEqual([]);
    }

    // a new policy version (numbers changed): its keys, and the old version's, all expire
    const v2 = track(await strictLimiter(r, { fixed_window: strict({ algorithm: 'fixed_window', limit: 6, period: P }) }, { prefix }));
    // both versions' keys written in one window (an old fixed_window key written earlier may be gone already:
    // its window ended, which is its expiry)
    await insideWindow(r.client, P, 800);
    expect(brief(await limiter.check({ policy: 'fixed_window', key: 'kv', cost: 1 }))).toBe('allow r=4');
    expect(brief(await v2.check({ policy: 'fixed_window', key: 'kv', cost: 1 }))).toBe('allow r=5');
    const fixed = (await keysUnder(r.client, prefix)).filter((k) => k.includes(':kv}') && k.includes('{fixed_window:'));
    expect(new Set(fixed.map(tagOf)).size, `two versions of fixed_window/kv: ${fixed.join(', ')}`).toBe(2);
    for (const key of await keysUnder(r.client, prefix)) {
      const ttl = await r.client.pttl(key);
      expect(ttl === -2 || ttl > 0, `${key}: PTTL ${ttl}`).toBe(true); // −2: expired between SCAN and PTTL
    }

    // nothing sent for 2·P + 2 s: nothing left
    await sleep(2 * P + 2000);
    expect(await keysUnder(r.client, prefix)).toStrictEqual([]);
  }, 40_000);

  // ------------------------------------------------------------------------------------------ case 05
  it.concurrent('case 05 in real time: the fixed window ends at its end whatever the traffic (PTTL = window end − now ± 50 ms), and the table\'s pattern', async ({ expect }) => {
    // The case's table, scaled by 1/5 (P = 10 s → 2 s, a call every 3 s → 600 ms): every estimate and token
    // count is the same at the scaled times, so allowed and remaining are too.
    const P = 2000;
    const STEP = 600;
    const prefix = 'c05:';
    const limiter = track(await strictLimiter(r, {
      fw: strict({ algorithm: 'fixed_window', limit: 3, period: P }),
      sw: strict({ algorithm: 'sliding_window', limit: 3, period: P }),
      tb: strict({ algorithm: 'token_bucket', limit: 3, period: P }),
    }, { prefix }));
    const expected = {
      fw: ['allow r=2', 'allow r=1', 'allow r=0', 'deny r=0', 'allow r=2', 'allow r=1', 'allow r=0', 'allow r=2', 'allow r=1'],
      sw: ['allow r=2', 'allow r=1', 'allow r=0', 'deny r=0', 'deny r=0', 'allow r=0', 'allow r=0', 'allow r=0', 'deny r=0'],
      tb: ['allow r=2', 'allow r=1', 'allow r=1', 'allow r=1', 'allow r=1', 'allow r=1', 'allow r=1', 'allow r=1', 'allow r=1'],
    };
    const got: Record<'fw' | 'sw' | 'tb', string[]> = { fw: [], sw: [], tb: [] };
    const pttl: Array<{ ttl: number; want: number }> = [];

    const start = await atWindowStart(r.client, P, 50);
    const t0 = performance.now();
    for (let i = 0; i < 9; i++) {
      await sleep(t0 + i * STEP - performance.now());
      // one turn: the three checks go to Redis in one script call
      const [fw, sw, tb] = await Promise.all((['fw', 'sw', 'tb'] as const).map((p) => limiter.check({ policy: p, key: 'k', cost: 1 })));
      got.fw.push(brief(fw));
      got.sw.push(brief(sw));
      got.tb.push(brief(tb));
      const [fwKey] = (await keysUnder(r.client, prefix)).filter((k) => k.includes('{fw:'));
      expect(fwKey, `call ${i}: the fixed window's key exists`).toBeDefined();
      // TIME and PTTL in one transaction: the same instant
      const res = (await r.client.multi().time().pttl(fwKey).exec())!;
      const [s, us] = res[0][1] as [string, string];
      const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
      pttl.push({ ttl: res[1][1] as number, want: (Math.floor(now / P) + 1) * P - now });
    }
    const late = (await redisNow(r.client)) - start;
    expect(late, 'the run took about 8·STEP').toBeLessThan(9 * STEP);

    expect(got).toStrictEqual(expected);
    for (const [i, p] of pttl.entries()) {
      expect(Math.abs(p.ttl - p.want), `call ${i}: PTTL ${p.ttl}, window end − now ${p.want}`).toBeLessThanOrEqual(50);
    }
    // not pushed back: after the 2nd and 3rd calls of a window the key has ~1400 and ~800 ms left, not ~2000
    expect(pttl[1].ttl).toBeLessThan(1500);
    expect(pttl[2].ttl).toBeLessThan(900);
  }, 20_000);

  // ------------------------------------------------------------------------------------------ case 16
  it('case 16: awkward keys are independent in Redis, each check\'s legs share one non-empty hash tag', async () => {
    const prefix = 'c16:';
    const c = loadCases().find((x) => x.id === '16-keys/fixed_window')!;
    const valid = [...new Set(c.calls.filter((k) => !k.expectError).map((k) => k.key as string))];
    const invalid = [...new Set(c.calls.filter((k) => k.expectError).map((k) => k.key as string))];
    expect(valid.length).toBeGreaterThan(30);
    const limiter = track(await strictLimiter(r, {
      fw: strict({ algorithm: 'fixed_window', limit: 2, period: 60_000 }),
      tb: strict({ algorithm: 'token_bucket', limit: 2, period: 60_000 }),
      // two legs per check
      both: strict({ limits: [{ algorithm: 'fixed_window', limit: 2, period: 60_000 }, { algorithm: 'token_bucket', limit: 2, period: 60_000 }] }),
    }, { prefix }));
    await insideWindow(r.client, 60_000, 10_000);

    const seenTags = new Set<string>();
    let before = new Set<string>();
    for (const key of valid) {
      for (const policy of ['fw', 'tb', 'both']) {
        const ds = [];
        for (let i = 0; i < 3; i++) ds.push(await limiter.check({ policy, key, cost: 1 }));
        expect(ds.map(brief), `${policy} ${JSON.stringify(key)}`).toStrictEqual(['allow r=1', 'allow r=0', 'deny r=0']);
        expect(ds.every((d) => d.degraded === undefined)).toBe(true);

        const now = await keysUnder(r.client, prefix);
        const added = now.filter((k) => !before.has(k));
        before = new Set(now);
        const where = `${policy} ${JSON.stringify(key)}: new keys ${JSON.stringify(added)}`;
        expect(added.length, where).toBe(policy === 'both' ? 2 : 1);
        const tags = added.map(tagOf);
        for (const [i, k] of added.entries()) {
          expect(tags[i], where).toBeTruthy();
          // the whole key is prefix{tag}:index: nothing of the key leaks outside the tag
          expect(k, where).toBe(`${prefix}{${tags[i]}}:${i}`);
        }
        expect(new Set(tags).size, `${where}: one tag for every leg of the check`).toBe(1);
        expect(seenTags.has(tags[0]!), `${where}: a tag no other key has`).toBe(false);
        seenTags.add(tags[0]!);
      }
    }
    for (const key of invalid) {
      await expect(limiter.check({ policy: 'fw', key, cost: 1 }), JSON.stringify(key).slice(0, 40)).rejects.toThrow(/key/);
    }
  }, 30_000);

  it('case 16: compositions that could collide do not share state (policy+key, descriptor tuples)', async () => {
    const prefix = 'c16b:';
    const fw = { algorithm: 'fixed_window', limit: 2, period: 60_000 };
    const limiter = track(await strictLimiter(r, {
      ab: strict(fw),
      a: strict(fw),
      d: strict({ ...fw, descriptors: ['x', 'y'] }),
    }, { prefix }));
    await insideWindow(r.client, 60_000, 10_000);
    const run = async (policy: string, what: { key?: string; descriptors?: Record<string, string> }): Promise<string> =>
      brief(await limiter.check({ policy, cost: 1, ...what }));
    expect(await run('ab', { key: 'c' })).toBe('allow r=1');
    expect(await run('ab', { key: 'c' })).toBe('allow r=0');
    expect(await run('a', { key: 'bc' })).toBe('allow r=1');
    expect(await run('a', { key: 'bc' })).toBe('allow r=0');
    expect(await run('ab', { key: 'c' })).toBe('deny r=0');
    expect(await run('a', { key: 'bc' })).toBe('deny r=0');
    expect(await run('d', { descriptors: { x: 'a:b', y: 'c' } })).toBe('allow r=1');
    expect(await run('d', { descriptors: { x: 'a', y: 'b:c' } })).toBe('allow r=1');
    expect(await run('d', { descriptors: { x: 'a:b', y: 'c' } })).toBe('allow r=0');
    expect(await run('d', { descriptors: { x: 'a', y: 'b:c' } })).toBe('allow r=0');
    expect(new Set((await keysUnder(r.client, prefix)).map(tagOf)).size).toBe(4);
  });

  // ------------------------------------------------------------------------------------------ skewed clocks
  it('skewed clocks: two limiters 5 s apart agree when Redis\'s clock decides', async () => {
    const prefix = 'skew:';
    const policies = {
      fw: strict({ algorithm: 'fixed_window', limit: 5, period: 60_000 }),
      tb: strict({ algorithm: 'token_bucket', limit: 5, period: 10_000 }),
    };
    const a = track(await strictLimiter(r, policies, { prefix, clock: () => Date.now() }));
    const b = track(await strictLimiter(r, policies, { prefix, clock: () => Date.now() + 5000 }));
    await insideWindow(r.client, 60_000, 10_000);
    for (const policy of ['fw', 'tb']) {
      const ds: Decision[] = [];
      for (let i = 0; i < 7; i++) ds.push(await (i % 2 === 0 ? a : b).check({ policy, key: 'k', cost: 1 }));
      expect(ds.map(brief), policy).toStrictEqual(['allow r=4', 'allow r=3', 'allow r=2', 'allow r=1', 'allow r=0', 'deny r=0', 'deny r=0']);
      // the reset times come from one clock: consecutive answers of the two limiters differ by the few ms between
      // them, not by the 5 s between their clocks
      for (let i = 1; i < 5; i++) expect(Math.abs(ds[i].resetAfterMs - ds[i - 1].resetAfterMs), `${policy} #${i}`).toBeLessThan(2100);
      if (policy === 'fw') for (let i = 1; i < 7; i++) expect(Math.abs(ds[i].resetAfterMs - ds[i - 1].resetAfterMs)).toBeLessThan(100);
      // b's clock 5 s ahead would have refilled 2.5 tokens of the bucket: Redis's clock did not
      expect(ds[5].retryAfterMs, policy).toBeGreaterThan(policy === 'fw' ? 0 : 1500);
    }

    // why the Redis clock: with each limiter's own clock, b (5 s ahead) sees the bucket refilled
    const la = track(await strictLimiter(r, policies, { prefix: 'skew-limiter:', clock: () => Date.now(), redisClock: 'limiter' }));
    const lb = track(await strictLimiter(r, policies, { prefix: 'skew-limiter:', clock: () => Date.now() + 5000, redisClock: 'limiter' }));
    for (let i = 0; i < 5; i++) await la.check({ policy: 'tb', key: 'k', cost: 1 });
    expect(brief(await la.check({ policy: 'tb', key: 'k', cost: 1 }))).toBe('deny r=0');
    expect(brief(await lb.check({ policy: 'tb', key: 'k', cost: 1 }))).toBe('allow r=1');
  });

  // ------------------------------------------------------------------------------------------ found here
  // (clock 'limiter' keys expire on Redis's own clock: a documented limit of that mode, see the README.)
  // Under the case-14 bursts below (4 × `sluice serve`, 2 cores, Redis healthy) some checks come back degraded:
  // 1–20 of 200 and 7–54 of 2000 in our runs. The script call is answered by Redis in well under a millisecond,
  // but ioredis's commandTimeout is a timer on the caller's event loop, and Node runs due timers BEFORE it reads
  // sockets: when the loop is busy past the timeout (parsing a burst of requests, GC) the timer fires first
  // and the reply already sitting in the socket is thrown away. The check then takes the failure rule although
  // Redis decided it and counted it: closed → a client denied while a unit of its quota was spent; local (the
  // default) → decided again on this instance's kernel, which still has a whole quota, so once Redis is at the
  // limit a strict policy admits more than its limit (1023 and 1016 of 1000 in two runs of the 2000-check
  // burst with the default onStoreError). sluice serve also has no way to set timeoutMs (src/cli/serve.ts
  // passes only the URL), so it always runs with 20 ms.
  // Minimal reproduction: a strict fixed_window 5/h, onStoreError closed, default timeout (20 ms); block the
  // event loop for 40 ms right after the script call is written to the socket (below: in Socket#write):
  // the answer is `deny, degraded` while Redis's stored count went from 0 to 1.
  it('a reply that arrived in time wins over a deadline whose timer fired while the event loop was busy', async () => {
    const limiter = track(await createLimiter({
      policies: { p: strict({ algorithm: 'fixed_window', limit: 5, period: 3_600_000 }) } as unknown as Policies,
      maxKeys: 1024,
      redis: { url: r.url, prefix: 'bug-lag:' }, // the default timeout, 20 ms
    }));
    await connected(limiter);
    await insideWindow(r.client, 3_600_000, 10_000);
    const write = net.Socket.prototype.write;
    let blocked = 0;
    net.Socket.prototype.write = function (this: net.Socket, ...args: unknown[]): boolean {
      const ok = (write as (...a: unknown[]) => boolean).apply(this, args);
      const chunk = args[0];
      const text = typeof chunk === 'string' ? chunk : Buffer.isBuffer(chunk) ? chunk.toString('latin1') : '';
      if (blocked === 0 && /eval|fcall/i.test(text) && text.includes('bug-lag:')) {
        blocked++;
        const until = performance.now() + 40; // a busy event loop: Redis answers meanwhile
        while (performance.now() < until) { /* busy */ }
      }
      return ok;
    } as typeof write;
    let d: Decision;
    try {
      d = await limiter.check({ policy: 'p', key: 'k', cost: 1 });
    } finally {
      net.Socket.prototype.write = write;
    }
    expect(blocked, 'the script call was written while patched').toBe(1);
    const [key] = await keysUnder(r.client, 'bug-lag:');
    const stored = key === undefined ? null : await readState(r.client, key);
    expect(stored?.split(' ')[0], 'Redis decided and counted the check').toBe('1');
    expect(d, `answer ${JSON.stringify(d)} while Redis stored "${stored}"`).toMatchObject({ allowed: true, remaining: 4 });
    expect(d.degraded).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------------------
// Case 14 across processes: four `sluice serve --redis` instances
// ---------------------------------------------------------------------------------------------------------

describe('case 14 across processes: 4 sluice serve instances on one Redis', () => {
  const INSTANCES = 4;
  let r: SharedRedis;
  let dir: string;
  let procs: ServeProcess[] = [];

  /** One config for every test of the block (each test has its own policy and key). */
  const POLICIES = {
    // strict, failing closed: a store failure is a visible degraded denial
    s10: { algorithm: 'fixed_window', limit: 10, period: 60_000, consistency: 'strict', onStoreError: 'closed' },
    s1000: { algorithm: 'fixed_window', limit: 1000, period: '1h', consistency: 'strict', onStoreError: 'closed' },
    // the default consistency (local)
    l10: { algorithm: 'fixed_window', limit: 10, period: '1h' },
    l1000: { algorithm: 'fixed_window', limit: 1000, period: '1h' },
    warm: { algorithm: 'token_bucket', limit: 1_000_000, period: '1s', consistency: 'strict', onStoreError: 'closed' },
  };

  beforeAll(async () => {
    r = await sharedRedis();
    dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-redis-'));
    const file = path.join(dir, 'policies.yaml');
    writeFileSync(file, JSON.stringify({ policies: POLICIES })); // JSON is YAML
    procs = await serveStrict(INSTANCES, ['--config', file, '--redis', r.url]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    await r?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  interface Tally { admitted: number; denied: number; degraded: number; other: number; perInstance: number[] }

  /** `clients` clients per instance, released together, each sending `each` checks one after another. */
  async function hammer(policy: string, key: string, clients: number, each: number): Promise<Tally> {
    const t: Tally = { admitted: 0, denied: 0, degraded: 0, other: 0, perInstance: procs.map(() => 0) };
    let release!: () => void;
    const barrier = new Promise<void>((res) => (release = res));
    const all = procs.flatMap((proc, n) => Array.from({ length: clients }, async () => {
      await barrier;
      for (let i = 0; i < each; i++) {
        const a = await send(`${proc.url}/v1/check?policy=${policy}&key=${key}&cost=1`);
        if (a.status !== 200) t.other++;
        else if (a.json.degraded === true) t.degraded++;
        else if (a.json.allowed === true) {
          t.admitted++;
          t.perInstance[n]++;
        } else t.denied++;
      }
    }));
    release();
    await Promise.all(all);
    return t;
  }

  /** The stored state of (policy, key): "w0 w1 last" (w0 = the fixed window's count), or undefined. */
  async function stored(policy: string, key: string): Promise<string | undefined> {
    const keys = (await keysUnder(r.client, `sluice:{${policy}:`)).filter((k) => k.endsWith(`:${key}}:0`));
    expect(keys.length).toBeLessThanOrEqual(1);
    return keys.length === 0 ? undefined : ((await readState(r.client, keys[0])) ?? undefined);
  }

  /**
   * What Redis decided is the ground truth: the stored count is exactly the limit. A check whose script call
   * outlived sluice serve's 20 ms store timeout (a busy event loop on a 2-core machine does that under a
   * burst) is answered `degraded` (closed: denied) although the script still ran in Redis, so the answers
   * show `limit − admitted` units hidden behind degraded ones: admitted ≤ limit ≤ admitted + degraded.
   * Why a healthy Redis could give such answers is the subject of the test "a reply that arrived in time..." above.
   */
  function expectExact(t: Tally, limit: number, total: number, state: string | undefined): void {
    const why = `${JSON.stringify(t)}, stored "${state}"`;
    expect(state?.split(' ')[0], why).toBe(String(limit));
    expect(t.other, why).toBe(0);
    expect(t.admitted + t.denied + t.degraded, why).toBe(total);
    expect(t.admitted, why).toBeLessThanOrEqual(limit);
    expect(t.admitted + t.degraded, why).toBeGreaterThanOrEqual(limit);
  }

  it('strict, fixed_window 10 per 60 s, 4 × 50 concurrent checks for one key: exactly 10 admitted, count stored 10', async () => {
    await insideWindow(r.client, 60_000, 5000);
    const t = await hammer('s10', 'k', 50, 1);
    expectExact(t, 10, 200, await stored('s10', 'k'));
  }, 30_000);

  it('strict, fixed_window 1000 per hour, 4 × 50 clients × 10 checks (2000): exactly 1000 admitted', async () => {
    await insideWindow(r.client, 3_600_000, 30_000);
    const t = await hammer('s1000', 'k', 50, 10);
    expectExact(t, 1000, 2000, await stored('s1000', 'k'));
  }, 30_000 + 30_000); // and insideWindow's longest wait

  it('local (why the modes exist): the same traffic admits one quota per instance', async () => {
    await insideWindow(r.client, 3_600_000, 30_000);
    const t = await hammer('l10', 'k', 50, 1);
    // limit 10, 200 checks: 10 per instance, four times the limit
    expect(t, JSON.stringify(t)).toMatchObject({ admitted: 40, denied: 160, degraded: 0, other: 0, perInstance: [10, 10, 10, 10] });
    // limit 1000, 2000 checks: each instance sees 500, under its own quota: all 2000 admitted (strict: 1000)
    const big = await hammer('l1000', 'k', 50, 10);
    expect(big, JSON.stringify(big)).toMatchObject({ admitted: 2000, denied: 0, perInstance: [500, 500, 500, 500] });
    expect(await keysUnder(r.client, 'sluice:{l')).toStrictEqual([]);
  }, 30_000 + 30_000); // and insideWindow's longest wait
});
