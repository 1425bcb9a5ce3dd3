/**
 * Redis killed (kill -9: connections reset, data lost) and restarted without persistence.
 *
 * - Case 15, step 5: the outage timeline with kill -9 and a restart, once per onStoreError: every check is
 *   answered within the timeout (+ a 200 ms margin for this machine) under its rule, no rejection reaches
 *   the caller, and once the limiter has reconnected Redis decides again, from fresh state.
 * - Case 04, without the proxy: Redis killed and restarted in the middle of a load of concurrent checks:
 *   every check is answered under its rule, and no sample of the keys ever shows a key without expiry
 *   (PTTL −1) or a stored value out of range; after the load and 2 periods, no key is left.
 * - The HTTP front with Redis down: a strict policy answers 200 with its degraded decision (429 on /v1/auth
 *   for closed), never a 5xx.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import { startRedis, type TestRedis, insideWindow, insideLocalWindow, connected, keysUnder } from '../helpers/redis.js';
import { send } from '../helpers/server.js';
import { decodeState } from '../../src/store/state.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];
type Rule = 'open' | 'closed' | 'local';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const TIMEOUT_MS = 50;
const MARGIN_MS = 200;
const FAST_BREAKER = { resetMs: 200, maxResetMs: 400 };





interface Answer {
  ms: number;
  d?: Decision;
  err?: unknown;
  fromRedis: boolean;
}

/** One check, timed; `fromRedis` when the limiter's storeErrors did not move during it (sequential use only). */
async function timed(limiter: Limiter, policy: string, key: string): Promise<Answer> {
  const before = (await limiter.stats()).store!.storeErrors;
  const t = performance.now();
  let d: Decision | undefined;
  let err: unknown;
  try {
    d = await limiter.check({ policy, key, cost: 1 });
  } catch (e) {
    err = e;
  }
  const ms = performance.now() - t;
  return { ms, d, err, fromRedis: (await limiter.stats()).store!.storeErrors === before };
}

function brief(a: Answer): string {
  if (a.d === undefined) return `error ${String(a.err)}`;
  return `${a.d.allowed ? 'allow' : 'deny'} r=${a.d.remaining}${a.d.degraded ? ' degraded' : ''}`;
}

/** Whether an answer given without Redis follows the rule (local: this instance's kernel, limit 5). */
function followsRule(rule: Rule, d: Decision): boolean {
  if (rule === 'open') return d.allowed && d.degraded === true && d.degradedBy === 'open';
  if (rule === 'closed') return !d.allowed && d.degraded === true && d.degradedBy === 'closed' && d.retryAfterMs !== null && d.retryAfterMs >= 1;
  return d.degraded === true && d.degradedBy === 'local';
}

// ---------------------------------------------------------------------------------------------------------

describe.each(['open', 'closed', 'local'] as const)('case 15, kill -9 and a restart without persistence, onStoreError %s', (rule) => {
  /** The timeline; null when its premise (Redis decides the first 3 checks) did not hold on a loaded machine. */
  async function attempt(): Promise<null | { down: Answer[]; after: Answer[]; recoveredMs: number; breaker: string; clients: number }> {
    const r = await startRedis();
    const limiter = await createLimiter({
      policies: { p: { algorithm: 'fixed_window', limit: 5, period: 60_000, consistency: 'strict', onStoreError: rule } } as unknown as Policies,
      maxKeys: 1024,
      redis: { url: r.url, prefix: 'kill:', timeoutMs: TIMEOUT_MS, breaker: FAST_BREAKER },
    });
    try {
      await connected(limiter);
      for (let i = 0; i < 20; i++) await limiter.check({ policy: 'p', key: 'warm', cost: 0 }); // JIT warm-up
      await insideWindow(r.client, 60_000, 15_000);
      const first: Answer[] = [];
      for (let i = 0; i < 3; i++) first.push(await timed(limiter, 'p', 'k'));
      if (!first.every((a) => a.fromRedis)) return null; // a reply discarded by a busy event loop: try again
      expect(first.map(brief)).toStrictEqual(['allow r=4', 'allow r=3', 'allow r=2']);

      await r.kill();
      const down: Answer[] = [];
      const t0 = performance.now();
      for (let i = 0; i < 8; i++) {
        await sleep(t0 + 200 * i - performance.now());
        down.push(await timed(limiter, 'p', 'k'));
      }
      await r.restart();
      const restarted = performance.now();
      const after: Answer[] = [];
      while (performance.now() - restarted < 8000) {
        const a = await timed(limiter, 'p', 'k');
        after.push(a);
        if (a.fromRedis) break;
        await sleep(100);
      }
      return {
        down, after, recoveredMs: performance.now() - restarted,
        breaker: (await limiter.stats()).store!.breaker,
        clients: String(await r.client.client('LIST')).trim().split('\n').length,
      };
    } finally {
      await limiter.close();
      await r.stop();
    }
  }

  it('every check answered in time under the rule; after the restart Redis decides again, from fresh state', async () => {
    let run = await attempt();
    for (let i = 0; i < 2 && run === null; i++) run = await attempt();
    expect(run, 'Redis decided the first checks in one of 3 attempts').not.toBeNull();
    const { down, after, recoveredMs, breaker, clients } = run!;
    const all = [...down, ...after];
    expect(all.filter((a) => a.d === undefined).map(brief), 'no rejection reaches the caller').toStrictEqual([]);
    const slowest = Math.max(...all.map((a) => a.ms));
    expect(slowest, `slowest answer ${slowest.toFixed(1)} ms`).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS);
    expect(down.every((a) => !a.fromRedis && followsRule(rule, a.d!)), down.map(brief).join(', ')).toBe(true);
    expect(after.slice(0, -1).every((a) => !a.fromRedis && followsRule(rule, a.d!)), after.map(brief).join(', ')).toBe(true);
    if (rule === 'local') {
      const admitted = all.filter((a) => !a.fromRedis && a.d!.allowed).length;
      // seeded with what Redis last said (2 left): exactly those, not a fresh bucket of 5
      expect(admitted, 'the local kernel starts from the last state learned from Redis').toBe(2);
    }
    // reconnected (ioredis backs off up to 2 s ±50%, the breaker probes within 600 ms): counts start fresh
    const last = after[after.length - 1];
    expect(last.fromRedis, `Redis never decided again within 8 s: ${after.map(brief).join(', ')}`).toBe(true);
    expect(brief(last), `after ${recoveredMs.toFixed(0)} ms`).toBe('allow r=4');
    expect(breaker).toBe('closed');
    // the test's own client, the limiter's store connection, and its reset channel's subscriber and publisher
    // (src/engine/reset-channel.ts)
    expect(clients, 'no reconnect storm').toBeLessThanOrEqual(4);
  }, 90_000);
});

// ---------------------------------------------------------------------------------------------------------

describe('case 04 (without the proxy): Redis killed in the middle of a load', () => {
  it('every check answered under its rule; no key ever without expiry or out of range; no key left after', async () => {
    const P = 1000;
    const r = await startRedis();
    const limiter = await createLimiter({
      policies: {
        fw: { algorithm: 'fixed_window', limit: 10, period: P, consistency: 'strict', onStoreError: 'closed' },
        tb: { algorithm: 'token_bucket', limit: 10, period: P, consistency: 'strict', onStoreError: 'open' },
      } as unknown as Policies,
      maxKeys: 1024,
      redis: { url: r.url, prefix: 'c04:', timeoutMs: TIMEOUT_MS, breaker: FAST_BREAKER },
    });
    // a second client for sampling, so sampling never waits behind the helper's reconnect schedule
    const samples = { taken: 0, noExpiry: [] as string[], bad: [] as string[] };
    let sampling = true;
    try {
      await connected(limiter);
      const sampler = (async () => {
        while (sampling) {
          try {
            const keys = await keysUnder(r.client, 'c04:');
            if (keys.length > 0) {
              const m = r.client.multi();
              for (const k of keys) m.pttl(k).getBuffer(k);
              const res = (await m.exec()) ?? [];
              keys.forEach((k, i) => {
                const ttl = res[2 * i]?.[1] as number;
                const value = res[2 * i + 1]?.[1] as Buffer | null;
                if (ttl === -1) samples.noExpiry.push(k);
                if (value === null) return;
                const w0 = decodeState(value)?.[0] ?? NaN;
                // fixed window: a count in [0, L]; token bucket: tokens·P in [0, B·P]
                const max = k.includes('{fw:') ? 10 : 10 * P;
                if (!(w0 >= 0 && w0 <= max)) samples.bad.push(`${k}=${value.toString('hex')}`);
              });
              samples.taken++;
            }
          } catch {
            // Redis is down: nothing to sample
          }
          await sleep(10);
        }
      })();

      const answers: Array<{ policy: string; a: Answer }> = [];
      const t0 = performance.now();
      const workers = Array.from({ length: 8 }, async (_, w) => {
        for (let i = 0; performance.now() - t0 < 3000; i++) {
          const policy = (i + w) % 2 === 0 ? 'fw' : 'tb';
          const start = performance.now();
          let d: Decision | undefined;
          let err: unknown;
          try {
            d = await limiter.check({ policy, key: `k${w % 4}`, cost: 1 });
          } catch (e) {
            err = e;
          }
          answers.push({ policy, a: { ms: performance.now() - start, d, err, fromRedis: false } });
          await sleep(5);
        }
      });
      const chaos = (async () => {
        await sleep(800);
        await r.kill();
        await sleep(800);
        await r.restart();
      })();
      await Promise.all([...workers, chaos]);
      await sleep(2 * P + 200);
      sampling = false;
      await sampler;

      expect(answers.length).toBeGreaterThan(100);
      expect(answers.filter((x) => x.a.d === undefined).map((x) => String(x.a.err)), 'no rejection reaches the caller').toStrictEqual([]);
      const slowest = Math.max(...answers.map((x) => x.a.ms));
      expect(slowest, `slowest of ${answers.length} answers: ${slowest.toFixed(1)} ms`).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS);
      // under its rule: a degraded answer is the rule's (fw closed: denied; tb open: admitted)
      const degraded = answers.filter((x) => x.a.d!.degraded);
      expect(degraded.length, 'the outage was felt').toBeGreaterThan(0);
      expect(degraded.every((x) => (x.policy === 'fw' ? !x.a.d!.allowed && x.a.d!.retryAfterMs! >= 1 : x.a.d!.allowed))).toBe(true);
      expect(answers.filter((x) => !x.a.d!.degraded).length, 'Redis decided before and after').toBeGreaterThan(50);

      expect(samples.taken).toBeGreaterThan(20);
      expect(samples.noExpiry, 'samples with PTTL −1').toStrictEqual([]);
      expect(samples.bad, 'stored values out of range').toStrictEqual([]);
      expect(await keysUnder(r.client, 'c04:'), 'keys left 2 periods after the load').toStrictEqual([]);
    } finally {
      sampling = false;
      await limiter.close();
      await r.stop();
    }
  }, 40_000);
});

// ---------------------------------------------------------------------------------------------------------

describe('the HTTP front with Redis down', () => {
  let r: TestRedis;
  let limiter: Limiter;
  let server: SluiceServer;
  let url: string;

  beforeAll(async () => {
    r = await startRedis();
    await r.kill(); // the port is closed: every store call fails at once
    limiter = await createLimiter({
      policies: {
        o: { algorithm: 'fixed_window', limit: 5, period: 60_000, consistency: 'strict', onStoreError: 'open' },
        c: { algorithm: 'fixed_window', limit: 5, period: 60_000, consistency: 'strict', onStoreError: 'closed' },
        l: { algorithm: 'fixed_window', limit: 5, period: 60_000, consistency: 'strict' },
      } as unknown as Policies,
      maxKeys: 1024,
      redis: { url: r.url, timeoutMs: TIMEOUT_MS },
    });
    server = await startServer({ limiter, host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${server.port}`;
  });
  afterAll(async () => {
    await server?.close();
    await limiter?.close();
    await r?.stop();
  });

  it('GET /v1/check answers 200 with the degraded decision, never a 5xx', async () => {
    // `l`'s six local checks count in one minute's fixed window of this process's clock (no Redis time was
    // ever learned): started well inside one, so none of them lands in the next
    await insideLocalWindow(60_000, 2_000);
    const o = await send(`${url}/v1/check?policy=o&key=k&cost=1`);
    expect(o.status).toBe(200);
    expect(o.json).toMatchObject({ allowed: true, degraded: true, degradedBy: 'open', policy: 'o' });
    expect(o.headers.get('sluice-degraded')).toBe('open');
    const c = await send(`${url}/v1/check?policy=c&key=k&cost=1`);
    expect(c.status).toBe(200);
    expect(c.json).toMatchObject({ allowed: false, degraded: true, degradedBy: 'closed', retryAfterMs: 1000, policy: 'c' });
    expect(c.headers.get('sluice-degraded')).toBe('closed');
    // local: this instance's kernel decides, counted and marked; Redis never answered for the key, so it
    // starts full (nothing was learned)
    const ls = [];
    for (let i = 0; i < 6; i++) ls.push(await send(`${url}/v1/check?policy=l&key=k&cost=1`));
    expect(ls.map((a) => a.status)).toStrictEqual([200, 200, 200, 200, 200, 200]);
    expect(ls.map((a) => `${a.json.allowed} ${a.json.remaining}`)).toStrictEqual(['true 4', 'true 3', 'true 2', 'true 1', 'true 0', 'false 0']);
    expect(ls.every((a) => a.json.degraded === true && a.json.degradedBy === 'local' && a.headers.get('sluice-degraded') === 'local')).toBe(true);
    const s = await limiter.stats();
    expect(s.degraded).toMatchObject({ o: { open: 1, closed: 0, local: 0 }, c: { open: 0, closed: 1, local: 0 }, l: { open: 0, closed: 0, local: 6 } });
  });

  it('POST /v1/check (a batch) and /v1/auth answer under the rule too', async () => {
    const batch = await send(`${url}/v1/check`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ checks: [{ policy: 'o', key: 'b' }, { policy: 'c', key: 'b' }] }),
    });
    expect(batch.status).toBe(200);
    expect(batch.text).toContain('"degraded":true');
    const open = await send(`${url}/v1/auth?policy=o&key=k`);
    expect(open.status).toBe(200);
    expect(open.headers.get('sluice-degraded')).toBe('open');
    const closed = await send(`${url}/v1/auth?policy=c&key=k`);
    expect(closed.status).toBe(429);
    expect(closed.headers.get('sluice-degraded')).toBe('closed');
    expect(Number(closed.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });

  it('/readyz stays 200 and reports the store disconnected', async () => {
    const a = await send(`${url}/readyz`);
    expect(a.status).toBe(200);
    expect(a.json).toMatchObject({ status: 'ready', store: 'disconnected' });
  });

  it('the limiter counts the failures and reports the breaker', async () => {
    const s = (await limiter.stats()).store!;
    expect(s.connected).toBe(false);
    expect(s.storeErrors).toBeGreaterThan(0);
    expect(['open', 'halfOpen', 'closed']).toContain(s.breaker);
  });
});
