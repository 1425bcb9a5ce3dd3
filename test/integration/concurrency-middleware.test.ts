/**
 * The concurrency middleware in real apps (Express 5, Fastify 5, node:http) on 127.0.0.1, with an embedded
 * limiter on a frozen clock and a remote sluice through the client: a request holds a lease while it runs
 * (a second one for the key gets 429 with Retry-After), and gives it back when its response finishes, when
 * its handler fails (the error answer finishes it), or when the client goes away mid-request.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { createClient } from '../../src/client/index.js';
import { sluiceExpressConcurrency } from '../../src/middleware/express.js';
import { sluiceFastifyConcurrency } from '../../src/middleware/fastify.js';
import { concurrencyLimit, type Leaser } from '../../src/middleware/node-http.js';
import type { ReleaseRequest, ReleaseResult } from '../../src/types/leases.js';
import { ManualClock } from '../helpers/clock.js';
import { closeAllServers, startStreamServer } from './ws-support.js';

const cleanup: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
  await closeAllServers();
});

const POLICIES = { exports: { algorithm: 'concurrency', limit: 1, leaseTtl: '30s' } } as never;

/** A leaser that counts settled releases, so a test can wait for the one a finished response fired. */
class Tracked implements Leaser {
  released = 0;
  private waiters: Array<() => void> = [];
  constructor(private readonly inner: Leaser) {}
  acquire = (r: Parameters<Leaser['acquire']>[0]) => this.inner.acquire(r);
  release = (r: ReleaseRequest): Promise<ReleaseResult> => this.inner.release(r).finally(() => {
    this.released++;
    for (const w of this.waiters.splice(0)) w();
  });
  /** Resolves once `n` releases have settled (fails the test after 5 s). */
  async releases(n: number): Promise<void> {
    const deadline = Date.now() + 5000;
    while (this.released < n) {
      if (Date.now() > deadline) throw new Error(`waited for ${n} releases, saw ${this.released}`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }
}

async function embedded(): Promise<Tracked> {
  const clock = new ManualClock();
  const limiter = await createLimiter({ policies: POLICIES, clock: clock.now, maxKeys: 1024 });
  cleanup.push(() => limiter.close());
  return new Tracked(limiter);
}

/** A gate a handler waits on: requests stay in flight until the test opens it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

const BUSY_BODY = JSON.stringify({
  type: 'https://iana.org/assignments/http-problem-types#quota-exceeded', title: 'Too Many Requests', status: 429,
  detail: 'too many in flight for "exports" (at most 1): retry in 30 s', 'violated-policies': ['exports'],
});

async function get(url: string, signal?: AbortSignal): Promise<{ status: number; retryAfter: string | null; body: string }> {
  const r = await fetch(url, { headers: { 'x-tenant': 'acme' }, signal: signal ?? AbortSignal.timeout(5000) });
  return { status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.text() };
}

const tenant = (req: { headers: http.IncomingHttpHeaders }): string | undefined => req.headers['x-tenant'] as string | undefined;


/** Runs the scenario against an app whose `/slow` waits on the test's gate, `/boom` throws, `/ok` answers. */
async function scenario(base: string, l: Tracked, gates: Array<ReturnType<typeof gate>>): Promise<void> {
  // one in flight: the second is turned away with the wait until the first's lease would expire
  const first = get(`${base}/slow`);
  await until(() => gates.length === 1);
  expect(await get(`${base}/ok`)).toEqual({ status: 429, retryAfter: '30', body: BUSY_BODY });
  gates[0].open();
  expect((await first).status).toBe(200);
  await l.releases(1);
  expect((await get(`${base}/ok`)).status).toBe(200);
  await l.releases(2);
  // a handler that fails: the error answer finishes the response, which releases
  expect((await get(`${base}/boom`)).status).toBe(500);
  await l.releases(3);
  // a client that goes away mid-request: the connection closes, which releases
  const ac = new AbortController();
  const gone = get(`${base}/slow`, ac.signal).catch((e: Error) => e.name);
  await until(() => gates.length === 2);
  ac.abort();
  expect(await gone).toBe('AbortError');
  await l.releases(4);
  expect((await get(`${base}/ok`)).status).toBe(200);
  gates[1].open();
}

async function until(pred: () => boolean): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function expressApp(l: Leaser, gates: Array<ReturnType<typeof gate>>): Promise<string> {
  const app = express();
  app.use(sluiceExpressConcurrency({ limiter: l, policy: 'exports', key: tenant }));
  app.get('/slow', async (_req, res) => {
    const g = gate();
    gates.push(g);
    await g.wait;
    if (!res.destroyed) res.json({ ok: true });
  });
  app.get('/ok', (_req, res) => { res.json({ ok: true }); });
  app.get('/boom', () => { throw new Error('boom'); });
  const server = await new Promise<http.Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  cleanup.push(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('concurrency middleware', () => {
  it('Express, embedded limiter', async () => {
    const l = await embedded();
    const gates: Array<ReturnType<typeof gate>> = [];
    await scenario(await expressApp(l, gates), l, gates);
  });

  it('Express, remote sluice through the client', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const client = createClient({ url: s.wsUrl });
    cleanup.push(() => client.close());
    const l = new Tracked(client);
    const gates: Array<ReturnType<typeof gate>> = [];
    await scenario(await expressApp(l, gates), l, gates);
  });

  it('Fastify, embedded limiter', async () => {
    const l = await embedded();
    const gates: Array<ReturnType<typeof gate>> = [];
    // keep-alive connections of the fetches are closed with the app (Fastify waits for them otherwise)
    const app = Fastify({ forceCloseConnections: true });
    app.addHook('onRequest', sluiceFastifyConcurrency({ limiter: l, policy: 'exports', key: (req: { raw: http.IncomingMessage }) => tenant(req.raw) }));
    app.get('/slow', async () => {
      const g = gate();
      gates.push(g);
      await g.wait;
      return { ok: true };
    });
    app.get('/ok', async () => ({ ok: true }));
    app.get('/boom', async () => { throw new Error('boom'); });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanup.push(() => app.close());
    await scenario(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, l, gates);
  });

  it('a key the limiter refuses (empty) is answered 400, not let through (onError allow)', async () => {
    const l = await embedded();
    const base = await expressApp(l, []);
    const r = await fetch(`${base}/ok`, { headers: { 'x-tenant': '' }, signal: AbortSignal.timeout(5000) });
    expect({ status: r.status, body: await r.text() }).toStrictEqual({
      status: 400, body: JSON.stringify({ type: 'about:blank', title: 'Bad Request', status: 400, detail: 'the request\'s rate-limit key: must not be empty' }),
    });
  });

  it('node:http, embedded limiter', async () => {
    const l = await embedded();
    const gates: Array<ReturnType<typeof gate>> = [];
    const limit = concurrencyLimit({ limiter: l, policy: 'exports', key: tenant });
    const server = http.createServer((req, res) => {
      void (async () => {
        if (!(await limit(req, res))) return;
        if (req.url === '/boom') {
          res.statusCode = 500;
          return res.end('boom');
        }
        if (req.url === '/slow') {
          const g = gate();
          gates.push(g);
          await g.wait;
        }
        if (!res.destroyed) res.end('{"ok":true}');
      })();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanup.push(() => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }));
    await scenario(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, l, gates);
  });
});

