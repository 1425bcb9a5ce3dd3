/**
 * The HTTP front (src/server/http.ts) against the real uWebSockets.js server on 127.0.0.1, port 0, with a
 * frozen, test-controlled clock. Every assertion is exact: status, content type, headers, body.
 *
 * Some tests pin defects found while this suite was written (now fixed): oversize bodies, bad UTF-8 keys, stray parameters.
 * The shared cases through HTTP (08's wait rounding, 02, 08 and 16, awkward keys) are test/integration/http-cases.test.ts.
 */
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/config/default.js';
import type { Decision } from '../../src/types/decision.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { postJson, query, send, ServerPool, spawnServe, type Answer } from '../helpers/server.js';
import { checkUrl, expectProblem, rateHeaders } from '../helpers/http-answers.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());

const DEFAULT_POLICY_HEADER = '"free";q=100;w=60;sluice-burst=100, "global";q=200000;w=60;sluice-burst=20000';


// ---------------------------------------------------------------------------------------------------------

describe('GET /v1/check with the built-in default config', () => {
  it('101 checks on one key in a frozen minute: exactly 100 admitted (remaining 99..0), the 101st denied', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    for (let i = 0; i < 100; i++) {
      const a = await send(`${s.url}/v1/check?policy=free&key=tenant-1`);
      const d = { allowed: true, limit: 100, remaining: 99 - i, resetAfterMs: 600 * (i + 1), retryAfterMs: 0, policy: 'free' };
      expect({ status: a.status, contentType: a.contentType, body: a.json }, `check #${i + 1}`)
        .toStrictEqual({ status: 200, contentType: 'application/json', body: d });
      expect(rateHeaders(a), `check #${i + 1}`).toStrictEqual({
        ratelimit: `"free";r=${99 - i};t=1`, // the next token is 600 ms away after every one of them
        'ratelimit-policy': DEFAULT_POLICY_HEADER,
        'retry-after': null,
      });
    }
    const last = await send(`${s.url}/v1/check?policy=free&key=tenant-1`);
    expect({ status: last.status, contentType: last.contentType, body: last.json }).toStrictEqual({
      status: 200,
      contentType: 'application/json',
      body: { allowed: false, limit: 100, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 600, policy: 'free' },
    });
    // t is the wait (600 ms → 1 s), not the 60 s to full; no Retry-After on a 200
    expect(rateHeaders(last)).toStrictEqual({ ratelimit: '"free";r=0;t=1', 'ratelimit-policy': DEFAULT_POLICY_HEADER, 'retry-after': null });
    // Another tenant is untouched.
    const other = await send(`${s.url}/v1/check?policy=free&key=tenant-2`);
    expect(other.json).toStrictEqual({ allowed: true, limit: 100, remaining: 99, resetAfterMs: 600, retryAfterMs: 0, policy: 'free' });
  });

  it('a key, descriptors in the query and descriptors in a JSON body all name the same counter (key = joined form)', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const viaBody = await postJson(`${s.url}/v1/check`, { policy: 'free', descriptors: { tenant: 'acme', action: 'read' } });
    const viaQuery = await send(`${s.url}/v1/check?policy=free&tenant=acme&action=read`);
    const viaKey = await send(checkUrl(s, { policy: 'free', key: 'acme:read' }));
    const viaBodyKey = await postJson(`${s.url}/v1/check`, { policy: 'free', key: 'acme:read', cost: 2 });
    const d = (remaining: number, reset: number): Decision =>
      ({ allowed: true, limit: 100, remaining, resetAfterMs: reset, retryAfterMs: 0, policy: 'free' });
    expect([viaBody, viaQuery, viaKey, viaBodyKey].map((a) => [a.status, a.json])).toStrictEqual([
      [200, d(99, 600)], [200, d(98, 1200)], [200, d(97, 1800)], [200, d(95, 3000)],
    ]);
    expect(rateHeaders(viaBodyKey)).toStrictEqual({ ratelimit: '"free";r=95;t=1', 'ratelimit-policy': DEFAULT_POLICY_HEADER, 'retry-after': null });
  });

  it('cost 0 peeks without spending; cost above the burst is denied for good (retryAfterMs null, no Retry-After)', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const peek = await send(`${s.url}/v1/check?policy=free&key=p&cost=0`);
    expect(peek.json).toStrictEqual({ allowed: true, limit: 100, remaining: 100, resetAfterMs: 0, retryAfterMs: 0, policy: 'free' });
    expect(peek.headers.get('ratelimit')).toBe('"free";r=100'); // full: no more quota is coming, so no t
    const never = await send(`${s.url}/v1/check?policy=free&key=p&cost=101`);
    expect(never.status).toBe(200);
    expect(never.json).toStrictEqual({
      allowed: false, limit: 100, remaining: 100, resetAfterMs: 0, retryAfterMs: null, policy: 'free',
      reason: "cost exceeds the limit's capacity",
    });
    expect(rateHeaders(never)).toStrictEqual({ ratelimit: '"free";r=100', 'ratelimit-policy': DEFAULT_POLICY_HEADER, 'retry-after': null });
    const all = await send(`${s.url}/v1/check?policy=free&key=p&cost=100`);
    expect(all.json).toStrictEqual({ allowed: true, limit: 100, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'free' });
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('error answers: application/problem+json naming the field', () => {
  const J = { 'content-type': 'application/json' };
  type Req = { path: string; init?: RequestInit };
  const get = (p: string): Req => ({ path: p });
  const post = (body: string | Uint8Array, headers: Record<string, string> = J): Req =>
    ({ path: '/v1/check', init: { method: 'POST', headers, body } });

  const table: Array<[string, Req, number, string]> = [
    ['missing policy', get('/v1/check?key=k'), 400, 'policy'],
    ['empty query', get('/v1/check'), 400, 'policy'],
    ['unknown policy', get('/v1/check?policy=nope&key=k'), 400, 'policy'],
    ['empty policy', get('/v1/check?policy=&key=k'), 400, 'policy'],
    ['policy given twice', get('/v1/check?policy=free&policy=paid&key=k'), 400, 'policy'],
    ['cost -1', get('/v1/check?policy=free&key=k&cost=-1'), 400, 'cost'],
    ['cost 1.5', get('/v1/check?policy=free&key=k&cost=1.5'), 400, 'cost'],
    ['cost x', get('/v1/check?policy=free&key=k&cost=x'), 400, 'cost'],
    ['cost empty', get('/v1/check?policy=free&key=k&cost='), 400, 'cost'],
    ['cost 1e3', get('/v1/check?policy=free&key=k&cost=1e3'), 400, 'cost'],
    ['cost beyond 2^53', get('/v1/check?policy=free&key=k&cost=9007199254740993'), 400, 'cost'],
    ['cost given twice', get('/v1/check?policy=free&key=k&cost=1&cost=1'), 400, 'cost'],
    ['empty key', get('/v1/check?policy=free&key='), 400, 'key'],
    ['key of 1025 bytes', get(`/v1/check?policy=free&key=${'a'.repeat(1025)}`), 400, 'key'],
    ['key of 513 chars = 1026 bytes', get(`/v1/check?${query({ policy: 'free', key: 'é'.repeat(513) })}`), 400, 'key'],
    ['key given twice', get('/v1/check?policy=free&key=a&key=b'), 400, 'key'],
    ['unknown descriptor param', get('/v1/check?policy=free&tenant=a&action=b&foo=c'), 400, 'descriptors.foo'],
    ['missing descriptor', get('/v1/check?policy=free&tenant=a'), 400, 'descriptors.action'],
    ['no key and no descriptors', get('/v1/check?policy=free'), 400, 'key'],
    ['bad JSON', post('{'), 400, 'body'],
    ['empty body', post(''), 400, 'body'],
    ['JSON array', post('[{"policy":"free","key":"a"}]'), 400, 'body'],
    ['JSON string', post('"free"'), 400, 'body'],
    ['JSON null', post('null'), 400, 'body'],
    ['JSON number', post('42'), 400, 'body'],
    ['unknown body field', post('{"policy":"free","key":"a","x":1}'), 400, 'x'],
    ['missing policy in body', post('{"key":"a"}'), 400, 'policy'],
    ['policy not a string', post('{"policy":5,"key":"a"}'), 400, 'policy'],
    ['unknown policy in body', post('{"policy":"nope","key":"a"}'), 400, 'policy'],
    ['cost null', post('{"policy":"free","key":"a","cost":null}'), 400, 'cost'],
    ['cost "1"', post('{"policy":"free","key":"a","cost":"1"}'), 400, 'cost'],
    ['cost 1.5 in body', post('{"policy":"free","key":"a","cost":1.5}'), 400, 'cost'],
    ['cost -1 in body', post('{"policy":"free","key":"a","cost":-1}'), 400, 'cost'],
    ['key not a string', post('{"policy":"free","key":5}'), 400, 'key'],
    ['empty key in body', post('{"policy":"free","key":""}'), 400, 'key'],
    ['descriptors not an object', post('{"policy":"free","descriptors":"x"}'), 400, 'descriptors'],
    ['unknown descriptor in body', post('{"policy":"free","descriptors":{"tenant":"a","action":"b","zone":"c"}}'), 400, 'descriptors.zone'],
    ['descriptor not a string', post('{"policy":"free","descriptors":{"tenant":"a","action":1}}'), 400, 'descriptors.action'],
    ['field beside checks', post('{"checks":[{"policy":"free","key":"a"}],"policy":"free"}'), 400, 'policy'],
    ['empty checks', post('{"checks":[]}'), 400, 'checks'],
    ['checks not an array', post('{"checks":{"0":{"policy":"free","key":"a"}}}'), 400, 'checks'],
    ['checks null', post('{"checks":null}'), 400, 'checks'],
    ['unknown path', get('/nope'), 404, 'path'],
    ['root path', get('/'), 404, 'path'],
    ['near-miss path', get('/v1/checks?policy=free&key=a'), 404, 'path'],
    ['POST to an unknown path', { path: '/v1/nope', init: { method: 'POST', headers: J, body: '{}' } }, 404, 'path'],
    ['batch over maxBatchItems', post(JSON.stringify({ checks: Array.from({ length: 9 }, () => ({ policy: 'free', key: 'a' })) })), 413, 'checks'],
    ['POST without a content type', post(new TextEncoder().encode('{"policy":"free","key":"a"}'), {}), 415, 'content-type'],
    ['POST as text/plain', post('{"policy":"free","key":"a"}', { 'content-type': 'text/plain' }), 415, 'content-type'],
    ['POST as application/jsonx', post('{"policy":"free","key":"a"}', { 'content-type': 'application/jsonx' }), 415, 'content-type'],
    ['POST as form', post('policy=free&key=a', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 'content-type'],
  ];

  const rows = table.map(([name, req, status, field]) => ({ name, req, status, field }));
  it.each(rows)('$name → $status $field', async ({ name, req, status, field }) => {
    const s = await pool.start({ policies: defaultConfig().policies, maxBatchItems: 8 });
    const a = await send(s.url + req.path, req.init);
    expectProblem(a, status, field, name);
    expect(a.headers.get('ratelimit')).toBeNull();
    // Nothing was spent: the first real check still sees a full bucket.
    const after = await send(`${s.url}/v1/check?policy=free&key=a`);
    expect(after.json).toMatchObject({ allowed: true, remaining: 99 });
  });

  it('exact problem bodies for a few representative errors', async () => {
    const s = await pool.start({ policies: defaultConfig().policies, maxBatchItems: 2 });
    expect((await send(`${s.url}/v1/check?policy=nope&key=k`)).json).toStrictEqual({
      type: 'about:blank', title: 'Bad Request', status: 400, detail: 'policy: unknown policy "nope"', field: 'policy', code: 'UNKNOWN_POLICY',
    });
    expect((await send(`${s.url}/v1/check?policy=free&key=k&cost=1.5`)).json).toStrictEqual({
      type: 'about:blank', title: 'Bad Request', status: 400, detail: 'cost: must be a non-negative safe integer (got "1.5")',
      field: 'cost', code: 'INVALID_ARGUMENT',
    });
    expect((await postJson(`${s.url}/v1/check`, { checks: [1, 2, 3] })).json).toStrictEqual({
      type: 'about:blank', title: 'Content Too Large', status: 413, detail: 'checks: at most 2 items per batch (got 3)', field: 'checks', code: 'TOO_LARGE',
    });
  });

  it.each(['PUT', 'DELETE', 'PATCH'])('%s /v1/check → 405 with Allow: GET, POST', async (method) => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await send(`${s.url}/v1/check?policy=free&key=a`, { method });
    expectProblem(a, 405, 'method');
    expect(a.headers.get('allow')).toBe('GET, POST');
    expect(a.json.detail).toBe(`method: ${method} is not allowed on /v1/check (GET or POST)`);
  });

  it('the GET-only routes answer another method 405 with Allow: GET, like /v1/check; an unknown path stays 404', async () => {
    const s = await pool.start({ policies: defaultConfig().policies, statusPage: true });
    for (const path of ['/healthz', '/readyz', '/metrics', '/', '/status', '/v1/status']) {
      for (const method of ['PATCH', 'POST', 'DELETE']) {
        const a = await send(`${s.url}${path}`, { method });
        expect({ path, method, status: a.status, allow: a.headers.get('allow'), detail: a.json.detail, code: a.json.code })
          .toStrictEqual({ path, method, status: 405, allow: 'GET', detail: `method: ${method} is not allowed on ${path} (GET)`, code: 'METHOD_NOT_ALLOWED' });
      }
      expect((await send(`${s.url}${path}`)).status, path).toBe(200);
    }
    expect((await send(`${s.url}/nope`, { method: 'PATCH' })).status).toBe(404);
  });

  it('a body of exactly maxBodyBytes is accepted; content type with parameters is accepted', async () => {
    const body = '{"policy":"free","key":"edge"}';
    const padded = body + ' '.repeat(64 - body.length);
    const s = await pool.start({ policies: defaultConfig().policies, maxBodyBytes: 64 });
    const a = await postJson(`${s.url}/v1/check`, padded);
    expect([a.status, a.json]).toStrictEqual([200, { allowed: true, limit: 100, remaining: 99, resetAfterMs: 600, retryAfterMs: 0, policy: 'free' }]);
    const b = await postJson(`${s.url}/v1/check`, body, { 'content-type': 'Application/JSON; charset=utf-8' });
    expect([b.status, b.json?.remaining]).toStrictEqual([200, 98]);
  });

  it('a body over maxBodyBytes gets 413 and the server survives', async () => {
    // In a child process: the defect takes down the whole process (an uncaught exception thrown by
    // res.close() after res.end() in readBody, src/server/http.ts), which would kill the test worker.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-body-'));
    const file = path.join(dir, 'small-body.yaml');
    writeFileSync(file, 'policies:\n  p: { algorithm: fixed_window, limit: 10, period: 1m }\nserver:\n  maxBodyBytes: 64\n');
    const child = await spawnServe(['--config', file]);
    try {
      const big = JSON.stringify({ policy: 'p', key: 'k'.repeat(100) });
      let answer: string;
      try {
        const a = await postJson(`${child.url}/v1/check`, big);
        answer = `${a.status} ${a.contentType} ${a.json?.field}`;
      } catch (e) {
        answer = `no answer: ${(e as Error).message} ${String((e as { cause?: { code?: string } }).cause?.code ?? '')}`;
      }
      await new Promise((r) => setTimeout(r, 200));
      let health: string;
      try {
        health = String((await send(`${child.url}/healthz`)).status);
      } catch (e) {
        health = `no answer: ${String((e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message)}`;
      }
      const aliveAfter = child.child.exitCode === null && child.child.signalCode === null;
      // The 413 path must also end the request's in-flight count, or a later drain waits for it forever.
      child.child.kill('SIGTERM');
      const exit = await Promise.race([child.exited, new Promise((r) => setTimeout(() => r('no exit within 5 s'), 5000))]);
      expect({ answer, health, aliveAfter, exit, stderr: child.stderr() }).toStrictEqual({
        answer: '413 application/problem+json body', health: '200', aliveAfter: true, exit: { code: 0, signal: null }, stderr: '',
      });
    } finally {
      await child.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an unknown query parameter beside key= is refused, not silently ignored', async () => {
    // `cots=5` (a typo for cost) is taken as a descriptor and then dropped because key= wins (codec.ts
    // checkFromQuery + keys/derive.ts keyOf): the check is charged cost 1 and answered 200.
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 10, period: 60_000 } } });
    const a = await send(`${s.url}/v1/check?policy=p&key=k&cots=5`);
    expect({ status: a.status, field: a.json?.field }).toStrictEqual({ status: 400, field: expect.stringMatching(/(^|\.)cots$/) });
  });
});

// ---------------------------------------------------------------------------------------------------------

describe('503 answers', () => {
  it('a batch past maxPending: the items that do not fit get OVERLOADED (503) in their slot', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 5, period: 60_000 } }, maxPending: 1 });
    const a = await postJson(`${s.url}/v1/check`, { checks: [{ policy: 'p', key: 'k' }, { policy: 'p', key: 'k' }] });
    expect(a.status).toBe(200);
    expect(a.json).toStrictEqual({
      results: [
        { allowed: true, limit: 5, remaining: 4, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'p' },
        { error: { code: 'OVERLOADED', detail: 'more than 1 checks pending', status: 503 } }, // no field: nothing to prefix
      ],
    });
  });

  it('after the limiter is closed: 503 problem+json with Retry-After: 1, code CLOSED', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 5, period: 60_000 } } });
    await s.limiter.close();
    const a = await send(`${s.url}/v1/check?policy=p&key=k`);
    expect({ status: a.status, contentType: a.contentType, retryAfter: a.headers.get('retry-after'), body: a.json }).toStrictEqual({
      status: 503, contentType: 'application/problem+json', retryAfter: '1',
      body: { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'limiter is closed', code: 'CLOSED' },
    });
    expect((await send(`${s.url}/healthz`)).status).toBe(200);
  });
});

describe('POST /v1/check', () => {
  it('a single check by key and by descriptors', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await postJson(`${s.url}/v1/check`, { policy: 'paid', key: 'tenant-9', cost: 2000 });
    expect({ status: a.status, contentType: a.contentType, body: a.json }).toStrictEqual({
      status: 200, contentType: 'application/json',
      body: { allowed: true, limit: 10_000, remaining: 0, resetAfterMs: 12_000, retryAfterMs: 0, policy: 'paid' },
    });
    expect(rateHeaders(a)).toStrictEqual({
      // one token every 6 ms: t rounds 6 ms up to 1 s; the burst of 2000 is visible beside q=10000
      ratelimit: '"paid";r=0;t=1', 'ratelimit-policy': '"paid";q=10000;w=60;sluice-burst=2000, "global";q=200000;w=60;sluice-burst=20000', 'retry-after': null,
    });
    const denied = await postJson(`${s.url}/v1/check`, { policy: 'paid', key: 'tenant-9' });
    expect(denied.json).toStrictEqual({ allowed: false, limit: 10_000, remaining: 0, resetAfterMs: 12_000, retryAfterMs: 6, policy: 'paid' });
    expect(rateHeaders(denied)).toMatchObject({ ratelimit: '"paid";r=0;t=1', 'retry-after': null });
    const d = await postJson(`${s.url}/v1/check`, { policy: 'free', descriptors: { tenant: 't', action: 'write' }, cost: 3 });
    expect(d.json).toStrictEqual({ allowed: true, limit: 100, remaining: 97, resetAfterMs: 1800, retryAfterMs: 0, policy: 'free' });
  });

  it('a batch of mixed valid and invalid items: one result per item, in order; errors carry checks[i].field', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await postJson(`${s.url}/v1/check`, {
      checks: [
        { policy: 'free', key: 'b-1' },
        { policy: 'free', key: '' },
        { policy: 'nope', key: 'x' },
        { policy: 'free', key: 'b-1', cost: '1' },
        { policy: 'free', key: 'b-1', bogus: true },
        { policy: 'free', descriptors: { tenant: 'b', action: 'x' } },
        { policy: 'free', key: 'b-1', cost: 2 },
        { policy: 'free' },
        { policy: 'free', descriptors: { tenant: 'b', action: 'x', zone: 'eu' } },
        { policy: 'free', key: 'b-1', cost: 98 },
      ],
    });
    expect({ status: a.status, contentType: a.contentType }).toStrictEqual({ status: 200, contentType: 'application/json' });
    expect(a.headers.get('ratelimit')).toBeNull();
    const ok = (remaining: number, resetAfterMs: number, allowed = true, retryAfterMs = 0) =>
      ({ allowed, limit: 100, remaining, resetAfterMs, retryAfterMs, policy: 'free' });
    const err = (i: number, field: string, code = 'INVALID_ARGUMENT') => ({
      error: { code, detail: expect.stringMatching(new RegExp(`^checks\\[${i}\\]\\.${field.replace(/[.[\]]/g, '\\$&')}: `)), status: 400, field: `checks[${i}].${field}` },
    });
    expect(a.json).toStrictEqual({
      results: [
        ok(99, 600),
        err(1, 'key'),
        err(2, 'policy', 'UNKNOWN_POLICY'),
        err(3, 'cost'),
        err(4, 'bogus'),
        ok(99, 600),
        ok(97, 1800),
        err(7, 'key'),
        err(8, 'descriptors.zone'),
        ok(97, 1800, false, 600), // needs 98 of 97: one token, 600 ms
      ],
    });
  });

  it('batch items are decided in order, exactly as one-by-one checks', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 3, period: 60_000 } } });
    const a = await postJson(`${s.url}/v1/check`, { checks: Array.from({ length: 5 }, () => ({ policy: 'p', key: 'k' })) });
    expect((a.json.results as Decision[]).map((d) => [d.allowed, d.remaining])).toStrictEqual([
      [true, 2], [true, 1], [true, 0], [false, 0], [false, 0],
    ]);
  });

  it('a batch item that is not an object is named checks[i], not "checks[i]." (trailing dot)', async () => {
    // codec.ts checkFromJson: invalidArgument(prefix || 'body', ...) with prefix "checks[0]." keeps the dot.
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await postJson(`${s.url}/v1/check`, { checks: [5, null, [], { policy: 'free', key: 'a' }] });
    expect(a.status).toBe(200);
    const fields = (a.json.results as Array<{ error?: { field: string; detail: string } }>).map((r) => r.error?.field ?? 'ok');
    expect(fields).toStrictEqual(['checks[0]', 'checks[1]', 'checks[2]', 'ok']);
  });
});

// ---------------------------------------------------------------------------------------------------------

/** One raw HTTP/1.1 connection, to hold a request open across server.close(). */
function rawConnection(port: number): Promise<{ socket: net.Socket; received: () => string }> {
  return new Promise((resolve, reject) => {
    let data = '';
    const socket = net.connect(port, '127.0.0.1', () => resolve({ socket, received: () => data }));
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (data += d));
    socket.on('error', () => undefined); // the server closes every connection when it stops
    socket.once('error', reject);
  });
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('health and readiness', () => {
  it('/healthz and /readyz answer 200 with JSON', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const h = await send(`${s.url}/healthz`);
    expect([h.status, h.contentType, h.json]).toStrictEqual([200, 'application/json', { status: 'ok' }]);
    const r = await send(`${s.url}/readyz`);
    expect([r.status, r.contentType, r.json]).toStrictEqual([200, 'application/json', { status: 'ready', policies: s.limiter.version }]);
    expect(s.limiter.version).toMatch(/^[0-9a-f]{12}$/);
  });

  it('/readyz is 503 while closing; a request in flight still gets its answer; new connections are refused', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const inFlight = await rawConnection(s.port);
    const probe = await rawConnection(s.port);
    const body = '{"policy":"free","key":"draining"}';
    // Headers and half the body: the request is in flight until the rest arrives.
    inFlight.socket.write(`POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`);
    await new Promise((r) => setTimeout(r, 250));
    let closed = false;
    const closing = s.server.close().then(() => (closed = true));
    probe.socket.write('GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n');
    await until(() => probe.received().includes('draining'), '/readyz answer');
    expect(probe.received()).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n/);
    expect(probe.received()).toMatch(/\r\nContent-Type: application\/json\r\n/);
    expect(probe.received().endsWith('\r\n\r\n{"status":"draining"}')).toBe(true);
    await expect(send(`${s.url}/healthz`)).rejects.toThrow();
    expect(closed).toBe(false);
    inFlight.socket.write(body.slice(10));
    await closing;
    await until(() => inFlight.received().includes('}'), 'the in-flight answer');
    expect(inFlight.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(inFlight.received().endsWith('{"allowed":true,"limit":100,"remaining":99,"resetAfterMs":600,"retryAfterMs":0,"policy":"free"}')).toBe(true);
    inFlight.socket.destroy();
    probe.socket.destroy();
  });

  it('a check that arrives on a kept-alive connection after close() began is refused with 503, not decided', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const holder = await rawConnection(s.port);
    const late = await rawConnection(s.port);
    late.socket.write('GET /v1/check?policy=free&tenant=t&action=a HTTP/1.1\r\nHost: x\r\n\r\n');
    await until(() => late.received().includes('"remaining":99'), 'the first answer');
    const body = '{"policy":"free","key":"held"}';
    holder.socket.write(`POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
    await new Promise((r) => setTimeout(r, 250));
    const closing = s.server.close();
    const before = late.received().length;
    late.socket.write('GET /v1/check?policy=free&tenant=t&action=a HTTP/1.1\r\nHost: x\r\n\r\n');
    await until(() => late.received().length > before && late.received().endsWith('}'), 'the late answer');
    const answer = late.received().slice(before);
    expect(answer).toMatch(/^HTTP\/1\.1 503 Service Unavailable\r\n/);
    expect(answer).toMatch(/\r\nRetry-After: 1\r\n/);
    expect(JSON.parse(answer.slice(answer.indexOf('{')))).toMatchObject({ status: 503, code: 'CLOSED', field: 'server' });
    holder.socket.write(body.slice(5));
    await closing;
    // the refused check spent nothing: the key still has 99 of its 100
    expect((await s.limiter.inspect({ policy: 'free', descriptors: { tenant: 't', action: 'a' } })).limits[0]).toMatchObject({ remaining: 99 });
    holder.socket.destroy();
    late.socket.destroy();
  });
});

// ---------------------------------------------------------------------------------------------------------

describe.each([0, 2])('the global guard (shards: %i)', (shards) => {
  // Each tenant may spend 5 a minute; all tenants together 8 a second. Clock frozen on a whole minute.
  const policies: Record<string, PolicySpec> = {
    tenant: { algorithm: 'fixed_window', limit: 5, period: 60_000, guard: 'edge' },
    edge: { algorithm: 'fixed_window', limit: 8, period: 1000 },
  };
  /** A tenant-bound decision one second into the minute. */
  const T = (remaining: number, allowed = true): Decision =>
    ({ allowed, limit: 5, remaining, resetAfterMs: 59_000, retryAfterMs: allowed ? 0 : 59_000, policy: 'tenant' });
  const E = (remaining: number, allowed = true): Decision =>
    ({ allowed, limit: 8, remaining, resetAfterMs: 1000, retryAfterMs: allowed ? 0 : 1000, policy: 'edge' });

  it('the 9th aggregate request is denied by the guard though tenant B has quota; a denied check consumes nothing', async () => {
    const s = await pool.start({ policies, shards });
    const check = async (key: string): Promise<Answer> => send(`${s.url}/v1/check?policy=tenant&key=${key}`);
    const got: Array<[string, Decision]> = [];
    for (let i = 0; i < 5; i++) got.push(['A', (await check('A')).json]);
    for (let i = 0; i < 3; i++) got.push(['B', (await check('B')).json]);
    const ninth = await check('B');
    got.push(['B', ninth.json]);
    got.push(['B', (await check('B')).json]);
    const t0 = { allowed: true, limit: 5, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'tenant' };
    expect(got).toStrictEqual([
      ['A', { ...t0, remaining: 4 }], ['A', { ...t0, remaining: 3 }], ['A', { ...t0, remaining: 2 }],
      ['A', { ...t0, remaining: 1 }], ['A', { ...t0, remaining: 0 }],
      ['B', E(2)], ['B', E(1)], ['B', E(0)],
      ['B', E(0, false)], ['B', E(0, false)],
    ]);
    expect(rateHeaders(ninth)).toStrictEqual({
      ratelimit: '"edge";r=0;t=1', 'ratelimit-policy': '"tenant";q=5;w=60, "edge";q=8;w=1', 'retry-after': null,
    });
    const aDenied = await check('A'); // denied by its own limit: must not take a guard token either
    expect(aDenied.json).toStrictEqual({ allowed: false, limit: 5, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 60_000, policy: 'tenant' });
    expect(rateHeaders(aDenied)).toMatchObject({ ratelimit: '"tenant";r=0;t=60', 'retry-after': null });

    // Next second: the guard's window is fresh, the tenants' minute is not.
    s.clock.advance(1000);
    const after: Array<[string, Decision]> = [];
    for (const key of ['B', 'B', 'B', 'A', 'C', 'C', 'C', 'C', 'C', 'D', 'D']) after.push([key, (await check(key)).json]);
    expect(after).toStrictEqual([
      ['B', T(1)], ['B', T(0)], // exactly the 2 B had left: the guard denials took nothing from B
      ['B', T(0, false)],
      ['A', T(0, false)],
      ['C', T(4)], ['C', T(3)], ['C', T(2)], ['C', T(1)], ['C', T(0)], // guard: 6 left after B's 2 → 1 left
      ['D', E(0)], // the 8th guard token: tenant denials took nothing from the guard
      ['D', E(0, false)],
    ]);
  });

  it('the same through one POST batch: items decided in order, the 9th denied by the guard', async () => {
    const s = await pool.start({ policies, shards });
    const keys = ['A', 'A', 'A', 'A', 'A', 'B', 'B', 'B', 'B', 'A'];
    const a = await postJson(`${s.url}/v1/check`, { checks: keys.map((key) => ({ policy: 'tenant', key })) });
    const t0 = { allowed: true, limit: 5, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'tenant' };
    expect(a.json).toStrictEqual({
      results: [
        { ...t0, remaining: 4 }, { ...t0, remaining: 3 }, { ...t0, remaining: 2 }, { ...t0, remaining: 1 }, { ...t0, remaining: 0 },
        E(2), E(1), E(0), E(0, false),
        { allowed: false, limit: 5, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 60_000, policy: 'tenant' },
      ],
    });
  });
});

afterAll(() => pool.closeAll());
