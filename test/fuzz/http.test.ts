/**
 * fast-check against the live HTTP front (127.0.0.1, port 0, frozen clock): random query strings, random JSON
 * bodies, raw body bytes and random headers to /v1/check and /v1/auth, plus raw bytes on a bare TCP socket.
 * About 300 requests in all. Every answer: never a 5xx, never a hang (each request has a timeout), a body that
 * is empty or JSON with a JSON content type, the shapes the API documents; and /healthz still answers after.
 *
 * Set FUZZ_SEED to replay a failing run (fast-check prints the seed and path of a counterexample), FUZZ_SCALE
 * to multiply the number of runs.
 *
 * Oversize bodies (413, connection closed) have their own test in test/integration/http.test.ts.
 */
import net from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { send, startTestServer, type Answer, type TestServer } from '../helpers/server.js';
import { checkedRateHeaders, parseRateLimitList } from '../helpers/ratelimit.js';

const POLICIES: Record<string, PolicySpec> = {
  free: { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 100, descriptors: ['tenant', 'action'], guard: 'global' },
  global: { algorithm: 'token_bucket', limit: 200_000, period: '1m', burst: 20_000 },
  hdr: {
    algorithm: 'fixed_window', limit: 5, period: '1m',
    descriptors: [{ name: 'tenant', header: 'x-tenant-id' }, { name: 'client', header: 'x-forwarded-for' }],
  },
  sw: { algorithm: 'sliding_window', limit: 3, period: 1000 },
  multi: {
    limits: [
      { algorithm: 'gcra', limit: 10, period: '1s', burst: 2, name: 'per-second' },
      { algorithm: 'fixed_window', limit: 50, period: '1h', name: 'per-hour' },
    ],
  },
};
const POLICY_NAMES = Object.keys(POLICIES);
const LIMIT_NAMES = new Set([...POLICY_NAMES, 'per-second', 'per-hour']);
const MAX_BODY = 8192;

const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
/** FUZZ_SCALE multiplies every run count (a longer budget in CI: FUZZ_SCALE=20). */
const SCALE = Math.max(1, Number(process.env.FUZZ_SCALE ?? 1) || 1);
const params = (numRuns: number): fc.Parameters<unknown> =>
  ({ numRuns: Math.round(numRuns * SCALE), ...(SEED === undefined ? {} : { seed: SEED }) });

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ policies: POLICIES, maxBodyBytes: MAX_BODY, maxBatchItems: 16 });
});
afterAll(() => s?.close());

// ---------------------------------------------------------------------------------------------------------
// What every answer must look like
// ---------------------------------------------------------------------------------------------------------

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

function expectDecision(d: unknown, where: string): void {
  const o = d as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  const expectedKeys = ['allowed', 'limit', 'policy', 'remaining', 'resetAfterMs', 'retryAfterMs', ...('reason' in o ? ['reason'] : [])].sort();
  expect(keys, where).toStrictEqual(expectedKeys);
  expect(typeof o.allowed, where).toBe('boolean');
  expect(isInt(o.limit) && isInt(o.remaining) && isInt(o.resetAfterMs), where).toBe(true);
  expect((o.remaining as number) >= 0 && (o.resetAfterMs as number) >= 0, where).toBe(true);
  if (o.allowed) expect(o.retryAfterMs, where).toBe(0);
  else expect(o.retryAfterMs === null || (isInt(o.retryAfterMs) && o.retryAfterMs >= 1), where).toBe(true);
  expect(LIMIT_NAMES.has(o.policy as string), where).toBe(true);
}

function expectProblem(a: Answer, where: string): void {
  expect(a.contentType, where).toBe('application/problem+json');
  const p = a.json as Record<string, unknown>;
  expect(p?.status, where).toBe(a.status);
  expect(typeof p.title === 'string' && typeof p.detail === 'string' && p.type === 'about:blank', where).toBe(true);
  if (p.field !== undefined) expect((p.detail as string).startsWith(`${p.field as string}: `), where).toBe(true);
}

/** Checks the invariants of one answer; `route` says which endpoint answered. */
function expectSane(a: Answer, route: 'check' | 'auth', where: string, method = 'GET'): void {
  where = `${where} → ${a.status} ${a.text.slice(0, 300)}`;
  expect(a.status, where).toBeLessThan(500);
  expect([200, 400, 404, 405, 413, 415, 429], where).toContain(a.status);
  if (method === 'HEAD') {
    // No body on HEAD: only the status and the headers speak.
    expect(a.text, where).toBe('');
    if (a.status === 200 || a.status === 429) expect(a.headers.get('ratelimit'), where).toMatch(/^"[^"]+";r=\d+(;t=\d+)?$/);
    else expect(a.contentType, where).toBe('application/problem+json');
    return;
  }
  if (a.text !== '') {
    expect(a.json, `${where}: body is not JSON`).not.toBeUndefined();
    expect(['application/json', 'application/problem+json'], where).toContain(a.contentType);
  }
  if (a.status !== 200 && a.status !== 429) return expectProblem(a, where);
  if (route === 'auth') {
    expect(a.text, where).toBe('');
    expect(a.headers.get('ratelimit'), where).toMatch(/^"[^"]+";r=\d+(;t=\d+)?$/);
    checkedRateHeaders(a.headers);
    const retry = a.headers.get('retry-after');
    if (retry !== null) expect(retry, where).toMatch(/^[1-9]\d*$/);
    return;
  }
  expect(a.status, where).toBe(200);
  expect(a.contentType, where).toBe('application/json');
  const body = a.json as Record<string, unknown>;
  if ('results' in body) {
    expect(Object.keys(body), where).toStrictEqual(['results']);
    for (const r of body.results as Array<Record<string, unknown>>) {
      if ('error' in r) {
        const e = r.error as Record<string, unknown>;
        expect(typeof e.code === 'string' && typeof e.detail === 'string' && e.status === 400, where).toBe(true);
        if (e.field !== undefined) expect((e.field as string).startsWith('checks['), where).toBe(true);
      } else expectDecision(r, where);
    }
  } else {
    expectDecision(body, where);
    expect(a.headers.get('retry-after'), where).toBe(null);
    const [item] = parseRateLimitList(checkedRateHeaders(a.headers).ratelimit!);
    expect({ name: item.name, r: item.params.r }, where).toStrictEqual({ name: body.policy, r: body.remaining });
    // t: the wait of a denial that can pass later, none for one that never can; for an admitted check the
    // time to more quota, which is never later than the time to full
    if (body.allowed === false) expect(item.params.t, where).toBe(body.retryAfterMs === null ? undefined : Math.max(1, Math.ceil((body.retryAfterMs as number) / 1000)));
    else if (item.params.t !== undefined) expect(item.params.t as number, where).toBeLessThanOrEqual(Math.ceil((body.resetAfterMs as number) / 1000));
  }
}

async function expectHealthy(): Promise<void> {
  const h = await send(`${s.url}/healthz`);
  expect([h.status, h.json]).toStrictEqual([200, { status: 'ok' }]);
}

// ---------------------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------------------

/** Percent-encodes every UTF-8 byte (lone surrogates become U+FFFD, as in any UTF-8 encoder). */
function pct(s: string): string {
  return [...Buffer.from(s, 'utf8')].map((b) => '%' + b.toString(16).padStart(2, '0')).join('');
}

const awkward = fc.constantFrom(
  '', ' ', '0', '1', '-1', '1.5', '1e3', '007', '9007199254740991', '9007199254740993', 'NaN', 'Infinity', 'null', 'true',
  '2001:db8::1', 'a:b', '%', '%25', '+', '&', '=', '#', '\u0000', '\ud800', 'a\udfff', 'é', 'e\u0301', '🦀', '__proto__',
  'constructor', 'toString', 'x'.repeat(1024), 'x'.repeat(1025), '€'.repeat(342),
);
const paramName = fc.oneof(
  fc.constantFrom('policy', 'key', 'cost', 'tenant', 'action', 'client', 'descriptors', 'checks', '__proto__', 'constructor', ''),
  fc.string({ maxLength: 8 }),
);
const paramValue = fc.oneof(fc.constantFrom(...POLICY_NAMES), awkward, fc.string({ unit: 'binary', maxLength: 40 }));
const pairs = fc.array(fc.tuple(paramName, paramValue), { maxLength: 6 });

/** A query string: well-formed pairs (policy first, or shuffled), random bytes, or random raw characters. */
const queryString = fc.oneof(
  { weight: 4, arbitrary: fc.tuple(fc.constantFrom(...POLICY_NAMES), pairs).map(([p, rest]) => [`policy=${p}`, ...rest.map(([k, v]) => `${pct(k)}=${pct(v)}`)].join('&')) },
  { weight: 2, arbitrary: pairs.map((ps) => ps.map(([k, v]) => `${pct(k)}=${pct(v)}`).join('&')) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 120 }).map((b) => [...b].map((x) => '%' + x.toString(16).padStart(2, '0')).join('')) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 80 }).map((q) => q.replace(/#/g, '%23')) },
);

const anyMethod = fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD');

/** A check-like JSON value: mostly near-valid checks with one field perturbed, sometimes anything at all. */
const checkish: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record(
      {
        policy: fc.oneof(fc.constantFrom(...POLICY_NAMES), fc.jsonValue({ maxDepth: 1 })),
        key: fc.oneof(awkward, fc.string({ unit: 'binary', maxLength: 30 }), fc.jsonValue({ maxDepth: 1 })),
        descriptors: fc.oneof(
          fc.dictionary(fc.constantFrom('tenant', 'action', 'client', 'zone', '__proto__'), fc.oneof(awkward, fc.integer())),
          fc.jsonValue({ maxDepth: 1 }),
        ),
        cost: fc.oneof(fc.integer({ min: -2, max: 200 }), fc.constantFrom(0, 1.5, 1e300, -0, '1', null, true, 2 ** 53)),
        extra: fc.jsonValue({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
);
const jsonBody = fc.oneof(
  { weight: 3, arbitrary: checkish },
  { weight: 2, arbitrary: fc.record({ checks: fc.array(checkish, { maxLength: 20 }) }) },
  { weight: 1, arbitrary: fc.record({ checks: fc.jsonValue({ maxDepth: 2 }), other: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: ['checks'] }) },
);

/** A header value fetch can send: visible ASCII, spaces and tabs (no CR, LF or NUL), trimmed by the transport. */
const headerValue = fc.oneof(
  fc.constantFrom('acme', '203.0.113.7, 10.0.0.1', ', 10.0.0.1', ' , ', '2001:db8::1', 'a:b', '%41', 'x'.repeat(1100), ''),
  fc.string({ unit: fc.constantFrom(...' \t!"#$%&\'()*+,-./0123456789:;<=>?@AZaz[\\]^_`{|}~'.split('')), maxLength: 40 }),
);

// ---------------------------------------------------------------------------------------------------------

describe('fuzzing the live HTTP front', () => {
  it('random query strings to GET /v1/check and to /v1/auth with any method', async () => {
    await fc.assert(
      fc.asyncProperty(queryString, anyMethod, async (q, method) => {
        const check = await send(`${s.url}/v1/check?${q}`);
        expectSane(check, 'check', `GET /v1/check?${q}`);
        const auth = await send(`${s.url}/v1/auth?${q}`, { method });
        expectSane(auth, 'auth', `${method} /v1/auth?${q}`, method);
      }),
      params(60),
    );
    await expectHealthy();
  });

  it('random JSON bodies to POST /v1/check', async () => {
    await fc.assert(
      fc.asyncProperty(jsonBody, async (body) => {
        const text = JSON.stringify(body) ?? 'null';
        fc.pre(Buffer.byteLength(text) <= MAX_BODY);
        const a = await send(`${s.url}/v1/check`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });
        expectSane(a, 'check', `POST /v1/check ${text.slice(0, 300)}`);
      }),
      params(80),
    );
    await expectHealthy();
  });

  it('raw bytes as bodies, with and without a JSON content type, to /v1/check and /v1/auth', async () => {
    const contentType = fc.constantFrom('application/json', 'application/json; charset=utf-8', 'text/plain', 'application/octet-stream', undefined);
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 600 }), contentType, anyMethod.filter((m) => m !== 'GET' && m !== 'HEAD'), async (bytes, type, method) => {
        const headers: Record<string, string> = type === undefined ? {} : { 'content-type': type };
        const where = `${bytes.length} bytes as ${type}: ${Buffer.from(bytes).toString('hex').slice(0, 120)}`;
        expectSane(await send(`${s.url}/v1/check`, { method: 'POST', headers, body: bytes }), 'check', `POST /v1/check ${where}`);
        expectSane(await send(`${s.url}/v1/auth?policy=hdr&tenant=t`, { method, headers: { ...headers, 'x-forwarded-for': '198.51.100.9' }, body: bytes }), 'auth', `${method} /v1/auth ${where}`, method);
      }),
      params(40),
    );
    await expectHealthy();
  });

  it('random descriptor headers to /v1/auth', async () => {
    await fc.assert(
      fc.asyncProperty(fc.option(headerValue, { nil: undefined }), fc.option(headerValue, { nil: undefined }), anyMethod, async (tenant, xff, method) => {
        const headers: Record<string, string> = {};
        if (tenant !== undefined) headers['x-tenant-id'] = tenant;
        if (xff !== undefined) headers['x-forwarded-for'] = xff;
        const a = await send(`${s.url}/v1/auth?policy=hdr`, { method, headers });
        expectSane(a, 'auth', `${method} /v1/auth x-tenant-id=${JSON.stringify(tenant)} x-forwarded-for=${JSON.stringify(xff)}`, method);
      }),
      params(40),
    );
    await expectHealthy();
  });

  it('raw bytes on a bare TCP connection: the server answers or closes, never hangs, and keeps serving', async () => {
    const prefix = fc.constantFrom('', 'GET ', 'POST /v1/check HTTP/1.1\r\n', 'GET /v1/check?policy=free&key=', 'GET /v1/auth HTTP/1.1\r\nX-Forwarded-For: ');
    await fc.assert(
      fc.asyncProperty(prefix, fc.uint8Array({ minLength: 1, maxLength: 400 }), async (p, bytes) => {
        const [outcome, data] = await new Promise<[string, string]>((resolve) => {
          const socket = net.connect(s.port, '127.0.0.1');
          let data = '';
          const timer = setTimeout(() => {
            socket.destroy();
            resolve([data === '' ? 'idle' : 'answered', data]);
          }, 150);
          socket.setEncoding('latin1');
          socket.on('data', (d: string) => (data += d));
          socket.on('error', () => undefined);
          socket.on('close', () => {
            clearTimeout(timer);
            resolve([data === '' ? 'closed' : 'answered', data]);
          });
          socket.write(Buffer.concat([Buffer.from(p, 'latin1'), bytes]));
        });
        // Whatever happened on that connection, a fresh one still gets an answer at once.
        expect(['closed', 'answered', 'idle']).toContain(outcome);
        for (const status of data.match(/HTTP\/1\.1 \d{3}/g) ?? []) expect(Number(status.slice(9)), data.slice(0, 200)).toBeLessThan(500);
        const h = await send(`${s.url}/healthz`);
        expect(h.status).toBe(200);
      }),
      params(25),
    );
    await expectHealthy();
  });
});
