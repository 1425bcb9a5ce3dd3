/**
 * HTTP front threads (issue #17): with 2 front threads (each a uWS app on the shared port, its checks sent to
 * the owning shard through shared memory) and 2 shards, the same checks get exactly the decisions 1 front
 * thread and no shards give. The limiters read the wall clock (a front thread cannot share a manual one), so
 * the limits are per 30 days: no token comes back during a run.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import type { Limiter } from '../../src/types.js';
import { insideLocalWindow } from '../helpers/redis.js';

const open: Array<{ server: SluiceServer; limiter: Limiter }> = [];
afterEach(async () => {
  for (const o of open.splice(0)) {
    await o.server.close();
    await o.limiter.close();
  }
});

const policies = {
  g: { algorithm: 'token_bucket' as const, limit: 150, period: '30d' },
  p: { algorithm: 'token_bucket' as const, limit: 10, period: '30d', guard: 'g' },
  q: { algorithm: 'fixed_window' as const, limit: 8, period: '30d' },
};

/** 240 checks over 12 keys, two policies, costs 1-3 (a seeded sequence), each on a fresh connection. */
function checks(): string[] {
  let x = 12345;
  const next = (n: number): number => {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
    return (x >>> 0) % n;
  };
  return Array.from({ length: 240 }, () => `/v1/check?policy=${next(2) === 0 ? 'p' : 'q'}&key=k${next(12)}&cost=${1 + next(3)}`);
}

async function run(shards: number, threads: number): Promise<{ decisions: string[]; mainAnswered: number; aggregated: Array<Record<string, number>> }> {
  const limiter = await createLimiter({ policies, shards, maxKeys: 4096 });
  const server = await startServer({ limiter, host: '127.0.0.1', port: 0, threads, activity: false });
  open.push({ server, limiter });
  const decisions: string[] = [];
  for (const path of checks()) {
    // a new connection each time: the kernel spreads connections over the threads' sockets
    const r = await fetch(`http://127.0.0.1:${server.port}${path}`, { headers: { connection: 'close' }, signal: AbortSignal.timeout(5000) });
    const d = await r.json() as { allowed: boolean; remaining: number; policy: string };
    decisions.push(`${r.status} ${d.allowed} ${d.remaining} ${d.policy}`);
  }
  // server.metrics.render(): this thread's own; GET /metrics: every thread's counters summed
  const mainAnswered = Number(/sluice_http_responses_total\{class="2xx"\} (\d+)/.exec(await server.metrics.render())?.[1] ?? 0);
  // 8 scrapes on fresh connections (so through both threads, whichever takes each): all count every thread
  const scrapes: string[] = [];
  for (let i = 0; i < 8; i++) scrapes.push(await (await fetch(`http://127.0.0.1:${server.port}/metrics`, { headers: { connection: 'close' }, signal: AbortSignal.timeout(5000) })).text());
  const counts = scrapes.map((scraped) => {
    const counted = (re: RegExp): number => Number(re.exec(scraped)?.[1] ?? -1);
    return {
      answered: counted(/sluice_http_responses_total\{class="2xx"\} (\d+)/),
      allowed: counted(/sluice_decisions_total\{policy="p",result="allowed"\} (\d+)/) + counted(/sluice_decisions_total\{policy="q",result="allowed"\} (\d+)/),
      denied: counted(/sluice_decisions_total\{policy="p",result="denied"\} (\d+)/) + counted(/sluice_decisions_total\{policy="q",result="denied"\} (\d+)/),
      latencies: counted(/sluice_decision_duration_seconds_count (\d+)/),
    };
  });
  // the scrapes' own answers are counted too (2xx): the i-th scrape sees i more than the checks
  const aggregated = counts.map((c, i) => ({ ...c, answered: c.answered - i }));
  return { decisions, mainAnswered, aggregated };
}

describe('HTTP front threads', () => {
  it('2 front threads and 2 shards decide exactly what 1 front thread and no shards decide', async () => {
    // q's fixed window (30 days, epoch-aligned on the wall clock): both runs (~1 s) in one, or one run's
    // counts restart midway and its decisions differ from the other's
    await insideLocalWindow(30 * 86_400_000, 15_000);
    const one = await run(0, 1);
    expect(one.mainAnswered).toBe(240);
    expect(one.decisions.filter((d) => d.includes(' true ')).length).toBeGreaterThan(100);
    expect(one.decisions.filter((d) => d.includes(' false ')).length).toBeGreaterThan(20);
    const two = await run(2, 2);
    expect(two.decisions).toStrictEqual(one.decisions);
    // the other thread answered some of them; /metrics counts both threads' decisions and answers
    expect(two.mainAnswered).toBeLessThan(240);
    expect(two.mainAnswered).toBeGreaterThan(0);
    const allowed = one.decisions.filter((d) => d.includes(' true ')).length;
    const expected = { answered: 240, allowed, denied: 240 - allowed, latencies: 240 };
    expect(one.aggregated).toStrictEqual(Array(8).fill(expected));
    expect(two.aggregated).toStrictEqual(Array(8).fill(expected));
  }, 30_000 + 15_000); // and insideLocalWindow's longest wait

  it('a reload reaches every front thread: a changed limit is decided exactly through both, a removed policy is unknown on both', async () => {
    const limiter = await createLimiter({ policies, shards: 2, maxKeys: 4096 });
    const server = await startServer({ limiter, host: '127.0.0.1', port: 0, threads: 2, activity: false });
    open.push({ server, limiter });
    const get = async (path: string): Promise<{ status: number; body: Record<string, unknown> }> => {
      const r = await fetch(`http://127.0.0.1:${server.port}${path}`, { headers: { connection: 'close' }, signal: AbortSignal.timeout(5000) });
      return { status: r.status, body: await r.json() as Record<string, unknown> };
    };
    const answered = async (): Promise<number> => Number(/sluice_http_responses_total\{class="(?:2|4)xx"\} (\d+)/g.exec(await server.metrics.render())?.[1] ?? 0);
    // a new limit (7 per 30 days, under a new limit id): checks on fresh connections, spread over both threads
    const r1 = await limiter.reload({ ...policies, p: { algorithm: 'token_bucket', limit: 7, period: '30d', guard: 'g' } });
    expect(r1.changed).toStrictEqual(['p']);
    const before = await answered();
    const seen: string[] = [];
    for (let i = 0; i < 40; i++) {
      const { status, body } = await get('/v1/check?policy=p&key=r1');
      seen.push(`${status} ${String(body.allowed)} ${String(body.remaining)} ${String(body.limit)}`);
    }
    expect(seen).toStrictEqual([
      ...Array.from({ length: 7 }, (_, i) => `200 true ${6 - i} 7`),
      ...Array.from({ length: 33 }, () => '200 false 0 7'),
    ]);
    const mainShare = (await answered()) - before;
    // both threads answered some (the main thread's counters count its own answers here)
    expect(mainShare).toBeGreaterThan(0);
    expect(mainShare).toBeLessThan(40);
    // a reload that removes q: every thread answers 400 naming it
    const r2 = await limiter.reload({ g: policies.g, p: { algorithm: 'token_bucket', limit: 7, period: '30d', guard: 'g' } });
    expect(r2.removed).toStrictEqual(['q']);
    const before2 = await answered();
    for (let i = 0; i < 20; i++) {
      const { status, body } = await get('/v1/check?policy=q&key=r2');
      expect(status).toBe(400);
      expect(String(body.detail ?? body.title)).toContain('unknown policy "q"');
    }
    const mainShare2 = (await answered()) - before2;
    expect(mainShare2).toBeLessThan(20);
  });

  it('more than one front thread with a clock of the limiter\'s own is refused, naming threads', async () => {
    let t = 1_000_000;
    const limiter = await createLimiter({ policies, shards: 2, maxKeys: 64, clock: () => t++ });
    try {
      await expect(startServer({ limiter, host: '127.0.0.1', port: 0, threads: 2 })).rejects.toMatchObject({ code: 'CONFIG', message: expect.stringMatching(/threads.*wall clock/) });
    } finally {
      await limiter.close();
    }
  });

  it('more than one front thread with a policy decided in a store is refused before any thread starts, naming threads and the policy', async () => {
    const limiter = await createLimiter({
      policies: { ...policies, tb: { algorithm: 'token_bucket', limit: 10, period: '1s', consistency: 'strict' } }, shards: 2, maxKeys: 64, store: new MemoryStore(),
    });
    try {
      await expect(startServer({ limiter, host: '127.0.0.1', port: 0, threads: 2 })).rejects.toMatchObject({
        code: 'CONFIG', field: 'threads',
        message: 'server: threads: more than 1 front thread needs local policies only (consistency: local; Redis is reached from the main thread only), and policy "tb" has consistency strict: run 1 thread or make the policy local',
      });
    } finally {
      await limiter.close();
    }
  });

  it('with front threads, a reload adding a policy decided in a store fails naming threads and the policy; the set in force stays', async () => {
    const limiter = await createLimiter({ policies, shards: 2, maxKeys: 64, store: new MemoryStore() });
    const server = await startServer({ limiter, host: '127.0.0.1', port: 0, threads: 2, activity: false });
    open.push({ server, limiter });
    const version = limiter.version;
    await expect(limiter.reload({ ...policies, tb: { algorithm: 'token_bucket', limit: 10, period: '1s', consistency: 'strict' } }))
      .rejects.toMatchObject({ code: 'CONFIG', field: 'threads', message: expect.stringContaining('policy "tb" has consistency strict') });
    expect({ version: limiter.version, tb: limiter.policies.has('tb') }).toStrictEqual({ version, tb: false });
  });

  it('more than one front thread without shards is refused, naming threads', async () => {
    const limiter = await createLimiter({ policies, shards: 0, maxKeys: 64 });
    try {
      await expect(startServer({ limiter, host: '127.0.0.1', port: 0, threads: 2 })).rejects.toMatchObject({ code: 'CONFIG', message: expect.stringMatching(/threads/) });
    } finally {
      await limiter.close();
    }
  });
});
