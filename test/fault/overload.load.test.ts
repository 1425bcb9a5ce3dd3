/**
 * Overload over HTTP. Every queue is bounded: past `maxPending` checks queued or in flight, a check is refused
 * at once with OVERLOADED, which the server answers as 503 + `Retry-After: 1` (problem+json).
 *
 * 1. Deterministic: a shard worker stalled while holding exactly maxPending checks (the faulty worker fixture,
 *    see test/fault/support.ts) cannot decide anything, so every 503 seen meanwhile was answered without
 *    waiting for a decision. Released, the held checks are decided and the server serves again.
 * 2. Load: a server in its own process (test/fault/fixtures/serve.mjs, built dist/) is measured for 1 s, then
 *    offered twice that rate for 3 s from up to 256 connections. Generous bounds only, no timing asserts:
 *    every answer is a 200 or a 503, no connection fails or times out, the server's RSS stays bounded, its
 *    metrics count the 503s the clients saw, and it decides normally afterwards.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { postJson, send, ServerPool, PROJECT_ROOT } from '../helpers/server.js';
import { stallingRoot, parseMetrics, until } from './support.js';

const fake = vi.hoisted(() => ({ root: '' }));
vi.mock('../../src/util/paths.js', () => ({ packageRoot: () => fake.root }));

import type { PolicySpec } from '../../src/index.js';

const POLICIES: Record<string, PolicySpec> = {
  p: { algorithm: 'token_bucket', limit: 1_000_000, period: '1s' },
};
const STALL_COST = 4242;
const MiB = 2 ** 20;

const servers = new ServerPool();
const roots: string[] = [];
afterEach(() => servers.closeAll());
afterAll(() => {
  for (const dir of roots) rmSync(dir, { recursive: true, force: true });
});

describe('past maxPending: 503 + Retry-After, at once', () => {
  it('while the only shard is stalled holding maxPending checks, every new check gets 503 OVERLOADED; released, all is decided', async () => {
    const { root, stalled, release } = stallingRoot(STALL_COST);
    roots.push(root);
    fake.root = root;
    const s = await servers.start({ policies: POLICIES, shards: 1, maxPending: 4 });
    expect((await send(`${s.url}/v1/check?policy=p&key=warm`)).status).toBe(200);

    // one batch of 4 checks (= maxPending) reaches the worker, which stalls on it
    const held = postJson(`${s.url}/v1/check`, {
      checks: [{ policy: 'p', key: 'a' }, { policy: 'p', key: 'b' }, { policy: 'p', key: 'c' }, { policy: 'p', key: 'd', cost: STALL_COST }],
    });
    await until(() => existsSync(stalled), 10_000, 'the worker to stall');

    const refused = [
      await send(`${s.url}/v1/check?policy=p&key=x`),
      await send(`${s.url}/v1/check?policy=p&key=y&cost=0`),
      await send(`${s.url}/v1/auth?policy=p&key=x`),
      await postJson(`${s.url}/v1/check`, { policy: 'p', key: 'z' }),
    ];
    for (const a of refused) {
      expect(a.status, a.text).toBe(503);
      expect(a.headers.get('retry-after')).toBe('1');
      expect(a.contentType).toBe('application/problem+json');
      expect(a.json).toMatchObject({ status: 503, code: 'OVERLOADED', title: 'Service Unavailable' });
    }
    expect(refused[0].json.detail).toBe('more than 4 checks pending');
    // a batch answers 200 with an error per item: the caller sees which items to retry
    const batch = await postJson(`${s.url}/v1/check`, { checks: [{ policy: 'p', key: 'u' }, { policy: 'p', key: 'v' }] });
    expect(batch.status).toBe(200);
    expect(batch.json.results.map((r: { error: { code: string; status: number } }) => [r.error.code, r.error.status]))
      .toStrictEqual([['OVERLOADED', 503], ['OVERLOADED', 503]]);
    // what does not need the engine still answers; /metrics gives up waiting for the stalled shard's
    // stats after STATS_TIMEOUT_MS and renders its counters anyway
    expect((await send(`${s.url}/healthz`)).status).toBe(200);
    const during = await send(`${s.url}/metrics`);
    expect(during.status).toBe(200);
    expect(parseMetrics(during.text).get('sluice_overload_rejections_total')).toBe(6);
    // the shard has not decided anything meanwhile: the held batch is still waiting
    const state = await Promise.race([held.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 50))]);
    expect(state).toBe('waiting');

    writeFileSync(release, '');
    const h = await held;
    expect(h.status).toBe(200);
    expect(h.json.results.map((r: { allowed: boolean; retryAfterMs: number | null }) => [r.allowed, r.retryAfterMs]))
      .toStrictEqual([[true, 0], [true, 0], [true, 0], [true, 0]]);
    expect(await send(`${s.url}/v1/check?policy=p&key=x`)).toMatchObject({ status: 200 });

    const m = parseMetrics((await send(`${s.url}/metrics`)).text);
    expect(m.get('sluice_overload_rejections_total')).toBe(6);
    expect(m.get('sluice_http_responses_total{class="5xx"}')).toBe(4);
    expect(m.get('sluice_pending_checks')).toBe(0);
  });
});

/** A server in its own process (built dist/). */
interface Child {
  proc: ChildProcess;
  url: string;
  rss(): number;
  stop(): Promise<number | null>;
}

async function spawnServer(options: Record<string, unknown>): Promise<Child> {
  const proc = spawn(process.execPath, [path.join(PROJECT_ROOT, 'test', 'fault', 'fixtures', 'serve.mjs'), JSON.stringify(options)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  const line = await Promise.race([
    new Promise<string>((r) => createInterface({ input: proc.stdout! }).once('line', r)),
    exited.then((code) => { throw new Error(`server exited early (${code})`); }),
    new Promise<never>((_, rej) => setTimeout(() => rej(new Error('server did not start')), 15_000)),
  ]);
  const { port } = JSON.parse(line) as { port: number };
  return {
    proc,
    url: `http://127.0.0.1:${port}`,
    rss: () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'))![1]) * 1024,
    async stop() {
      proc.kill('SIGTERM');
      const code = await Promise.race([exited, new Promise<null>((r) => setTimeout(() => r(null), 10_000))]);
      if (code === null) proc.kill('SIGKILL');
      return code;
    },
  };
}

interface Load {
  statuses: Map<number, number>;
  /** Latency of each 200, ms. */
  latencies: number[];
  errors: number;
  timeouts: number;
  sent: number;
}

/** autocannon from this process: `connections` keep-alive connections, at most `rate` requests/s overall. */
function load(url: string, seconds: number, connections: number, rate?: number): Promise<Load> {
  return new Promise((resolve, reject) => {
    const statuses = new Map<number, number>();
    const latencies: number[] = [];
    let n = 0;
    const opts = {
      url,
      connections,
      duration: seconds,
      timeout: 10,
      ...(rate === undefined ? {} : { overallRate: rate }),
      requests: [{
        method: 'GET',
        path: '/v1/check?policy=p&key=k0',
        setupRequest: (req: { path?: string }) => ({ ...req, path: `/v1/check?policy=p&key=k${(n++ * 7919) % 100_000}` }),
      }],
    };
    const inst = autocannon(opts, (err, result) => {
      if (err) return reject(err);
      resolve({ statuses, latencies, errors: result.errors, timeouts: result.timeouts, sent: result.requests.sent });
    });
    inst.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status === 200) latencies.push(ms);
    });
  });
}

const pct = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

describe('twice the load the server serves, for 3 s', () => {
  it('answers every request with 200 or 503, keeps RSS bounded, and counts the 503s', async () => {
    const server = await spawnServer({ policies: POLICIES, shards: 1, maxKeys: 100_000, maxPending: 64 });
    try {
      let rssPeak = server.rss();
      const rssStart = rssPeak;
      const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, server.rss())), 50);
      let measured: Load, offered: Load;
      try {
        measured = await load(server.url, 1, 16);
        const served = [...measured.statuses.values()].reduce((a, b) => a + b, 0);
        offered = await load(server.url, 3, 256, Math.max(1000, 2 * served));
      } finally {
        clearInterval(sampler);
      }
      const ok = offered.statuses.get(200) ?? 0;
      const refused = offered.statuses.get(503) ?? 0;
      const accepted = offered.latencies;
      console.log(
        `overload: served ${[...measured.statuses.values()].reduce((a, b) => a + b, 0)} req/s closed-loop; offered ~2x for 3 s: ` +
        `${ok} × 200, ${refused} × 503, sent ${offered.sent}; latency p50 ${pct(accepted, 0.5)} ms, p99 ${pct(accepted, 0.99)} ms, ` +
        `max ${pct(accepted, 1)} ms; server RSS ${rssStart / MiB | 0} → peak ${rssPeak / MiB | 0} MiB`,
      );

      // nothing but decisions and explicit overloads; no connection error, no timeout (10 s)
      expect([...measured.statuses.keys(), ...offered.statuses.keys()].filter((s) => s !== 200 && s !== 503)).toStrictEqual([]);
      expect([measured.errors, measured.timeouts, offered.errors, offered.timeouts]).toStrictEqual([0, 0, 0, 0]);
      expect(ok).toBeGreaterThan(0);
      // bounded memory: generous, the table is preallocated and every queue is bounded
      expect(rssPeak - rssStart, `RSS ${rssStart / MiB | 0} → ${rssPeak / MiB | 0} MiB`).toBeLessThan(256 * MiB);
      expect(rssPeak).toBeLessThan(1024 * MiB);

      // the server counted the 503s the clients saw, plus at most one answer per connection that the client
      // stopped waiting for when the 3 s were up; and it is idle and exact again
      const m = parseMetrics((await send(`${server.url}/metrics`)).text);
      for (const counted of [m.get('sluice_overload_rejections_total')!, m.get('sluice_http_responses_total{class="5xx"}')!]) {
        expect(counted).toBeGreaterThanOrEqual(refused);
        expect(counted).toBeLessThanOrEqual(refused + 256);
      }
      expect(m.get('sluice_pending_checks')).toBe(0);
      expect(m.get('sluice_shard_failures_total')).toBe(0);
      expect((await send(`${server.url}/healthz`)).status).toBe(200);
      const d = await send(`${server.url}/v1/check?policy=p&key=after-the-load&cost=5`);
      expect([d.status, d.json.allowed, d.json.remaining]).toStrictEqual([200, true, 999_995]);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 60_000);
});
