/**
 * sluice/client against real servers: HTTP and one multiplexed WebSocket (binary and JSON), reconnects with
 * backoff, in-flight checks re-sent or failed on a dropped connection, timeouts, Retry-After (denials remembered,
 * 503s waited out, a refused upgrade), subscriptions. Fake servers stand in where a real one cannot misbehave
 * on purpose.
 */
import http from 'node:http';
import net from 'node:net';
import { WebSocketServer } from 'ws';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createClient, isSluiceClientError, isSluiceError, type ClientDecision, type ReadyEvent, type SluiceClient } from '../../src/client/index.js';
import { Backoff } from '../../src/client/backoff.js';
import { HttpTransport } from '../../src/client/http.js';
import { WsTransport } from '../../src/client/ws.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { readChecks } from '../../src/wire/binary-read.js';
import { ANSWER_DELAYED, FRAME_ANSWERS, KIND_ALLOWED, KIND_DENIED } from '../../src/wire/binary-format.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { TestSocket, closeAllServers, sleep, startStreamServer } from './ws-support.js';
import { ManualClock } from '../helpers/clock.js';
import { flakyStore } from '../helpers/flaky-store.js';
import { startBlackholeProxy, type BlackholeProxy } from '../helpers/blackhole-proxy.js';
import { MemoryStore } from '../../src/store/memory.js';

const clients = new Set<SluiceClient>();
const closers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  await Promise.all([...clients].map((c) => c.close()));
  clients.clear();
  for (const f of closers.splice(0)) await f();
  TestSocket.closeAll();
  await closeAllServers();
});

function client(o: Parameters<typeof createClient>[0]): SluiceClient {
  const c = createClient({ reconnect: { initialDelayMs: 10, maxDelayMs: 100 }, ...o });
  clients.add(c);
  return c;
}

/** 10 tokens per 6 s: one every 600 ms. */
const POLICIES: Record<string, PolicySpec> = {
  p: { algorithm: 'token_bucket', limit: 10, period: 6000 },
  d: { algorithm: 'token_bucket', limit: 10, period: 6000, descriptors: ['tenant', 'action'] },
  t: { algorithm: 'token_bucket', limit: 60, period: 60_000 },
};

const decision = (allowed: boolean, remaining: number, resetAfterMs: number, retryAfterMs: number | null, policy = 'p'): ClientDecision =>
  ({ allowed, limit: 10, remaining, resetAfterMs, retryAfterMs, policy });

/** A blackhole proxy (test/helpers/blackhole-proxy.ts) in front of `target`, closed after the test. */
async function proxyTo(target: number): Promise<BlackholeProxy> {
  const p = await startBlackholeProxy(target);
  closers.push(() => p.close());
  return p;
}

/** An HTTP server answering with `handler`, closed after the test. */
function fakeHttp(handler: http.RequestListener): Promise<{ port: number; server: http.Server }> {
  return new Promise((resolve) => {
    const server = http.createServer(handler);
    server.listen(0, '127.0.0.1', () => {
      closers.push(() => new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }));
      resolve({ port: (server.address() as net.AddressInfo).port, server });
    });
  });
}

describe('createClient over HTTP', () => {
  it('gives the server\'s decisions; checks of one turn share one request; server errors are SluiceErrors', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.url });
    expect(await c.check({ policy: 'p', key: 'k', cost: 4 })).toStrictEqual(decision(true, 6, 2400, 0));
    expect(c.rateLimitPolicy('p')).toBe('"p";q=10;w=6;sluice-burst=10');
    const three = await Promise.all([
      c.check({ policy: 'p', key: 'k', cost: 6 }),
      c.check({ policy: 'p', key: 'k', cost: 1 }),
      c.check({ policy: 'd', descriptors: { tenant: 'acme', action: 'read' }, cost: 1 }),
    ]);
    expect(three).toStrictEqual([decision(true, 0, 6000, 0), decision(false, 0, 6000, 600), decision(true, 9, 600, 0, 'd')]);
    const e = await c.check({ policy: 'nope', key: 'k', cost: 1 }).catch((x: unknown) => x);
    expect(isSluiceError(e)).toBe(true);
    expect(e).toMatchObject({ code: 'UNKNOWN_POLICY', field: 'policy', status: 400, message: 'policy: unknown policy "nope"' });
    const [ok, bad] = await Promise.allSettled([c.check({ policy: 'p', key: 'other', cost: 1 }), c.check({ policy: 'p', key: 'k', cost: -1 })]);
    expect(ok).toStrictEqual({ status: 'fulfilled', value: decision(true, 9, 600, 0) });
    expect(bad).toMatchObject({ status: 'rejected', reason: { code: 'INVALID_ARGUMENT', field: 'checks[1].cost' } });
  });

  it('honours a 503\'s Retry-After before sending again', async () => {
    const times: number[] = [];
    const { port } = await fakeHttp((req, res) => {
      times.push(performance.now());
      req.resume();
      if (times.length === 1) {
        res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '1' });
        res.end(JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'more than 1 checks pending', code: 'OVERLOADED' }));
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(decision(true, 9, 600, 0)));
      }
    });
    const c = client({ url: `http://127.0.0.1:${port}` });
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    expect(times.length).toBe(2);
    expect(times[1] - times[0]).toBeGreaterThanOrEqual(995);
    expect(c.stats().resent).toBe(1);
  });

  it('fails with the server\'s 503 when the Retry-After does not fit in the timeout', async () => {
    const { port } = await fakeHttp((req, res) => {
      req.resume();
      res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '30' });
      res.end(JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'limiter is closed', code: 'CLOSED' }));
    });
    const c = client({ url: `http://127.0.0.1:${port}`, timeoutMs: 2000 });
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 })).rejects.toMatchObject({ code: 'CLOSED', status: 503, message: 'limiter is closed' });
  });

  it('a 429 from an intermediary (no sluice body): waits its Retry-After, sends again, and gets the decision', async () => {
    let calls = 0;
    const { port } = await fakeHttp((req, res) => {
      req.resume();
      if (++calls === 1) {
        res.writeHead(429, { 'content-type': 'text/html', 'retry-after': '0' });
        res.end('<html><body>Too Many Requests</body></html>');
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(decision(true, 9, 600, 0)));
      }
    });
    const c = client({ url: `http://127.0.0.1:${port}` });
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    expect([calls, c.stats().resent]).toStrictEqual([2, 1]);
  });

  it('a 429 from an intermediary that persists fails with THROTTLED (status 429) naming it, not REMOTE', async () => {
    let calls = 0;
    const { port } = await fakeHttp((req, res) => {
      calls++;
      req.resume();
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '0' });
      res.end('{"message":"rate limit exceeded"}'); // an API gateway's own body
    });
    const c = client({ url: `http://127.0.0.1:${port}`, maxAttempts: 3 });
    const e = await c.check({ policy: 'p', key: 'k', cost: 1 }).catch((x: unknown) => x);
    expect(isSluiceClientError(e)).toBe(true);
    expect(e).toMatchObject({
      code: 'THROTTLED', status: 429,
      message: 'POST /v1/check answered 429 (Retry-After: 0) without a sluice error body: an intermediary (proxy, gateway) limited the request',
    });
    expect(calls).toBe(3);
  });

  it('a 429 whose Retry-After does not fit in the timeout fails at once with THROTTLED', async () => {
    let calls = 0;
    const { port } = await fakeHttp((req, res) => {
      calls++;
      req.resume();
      res.writeHead(429, { 'retry-after': 'Fri, 31 Dec 2100 23:59:59 GMT' });
      res.end();
    });
    const c = client({ url: `http://127.0.0.1:${port}`, timeoutMs: 2000 });
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 })).rejects.toMatchObject({ code: 'THROTTLED', status: 429 });
    expect(calls).toBe(1);
  });

  it('an error answer without a sluice code is REMOTE naming the HTTP status, not "undefined: error"', async () => {
    const { port } = await fakeHttp((req, res) => {
      req.resume();
      res.writeHead(418, { 'content-type': 'application/json' });
      res.end('{"oops":true}');
    });
    const c = client({ url: `http://127.0.0.1:${port}` });
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 })).rejects.toMatchObject({
      code: 'REMOTE', status: 418, message: 'HTTP 418: an error without a sluice code: no detail',
    });
  });

  it('an unreachable server fails with UNAVAILABLE after maxAttempts', async () => {
    const { port, server } = await fakeHttp(() => {});
    await new Promise<void>((r) => server.close(() => r()));
    const c = client({ url: `http://127.0.0.1:${port}`, maxAttempts: 2 });
    const e = await c.check({ policy: 'p', key: 'k', cost: 1 }).catch((x: unknown) => x);
    expect(isSluiceClientError(e)).toBe(true);
    expect(e).toMatchObject({ code: 'UNAVAILABLE', status: 503 });
    expect(c.stats().resent).toBe(1);
  });

  it('refuses subscriptions (they need the WebSocket)', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.url });
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 }, { onReady: () => {} })).rejects.toThrow(
      'onReady: subscriptions need the WebSocket transport (a ws:// url or transport: "ws")');
  });
});

describe('createClient over one WebSocket', () => {
  it.each(['binary', 'json'] as const)('%s frames give the same decisions as HTTP', async (encoding) => {
    const seq = [
      { policy: 'p', key: 'k', cost: 4 }, { policy: 'p', key: 'k', cost: 6 }, { policy: 'p', key: 'k', cost: 1 },
      { policy: 'p', key: 'k', cost: 11 }, { policy: 'd', descriptors: { tenant: 'a:b', action: 'r' }, cost: 1 },
      { policy: 'p', key: 'ключ', cost: 0 },
    ];
    const viaHttp = await startStreamServer({ policies: POLICIES });
    const viaWs = await startStreamServer({ policies: POLICIES });
    const h = client({ url: viaHttp.url });
    const w = client({ url: viaWs.wsUrl, encoding });
    const a: ClientDecision[] = [];
    const b: ClientDecision[] = [];
    for (const r of seq) {
      a.push(await h.check(r));
      b.push(await w.check(r));
    }
    expect(b).toStrictEqual(a);
    expect(b).toStrictEqual([
      decision(true, 6, 2400, 0), decision(true, 0, 6000, 0), decision(false, 0, 6000, 600),
      { ...decision(false, 0, 6000, null), reason: 'cost exceeds the limit\'s capacity' }, decision(true, 9, 600, 0, 'd'),
      decision(true, 10, 0, 0),
    ]);
    expect(w.connected).toBe(true);
    expect(w.stats()).toMatchObject({ pending: 0, connects: 1 });
  });

  it('an http:// url with transport "ws" uses /v1/stream; server errors reject with SluiceErrors', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.url, transport: 'ws' });
    await c.connect();
    expect(s.stream.stats().connections).toBe(1);
    const e = await c.check({ policy: 'p', key: '', cost: 1 }).catch((x: unknown) => x);
    expect(isSluiceError(e)).toBe(true);
    expect(e).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'key', message: 'key: must not be empty' });
  });

  it('multiplexes 100,000 checks over one connection with the exact admitted count', async () => {
    const s = await startStreamServer({ policies: POLICIES, maxKeys: 4096 });
    const c = client({ url: s.wsUrl, timeoutMs: 30_000 });
    await c.connect();
    const t0 = performance.now();
    const all = await Promise.all(Array.from({ length: 100_000 }, (_, i) => c.check({ policy: 't', key: `tenant-${i % 1000}`, cost: 1 })));
    const ms = performance.now() - t0;
    expect(all.filter((d) => d.allowed).length).toBe(60_000);
    expect(c.stats()).toMatchObject({ pending: 0, connects: 1, resent: 0 });
    console.log(`client, binary over one WebSocket: 100000 checks in ${ms.toFixed(0)} ms (${Math.round(100_000 / (ms / 1000))} /s, client and server in one process)`);
  }, 60_000);

  it('reconnects with backoff when the server goes away; checks issued meanwhile wait and succeed', async () => {
    const first = await startStreamServer({ policies: POLICIES });
    const port = first.port;
    const c = client({ url: first.wsUrl });
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    await first.close();
    await sleep(50);
    expect(c.connected).toBe(false);
    const pending = c.check({ policy: 'p', key: 'k', cost: 2 });
    await sleep(100);
    const second = await startStreamServer({ policies: POLICIES, port });
    expect(await pending).toStrictEqual(decision(true, 8, 1200, 0)); // a new server: a fresh key
    expect(c.stats()).toMatchObject({ connects: 2, pending: 0 });
    await second.close();
  });

  it('re-sends the checks in flight on a dropped connection, each answered exactly once', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const proxy = await proxyTo(s.port);
    const c = client({ url: `ws://127.0.0.1:${proxy.port}` });
    await c.connect();
    proxy.swallow = true; // the next checks never reach the server
    const three = Promise.all([1, 2, 3].map(() => c.check({ policy: 'p', key: 'k', cost: 1 })));
    await sleep(50);
    proxy.swallow = false;
    proxy.cut();
    expect(await three).toStrictEqual([decision(true, 9, 600, 0), decision(true, 8, 1200, 0), decision(true, 7, 1800, 0)]);
    expect(c.stats()).toMatchObject({ resent: 3, connects: 2, pending: 0 });
    // the server counted each once
    expect(await s.limiter.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ remaining: 7 });
  });

  it('fails the checks in flight with UNAVAILABLE when onDisconnect is "fail" (or attempts run out), never silently', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const proxy = await proxyTo(s.port);
    for (const o of [{ onDisconnect: 'fail' as const }, { maxAttempts: 1 }]) {
      const c = client({ url: `ws://127.0.0.1:${proxy.port}`, ...o });
      await c.connect();
      proxy.swallow = true;
      const lost = Promise.allSettled([c.check({ policy: 'p', key: 'k', cost: 1 }), c.check({ policy: 'p', key: 'k', cost: 1 })]);
      await sleep(50);
      proxy.swallow = false;
      proxy.cut();
      const r = await lost;
      expect(r.map((x) => x.status)).toStrictEqual(['rejected', 'rejected']);
      for (const x of r) {
        expect((x as PromiseRejectedResult).reason).toMatchObject({ code: 'UNAVAILABLE', message: 'check not answered: connection closed (1006)' });
      }
      // and it comes back for the next checks
      expect(await c.check({ policy: 'p', key: `after-${o.maxAttempts ?? 0}`, cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
      expect(c.stats().resent).toBe(0);
      await c.close();
    }
  });

  it('drops a connection that went silent (a proxy stopped forwarding, nothing closed): re-sends, reconnects, answers', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const proxy = await proxyTo(s.port);
    const c = client({ url: `ws://127.0.0.1:${proxy.port}`, pingIntervalMs: 20, pongTimeoutMs: 20, timeoutMs: 30_000 });
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    proxy.freeze();
    // sent into the dead connection: unanswered until the ping goes unanswered too, then re-sent on a new one
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 8, 1200, 0));
    expect(c.stats()).toMatchObject({ connects: 2, resent: 1, pending: 0 });
    expect(proxy.accepted).toBe(2);
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 7, 1800, 0));
    expect(c.connected).toBe(true);
    // the server counted each check once: the frozen connection never delivered the first try
    expect(await s.limiter.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ remaining: 7 });

    // onDisconnect 'fail': the check is failed naming why the client dropped the connection
    const f = client({ url: `ws://127.0.0.1:${proxy.port}`, pingIntervalMs: 20, pongTimeoutMs: 20, timeoutMs: 30_000, onDisconnect: 'fail' });
    await f.connect();
    proxy.freeze();
    await expect(f.check({ policy: 'p', key: 'f', cost: 1 })).rejects.toMatchObject({
      code: 'UNAVAILABLE', message: 'check not answered: connection closed (1006 no answer to a ping within 20 ms)',
    });
    expect(await f.check({ policy: 'p', key: 'f', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
  });

  it('a quiet, healthy connection is pinged and kept', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const proxy = await proxyTo(s.port);
    const c = client({ url: `ws://127.0.0.1:${proxy.port}`, pingIntervalMs: 10, pongTimeoutMs: 1000 });
    await c.connect();
    await sleep(200); // many ping periods of silence, every ping answered
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    expect(c.stats()).toMatchObject({ connects: 1, resent: 0 });
    expect(proxy.accepted).toBe(1);
  });

  it('abandons an upgrade that gets no answer after connectTimeoutMs and dials again', async () => {
    let accepted = 0;
    const sockets = new Set<net.Socket>();
    const mute = net.createServer((sock) => {
      accepted++;
      sockets.add(sock);
      sock.on('close', () => sockets.delete(sock));
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', () => r()));
    closers.push(() => new Promise<void>((r) => {
      for (const sock of sockets) sock.destroy();
      mute.close(() => r());
    }));
    const c = client({ url: `ws://127.0.0.1:${(mute.address() as net.AddressInfo).port}`, connectTimeoutMs: 30 });
    for (let i = 0; i < 300 && accepted < 3; i++) await sleep(10);
    expect(accepted).toBeGreaterThanOrEqual(3);
    expect(c.connected).toBe(false);
  });

  it('refuses a heartbeat or connect timeout that is not a positive integer of ms', () => {
    for (const name of ['pingIntervalMs', 'pongTimeoutMs', 'connectTimeoutMs']) {
      expect(() => createClient({ url: 'ws://127.0.0.1:9', [name]: 0 })).toThrow(new RangeError(`${name}: must be a positive integer (got 0)`));
    }
  });

  it('a check nobody answers fails with TIMEOUT after timeoutMs', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    closers.push(() => new Promise<void>((r) => {
      for (const ws of wss.clients) ws.terminate();
      wss.close(() => r());
    }));
    await new Promise((r) => wss.once('listening', r));
    const port = (wss.address() as net.AddressInfo).port;
    const c = client({ url: `ws://127.0.0.1:${port}`, timeoutMs: 300 });
    await c.connect();
    const t0 = performance.now();
    const e = await c.check({ policy: 'p', key: 'k', cost: 1 }).catch((x: unknown) => x);
    const took = performance.now() - t0;
    expect(e).toMatchObject({ code: 'TIMEOUT', status: 504, message: 'no answer within 300 ms' });
    expect(took).toBeGreaterThanOrEqual(295);
    expect(took).toBeLessThan(1000);
    expect(c.stats().pending).toBe(0);
  });

  it('waits a refused upgrade\'s Retry-After before dialling again', async () => {
    let upgrades = 0;
    const { port } = await fakeHttp((req, res) => {
      upgrades++;
      req.resume();
      res.writeHead(503, { 'retry-after': '1', 'content-type': 'text/plain' });
      res.end('draining');
    });
    const c = client({ url: `ws://127.0.0.1:${port}` });
    await sleep(1500);
    expect(upgrades).toBe(2); // at 0 and after ≥ 1 s: not every 10–100 ms as the backoff alone would
    expect(c.connected).toBe(false);
  });

  it('close() fails what is pending with CLOSED', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    closers.push(() => new Promise<void>((r) => {
      for (const ws of wss.clients) ws.terminate();
      wss.close(() => r());
    }));
    await new Promise((r) => wss.once('listening', r));
    const c = client({ url: `ws://127.0.0.1:${(wss.address() as net.AddressInfo).port}` });
    await c.connect();
    const p = c.check({ policy: 'p', key: 'k', cost: 1 }).catch((e: unknown) => e);
    await sleep(20);
    await c.close();
    expect(await p).toMatchObject({ code: 'CLOSED', message: 'client is closed' });
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 })).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('maxPending bounds what the client holds', async () => {
    const c = client({ url: 'ws://127.0.0.1:9', maxPending: 2, timeoutMs: 200 });
    const a = c.check({ policy: 'p', key: 'k', cost: 1 }).catch((e: unknown) => e);
    const b = c.check({ policy: 'p', key: 'k', cost: 1 }).catch((e: unknown) => e);
    await expect(c.check({ policy: 'p', key: 'k', cost: 1 })).rejects.toMatchObject({
      code: 'OVERLOADED', message: 'more than 2 checks pending in the client',
    });
    expect(await a).toMatchObject({ code: 'TIMEOUT' });
    expect(await b).toMatchObject({ code: 'TIMEOUT' });
  });
});

/** A WebSocket server (the `ws` library) answering every check it reads with `answer(id)`, closed after the test. */
async function fakeStream(answer: (id: number) => string | Uint8Array | Array<string | Uint8Array>): Promise<number> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  closers.push(() => new Promise<void>((r) => {
    for (const ws of wss.clients) ws.terminate();
    wss.close(() => r());
  }));
  wss.on('connection', (ws) => ws.on('message', (data: Buffer, isBinary: boolean) => {
    const ids: number[] = [];
    if (isBinary) {
      const b = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      readChecks(b, b[2] | (b[3] << 8), (id) => ids.push(id));
    } else {
      const v = JSON.parse(data.toString()) as { id: number } | Array<{ id: number }>;
      for (const c of Array.isArray(v) ? v : [v]) ids.push(c.id);
    }
    for (const id of ids) {
      const a = answer(id);
      for (const m of Array.isArray(a) ? a : [a]) ws.send(m);
    }
  }));
  await new Promise((r) => wss.once('listening', r));
  return (wss.address() as net.AddressInfo).port;
}

describe('createClient refuses answers that are not decisions', () => {
  const what = (e: unknown): unknown => (isSluiceClientError(e) ? { code: e.code, status: e.status, message: e.message } : e);

  it('over HTTP: a 200 whose body or batch item is not a decision fails that check with PROTOCOL naming the field', async () => {
    const bodies = ['null', '{}', '{"allowed":"yes","limit":10,"remaining":9,"resetAfterMs":600,"retryAfterMs":0,"policy":"p"}',
      '{"allowed":true,"limit":10,"remaining":-1,"resetAfterMs":600,"retryAfterMs":0,"policy":"p"}', '{"results":[null,{"error":7}]}'];
    let next = 0;
    const { port } = await fakeHttp((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(bodies[next++]);
    });
    const c = client({ url: `http://127.0.0.1:${port}` });
    const one = async (): Promise<unknown> => what(await c.check({ policy: 'p', key: 'k', cost: 1 }).catch((e: unknown) => e));
    const protocol = (message: string): unknown => ({ code: 'PROTOCOL', status: 502, message });
    expect(await one()).toStrictEqual(protocol('POST /v1/check answer is not a decision: must be an object (got null)'));
    expect(await one()).toStrictEqual(protocol('POST /v1/check answer is not a decision: allowed: must be true or false (got nothing)'));
    expect(await one()).toStrictEqual(protocol('POST /v1/check answer is not a decision: allowed: must be true or false (got "yes")'));
    expect(await one()).toStrictEqual(protocol('POST /v1/check answer is not a decision: remaining: must be a non-negative safe integer (got -1)'));
    // two checks of one turn share a request: each item is judged on its own
    const two = await Promise.all([one(), one()]);
    expect(two).toStrictEqual([
      protocol('POST /v1/check results[0] is not a decision: must be an object (got null)'),
      protocol('POST /v1/check results[1] is not a decision: error: must be an object'),
    ]);
    expect(next).toBe(5);
    expect(c.stats()).toMatchObject({ pending: 0, resent: 0, localDenials: 0 });
  });

  it.each(['json', 'binary'] as const)('over WebSocket %s: an answer that is not a decision fails its check with PROTOCOL, the connection stays', async (encoding) => {
    const answers = encoding === 'json'
      ? [(id: number) => `{"id":${id}}`,
        (id: number) => JSON.stringify({ id, allowed: 'false', limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 600, policy: 'p' })]
      : [(id: number) => answerFrame(id, KIND_ALLOWED, 0, 10, Number.NaN, 600, 0), (id: number) => answerFrame(id, KIND_DENIED, ANSWER_DELAYED, 10, 0, 600, -1)];
    let next = 0;
    const port = await fakeStream((id) => answers[next++](id));
    const c = client({ url: `ws://127.0.0.1:${port}`, encoding });
    const one = async (): Promise<unknown> => what(await c.check({ policy: 'p', key: 'k', cost: 1 }).catch((e: unknown) => e));
    const protocol = (id: number, problem: string): unknown => ({
      code: 'PROTOCOL', status: 502, message: `stream answer to check ${id} is not a decision: ${problem}`,
    });
    expect(await one()).toStrictEqual(protocol(1, encoding === 'json'
      ? 'allowed: must be true or false (got nothing)' : 'remaining: must be a non-negative safe integer (got NaN)'));
    // "false" is a truthy string: it must not count as admitted (nor as anything)
    expect(await one()).toStrictEqual(protocol(2, encoding === 'json'
      ? 'allowed: must be true or false (got "false")' : 'delayMs: must be a positive safe integer (got null)'));
    expect(c.stats()).toMatchObject({ pending: 0, connects: 1, resent: 0, localDenials: 0 });
    expect(c.connected).toBe(true);
  });

  it('a malformed ready event ends its subscription with PROTOCOL; an onReady that throws is a process warning, not a crash', async () => {
    const denied = (id: number): string => JSON.stringify({ id, allowed: false, limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 600, policy: 'p', subscribed: true });
    const ready = (id: number, limit: unknown): string => JSON.stringify({ id, ready: true, limit, remaining: 1, resetAfterMs: 5400, policy: 'p' });
    const port = await fakeStream((id) => [denied(id), ready(id, id === 1 ? 'ten' : 10)]);
    const c = client({ url: `ws://127.0.0.1:${port}`, encoding: 'json', honourRetryAfter: false });
    const events: unknown[] = [];
    await c.check({ policy: 'p', key: 'k', cost: 1 }, { onReady: (err, ev) => events.push([what(err), ev]) });
    for (let i = 0; i < 100 && events.length === 0; i++) await sleep(10);
    expect(events).toStrictEqual([[{ code: 'PROTOCOL', status: 502, message: 'ready event of subscription 1 is malformed: limit: must be a non-negative safe integer (got "ten")' }, undefined]]);
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      if (w.name === 'SluiceWarning') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      await c.check({ policy: 'p', key: 'k', cost: 1 }, {
        onReady: () => {
          throw new Error('handler failed');
        },
      });
      for (let i = 0; i < 100 && warnings.length === 0; i++) await sleep(10);
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toStrictEqual(['sluice client: an onReady callback threw: handler failed']);
    expect(c.stats()).toMatchObject({ pending: 0, subscriptions: 0, connects: 1 });
  });

  it.each(['http', 'ws'] as const)('over %s: a decision whose observer throws is rejected with that error, never left pending', async (kind) => {
    const s = await startStreamServer({ policies: POLICIES });
    const observe = (): void => {
      throw new Error('observer failed');
    };
    const common = { timeoutMs: 2000, maxAttempts: 1, backoff: new Backoff(), maxPending: 10, headers: undefined, observe };
    const t = kind === 'http'
      ? new HttpTransport({ ...common, base: s.url })
      : new WsTransport({
        ...common, url: s.wsUrl, encoding: 'binary', onDisconnect: 'fail', maxInFlight: 10, pingIntervalMs: 2000, pongTimeoutMs: 2000, connectTimeoutMs: 2000,
      });
    closers.push(() => t.close());
    const e = await t.check({ policy: 'p', key: 'k', cost: 1 }, undefined).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Error);
    expect((e as Error).message).toBe('observer failed');
    expect(t.stats().pending).toBe(0);
  });
});

/** A one-record binary answers frame (f64 fields as given; retryAfterMs -1 is null). */
function answerFrame(id: number, kind: number, flags: number, limit: number, remaining: number, resetAfterMs: number, retryAfterMs: number): Uint8Array {
  const w = new FrameWriter(FRAME_ANSWERS);
  w.answer(id, kind, flags, 0, limit, remaining, resetAfterMs, retryAfterMs, 'p', '', '');
  return w.finish()!;
}

describe('createClient keys with lone surrogates', () => {
  it.each([['http', 'binary'], ['ws', 'json'], ['ws', 'binary']] as const)('over %s (%s): refused with INVALID_ARGUMENT naming key, never merged with U+FFFD', async (transport, encoding) => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.url, transport, encoding });
    const outcome = async (key: string): Promise<unknown> => {
      const r = await c.check({ policy: 'p', key, cost: 1 }).then((d) => d, (e: unknown) => e);
      return isSluiceError(r) ? { code: r.code, field: r.field, message: r.message } : r;
    };
    const refused = { code: 'INVALID_ARGUMENT', field: 'key', message: 'key: must be well-formed Unicode (no lone surrogates)' };
    expect([await outcome('\ud800lone'), await outcome('\udc00lone'), await outcome('\ufffdlone'), await outcome('lone\ud83d'),
      await outcome('\ud83d\ude00lone'), await outcome('\ufffdlone')]).toStrictEqual([
      refused, refused, decision(true, 9, 600, 0), refused, decision(true, 9, 600, 0), decision(true, 8, 1200, 0),
    ]);
    // the engine saw two keys: U+FFFD (twice) and the emoji; the refused ones spent nothing
    expect(await s.limiter.check({ policy: 'p', key: '\ufffdlone', cost: 0 })).toMatchObject({ remaining: 8 });
    expect(c.stats()).toMatchObject({ pending: 0, resent: 0 });
  });
});

describe('createClient honours Retry-After', () => {
  it.each(['http', 'ws'] as const)('over %s: repeats a denial locally until its wait has passed, then asks the server', async (transport) => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.url, transport });
    expect(await c.check({ policy: 'p', key: 'k', cost: 10 })).toStrictEqual(decision(true, 0, 6000, 0));
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(false, 0, 6000, 600));
    // the server would now admit (its clock moved), but the client has not waited 600 ms: answered locally
    s.clock.advance(600);
    const local = await c.check({ policy: 'p', key: 'k', cost: 1 });
    expect(local.local).toBe(true);
    expect(local.allowed).toBe(false);
    expect(local.retryAfterMs).toBeGreaterThan(0);
    expect(local.retryAfterMs).toBeLessThanOrEqual(600);
    expect(c.stats().localDenials).toBe(1);
    // another cost, a peek and another key are not covered by that denial: they go to the server
    expect(await c.check({ policy: 'p', key: 'k', cost: 2 })).toStrictEqual(decision(false, 1, 5400, 600));
    expect(await c.check({ policy: 'p', key: 'k', cost: 0 })).toStrictEqual(decision(true, 1, 5400, 0));
    expect(await c.check({ policy: 'p', key: 'other', cost: 1 })).toStrictEqual(decision(true, 9, 600, 0));
    await sleep(650);
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 0, 6000, 0));
    expect(c.stats().localDenials).toBe(1);
  });

  it.each(['http', 'ws'] as const)('over %s: a denial is reused for at most maxLocalDenialMs, so a reset or a reload is seen', async (transport) => {
    // one a day: denied until the day's end, which is 6,360,000 ms after EPOCH_MINUTE
    const DAY: Record<string, PolicySpec> = { day: { algorithm: 'fixed_window', limit: 1, period: 86_400_000 } };
    const s = await startStreamServer({ policies: DAY });
    const c = client({ url: s.url, transport });
    const check = (): Promise<ClientDecision> => c.check({ policy: 'day', key: 'k', cost: 1 });
    const denied = (retryAfterMs: number, local?: true): ClientDecision => ({
      allowed: false, limit: 1, remaining: 0, resetAfterMs: retryAfterMs, retryAfterMs, policy: 'day', ...(local ? { local } : {}),
    });
    // the client's clock (performance.now) moves only when the test moves it; the server's is the ManualClock
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      expect(await check()).toMatchObject({ allowed: true, remaining: 0 });
      expect(await check()).toStrictEqual(denied(6_360_000));
      await s.limiter.reset({ policy: 'day', key: 'k' }); // what DELETE /v1/keys/day/k does
      expect(await check()).toStrictEqual(denied(6_360_000, true));
      vi.advanceTimersByTime(999);
      // still within the bound: local, with the server's wait less the time gone
      expect(await check()).toStrictEqual(denied(6_359_001, true));
      vi.advanceTimersByTime(1);
      // the bound has passed: the server is asked, and the reset key admits
      expect(await check()).toMatchObject({ allowed: true, remaining: 0 });
      expect(c.stats().localDenials).toBe(2);
      // the same for a reload that raises the limit: denied (and remembered afresh), then seen after 1,000 ms
      expect(await check()).toStrictEqual(denied(6_360_000));
      await s.limiter.reload({ day: { algorithm: 'fixed_window', limit: 5, period: 86_400_000 } });
      expect(await check()).toStrictEqual(denied(6_360_000, true));
      vi.advanceTimersByTime(1000);
      expect(await check()).toMatchObject({ allowed: true, limit: 5 });
      expect(c.stats().localDenials).toBe(3);
    } finally {
      vi.useRealTimers();
    }
  });

  it('maxLocalDenialMs must be a positive integer', () => {
    for (const v of [0, -1, 1.5, Number.NaN]) {
      expect(() => createClient({ url: 'http://127.0.0.1:9', maxLocalDenialMs: v })).toThrow(new RangeError(`maxLocalDenialMs: must be a positive integer (got ${v})`));
    }
  });

  it('can be turned off', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.wsUrl, honourRetryAfter: false });
    await c.check({ policy: 'p', key: 'k', cost: 10 });
    await c.check({ policy: 'p', key: 'k', cost: 1 });
    s.clock.advance(600);
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 })).toStrictEqual(decision(true, 0, 6000, 0));
    expect(c.stats().localDenials).toBe(0);
  });
});

describe('createClient subscriptions (onReady)', () => {
  it('gets the push when the denied key becomes admissible', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.wsUrl });
    await c.check({ policy: 'p', key: 'k', cost: 10 });
    const events: Array<[Error | null, ReadyEvent | undefined]> = [];
    const d = await c.check({ policy: 'p', key: 'k', cost: 1 }, { onReady: (err, ev) => events.push([err, ev]) });
    expect(d).toStrictEqual({ ...decision(false, 0, 6000, 600), subscribed: true });
    expect(c.stats().subscriptions).toBe(1);
    // the same check again, answered from the remembered denial: no subscription of its own
    const repeat = await c.check({ policy: 'p', key: 'k', cost: 1 });
    expect({ local: repeat.local, subscribed: repeat.subscribed }).toStrictEqual({ local: true, subscribed: undefined });
    expect(c.stats().subscriptions).toBe(1);
    s.clock.advance(599);
    s.stream.tick();
    await sleep(50);
    expect(events).toStrictEqual([]);
    s.clock.advance(1);
    s.stream.tick();
    for (let i = 0; i < 100 && events.length === 0; i++) await sleep(10);
    expect(events).toStrictEqual([[null, { limit: 10, remaining: 1, resetAfterMs: 5400, policy: 'p' }]]);
    expect(c.stats().subscriptions).toBe(0);
  });

  it('a push from a peek Redis did not answer carries degraded and its rule, in both encodings', async () => {
    for (const encoding of ['binary', 'json'] as const) {
      const clock = new ManualClock();
      const { store, fail } = flakyStore(new MemoryStore({ clock: clock.now, overLimitCache: false }));
      const s = await startStreamServer({ policies: { p: { ...POLICIES.p, consistency: 'strict', onStoreError: 'local' } }, store, clock });
      const c = client({ url: s.wsUrl, encoding });
      await c.check({ policy: 'p', key: 'k', cost: 10 });
      const events: Array<[Error | null, ReadyEvent | undefined]> = [];
      expect(await c.check({ policy: 'p', key: 'k', cost: 1 }, { onReady: (err, ev) => events.push([err, ev]) })).toMatchObject({ subscribed: true });
      fail(true);
      s.clock.advance(700);
      s.stream.tick();
      for (let i = 0; i < 100 && events.length === 0; i++) await sleep(10);
      expect(events.length, encoding).toBe(1);
      expect(events[0][1], encoding).toMatchObject({ limit: 10, remaining: 1, policy: 'p', degraded: true, degradedBy: 'local' });
    }
  });

  it('an admitted check is not subscribed; a dropped connection ends a subscription with UNAVAILABLE', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = client({ url: s.wsUrl, encoding: 'json' });
    const calls: Array<Error | null> = [];
    expect(await c.check({ policy: 'p', key: 'k', cost: 10 }, { onReady: (e) => calls.push(e) })).toStrictEqual({
      ...decision(true, 0, 6000, 0), subscribed: false,
    });
    expect(await c.check({ policy: 'p', key: 'k', cost: 1 }, { onReady: (e) => calls.push(e) })).toMatchObject({ subscribed: true });
    await s.server.close();
    for (let i = 0; i < 100 && calls.length === 0; i++) await sleep(10);
    expect(calls.length).toBe(1);
    expect(calls[0]).toMatchObject({ code: 'UNAVAILABLE', message: 'subscription ended: connection closed (1001 server shutting down)' });
  });
});

describe('Backoff', () => {
  it('draws each delay uniformly under a ceiling that doubles up to the maximum', () => {
    const b = new Backoff({ initialDelayMs: 50, maxDelayMs: 1000, random: () => 0.5 });
    const delays = Array.from({ length: 7 }, () => b.next());
    expect(delays).toStrictEqual([25, 50, 100, 200, 400, 500, 500]);
    b.reset();
    expect(b.next()).toBe(25);
    const lo = new Backoff({ random: () => 0 });
    const hi = new Backoff({ random: () => 0.999999 });
    expect([lo.next(), lo.next(), hi.next(), hi.next()]).toStrictEqual([0, 0, 50, 100]);
    expect(() => new Backoff({ initialDelayMs: 0 })).toThrow('reconnect.initialDelayMs: must be a positive number of ms (got 0)');
  });
});
