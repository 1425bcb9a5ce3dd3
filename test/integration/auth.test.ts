/**
 * /v1/auth, the forward-auth endpoint (nginx auth_request, Traefik ForwardAuth, Envoy ext_authz HTTP), against
 * the real server on 127.0.0.1, port 0, with a frozen clock. Any method; 200 + RateLimit headers and an empty
 * body when admitted; the configured deny status (429, or 403 for nginx) + Retry-After + RateLimit when denied;
 * the key from `key=`, descriptor query parameters, or the headers the policy names.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/config/default.js';
import type { PolicySpec } from '../../src/config/policies.js';
import { send, ServerPool, type Answer } from '../helpers/server.js';
import { checkedRateHeaders } from '../helpers/ratelimit.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());
afterAll(() => pool.closeAll());

const DEFAULT_POLICY_HEADER = '"free";q=100;w=60;sluice-burst=100, "global";q=200000;w=60;sluice-burst=20000';

/** Everything a forward-auth proxy looks at. */
function authFacts(a: Answer): Record<string, unknown> {
  return { status: a.status, body: a.text, contentLength: a.headers.get('content-length'), ...checkedRateHeaders(a.headers) };
}

function problemFacts(a: Answer): Record<string, unknown> {
  return {
    status: a.status,
    contentType: a.contentType,
    bodyStatus: a.json?.status,
    field: a.json?.field,
    detailNamesField: typeof a.json?.detail === 'string' && (a.json.detail as string).startsWith(`${a.json?.field}: `),
    ratelimit: a.headers.get('ratelimit'),
  };
}

const problem = (status: number, field: string): Record<string, unknown> => ({
  status, contentType: 'application/problem+json', bodyStatus: status, field, detailNamesField: true, ratelimit: null,
});

const ok = (ratelimit: string, policyHeader: string): Record<string, unknown> => ({
  status: 200, body: '', contentLength: '0', ratelimit, 'ratelimit-policy': policyHeader, 'retry-after': null,
});

const denied = (status: number, ratelimit: string, policyHeader: string, retryAfter: string | null): Record<string, unknown> => ({
  status, body: '', contentLength: '0', ratelimit, 'ratelimit-policy': policyHeader, 'retry-after': retryAfter,
});

describe('/v1/auth with the built-in default config', () => {
  it.each(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'])('%s → 200, RateLimit headers, empty body', async (method) => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await send(`${s.url}/v1/auth?policy=free&key=tenant-1`, { method });
    expect(authFacts(a)).toStrictEqual(ok('"free";r=99;t=1', DEFAULT_POLICY_HEADER));
    const b = await send(`${s.url}/v1/auth?policy=free&key=tenant-1&cost=9`, { method, body: method === 'GET' ? undefined : 'ignored body' });
    expect(authFacts(b)).toStrictEqual(ok('"free";r=90;t=1', DEFAULT_POLICY_HEADER));
  });

  it('HEAD → 200 with the headers', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await send(`${s.url}/v1/auth?policy=free&key=h`, { method: 'HEAD' });
    expect(authFacts(a)).toStrictEqual(ok('"free";r=99;t=1', DEFAULT_POLICY_HEADER));
  });

  it('the 101st request of a minute → 429 with Retry-After and RateLimit, any method', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const methods = ['GET', 'POST', 'PUT', 'DELETE'];
    for (let i = 0; i < 100; i++) {
      const a = await send(`${s.url}/v1/auth?policy=free&key=tenant-1`, { method: methods[i % 4] });
      expect(a.status, `request #${i + 1}`).toBe(200);
    }
    for (const method of methods) {
      const a = await send(`${s.url}/v1/auth?policy=free&key=tenant-1`, { method });
      expect(authFacts(a), method).toStrictEqual(denied(429, '"free";r=0;t=1', DEFAULT_POLICY_HEADER, '1'));
    }
  });

  it('a cost above the burst is denied for good: 429 without Retry-After (there is no time that would do)', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    const a = await send(`${s.url}/v1/auth?policy=free&key=big&cost=101`);
    expect(authFacts(a)).toStrictEqual(denied(429, '"free";r=100', DEFAULT_POLICY_HEADER, null));
  });

  it.each([
    ['missing policy', '/v1/auth?key=k', 400, 'policy'],
    ['unknown policy', '/v1/auth?policy=nope&key=k', 400, 'policy'],
    ['bad cost', '/v1/auth?policy=free&key=k&cost=1.5', 400, 'cost'],
    ['empty key', '/v1/auth?policy=free&key=', 400, 'key'],
    ['key over 1 KiB', `/v1/auth?policy=free&key=${'k'.repeat(1025)}`, 400, 'key'],
    ['descriptor without a header, not in the query', '/v1/auth?policy=free&tenant=acme', 400, 'action'],
  ] as Array<[string, string, number, string]>)('%s → problem+json', async (_name, path, status, field) => {
    const s = await pool.start({ policies: defaultConfig().policies });
    expect(problemFacts(await send(s.url + path, { method: 'POST' }))).toStrictEqual(problem(status, field));
  });
});

describe.each([429, 403] as const)('authDenyStatus %i', (authDenyStatus) => {
  it('admits twice, then denies with the configured status, Retry-After and RateLimit', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 2, period: 60_000 } }, authDenyStatus });
    const h = '"p";q=2;w=60';
    expect(authFacts(await send(`${s.url}/v1/auth?policy=p&key=k`))).toStrictEqual(ok('"p";r=1;t=60', h));
    s.clock.advance(15_500);
    expect(authFacts(await send(`${s.url}/v1/auth?policy=p&key=k`, { method: 'POST' }))).toStrictEqual(ok('"p";r=0;t=45', h));
    s.clock.advance(1);
    // 44 499 ms left in the window: Retry-After and t= rounded up to 45.
    expect(authFacts(await send(`${s.url}/v1/auth?policy=p&key=k`, { method: 'PUT' }))).toStrictEqual(denied(authDenyStatus, '"p";r=0;t=45', h, '45'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=p&key=other`, { method: 'DELETE' }))).toStrictEqual(ok('"p";r=1;t=45', h));
    // Errors are not denials: still 400, whatever the deny status.
    expect(problemFacts(await send(`${s.url}/v1/auth?policy=p`))).toStrictEqual(problem(400, 'key'));
  });
});

describe('keys from descriptor headers', () => {
  const policies: Record<string, PolicySpec> = {
    tenant: { algorithm: 'fixed_window', limit: 2, period: 60_000, descriptors: [{ name: 'tenant', header: 'x-tenant-id' }] },
    client: { algorithm: 'fixed_window', limit: 2, period: 60_000, descriptors: [{ name: 'client', header: 'x-forwarded-for' }] },
    mixed: {
      algorithm: 'fixed_window', limit: 2, period: 60_000,
      descriptors: [{ name: 'tenant', header: 'X-Tenant-ID' }, 'action'],
    },
  };
  const TH = '"tenant";q=2;w=60';
  const CH = '"client";q=2;w=60';

  it('the tenant header is the key; the same counter as key= and tenant= in the query and in /v1/check', async () => {
    const s = await pool.start({ policies });
    const acme = { 'x-tenant-id': 'acme' };
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant`, { headers: acme }))).toStrictEqual(ok('"tenant";r=1;t=60', TH));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant`, { method: 'POST', headers: acme }))).toStrictEqual(ok('"tenant";r=0;t=60', TH));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant`, { headers: acme }))).toStrictEqual(denied(429, '"tenant";r=0;t=60', TH, '60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant&tenant=acme`))).toStrictEqual(denied(429, '"tenant";r=0;t=60', TH, '60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant&key=acme`))).toStrictEqual(denied(429, '"tenant";r=0;t=60', TH, '60'));
    expect((await send(`${s.url}/v1/check?policy=tenant&tenant=acme`)).json).toMatchObject({ allowed: false, remaining: 0 });
    // Another tenant has its own counter.
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant`, { headers: { 'x-tenant-id': 'globex' } }))).toStrictEqual(ok('"tenant";r=1;t=60', TH));
  });

  it('a query value takes precedence over the header', async () => {
    const s = await pool.start({ policies });
    await send(`${s.url}/v1/auth?policy=tenant`, { headers: { 'x-tenant-id': 'acme' } });
    await send(`${s.url}/v1/auth?policy=tenant`, { headers: { 'x-tenant-id': 'acme' } });
    const a = await send(`${s.url}/v1/auth?policy=tenant&tenant=initech`, { headers: { 'x-tenant-id': 'acme' } });
    expect(authFacts(a)).toStrictEqual(ok('"tenant";r=1;t=60', TH));
  });

  it('X-Forwarded-For: the first (client) address of a multi-hop list is the key', async () => {
    const s = await pool.start({ policies });
    const xff = (v: string): RequestInit => ({ headers: { 'x-forwarded-for': v } });
    const seq: Array<[string, Record<string, unknown>]> = [
      ['203.0.113.7, 10.0.0.1, 10.0.0.2', ok('"client";r=1;t=60', CH)],
      ['203.0.113.7', ok('"client";r=0;t=60', CH)],
      ['203.0.113.7,10.9.9.9', denied(429, '"client";r=0;t=60', CH, '60')],
      ['  203.0.113.7  , 10.0.0.1', denied(429, '"client";r=0;t=60', CH, '60')],
      ['198.51.100.1, 203.0.113.7', ok('"client";r=1;t=60', CH)], // a different client behind the same proxy
      ['2001:db8::1, 10.0.0.1', ok('"client";r=1;t=60', CH)],
      ['2001:db8::1', ok('"client";r=0;t=60', CH)],
    ];
    for (const [value, expected] of seq) expect(authFacts(await send(`${s.url}/v1/auth?policy=client`, xff(value))), value).toStrictEqual(expected);
    // The IPv6 client's key is the same through /v1/check descriptors.
    expect((await send(`${s.url}/v1/check?policy=client&client=${encodeURIComponent('2001:db8::1')}`)).json)
      .toMatchObject({ allowed: false, remaining: 0, policy: 'client' });
  });

  it('a missing header → 400 naming the header', async () => {
    const s = await pool.start({ policies });
    const t = await send(`${s.url}/v1/auth?policy=tenant`);
    expect(problemFacts(t)).toStrictEqual(problem(400, 'x-tenant-id'));
    expect(t.json.detail).toBe('x-tenant-id: header is required (descriptor "tenant")');
    const c = await send(`${s.url}/v1/auth?policy=client`, { method: 'DELETE' });
    expect(problemFacts(c)).toStrictEqual(problem(400, 'x-forwarded-for'));
    expect(c.json.detail).toBe('x-forwarded-for: header is required (descriptor "client")');
    // An empty value and an empty first hop count as missing.
    expect(problemFacts(await send(`${s.url}/v1/auth?policy=tenant`, { headers: { 'x-tenant-id': '' } }))).toStrictEqual(problem(400, 'x-tenant-id'));
    expect(problemFacts(await send(`${s.url}/v1/auth?policy=client`, { headers: { 'x-forwarded-for': ', 10.0.0.1' } })))
      .toStrictEqual(problem(400, 'x-forwarded-for'));
  });

  it('header names are matched case-insensitively; a descriptor without a header must come from the query', async () => {
    const s = await pool.start({ policies });
    const MH = '"mixed";q=2;w=60';
    const a = await send(`${s.url}/v1/auth?policy=mixed&action=read`, { headers: { 'X-TENANT-ID': 'acme' } });
    expect(authFacts(a)).toStrictEqual(ok('"mixed";r=1;t=60', MH));
    // Same (tenant, action) tuple, given entirely in the query: same counter.
    expect(authFacts(await send(`${s.url}/v1/auth?policy=mixed&tenant=acme&action=read`))).toStrictEqual(ok('"mixed";r=0;t=60', MH));
    const b = await send(`${s.url}/v1/auth?policy=mixed`, { headers: { 'x-tenant-id': 'acme' } });
    expect(problemFacts(b)).toStrictEqual(problem(400, 'action'));
    expect(b.json.detail).toBe('action: is required (as a query parameter: the descriptor has no header)');
  });

  it('a header descriptor whose name is also an Object.prototype property (constructor) is read from its header', async () => {
    // auth.ts authCheck: `if (d.name in descriptors) continue;` sees the inherited `constructor` of a plain
    // object, so the header is never read and the check fails with "descriptors.constructor: must be a string
    // (got function)". Descriptor names such as constructor, toString or valueOf pass the config's name rule.
    const s = await pool.start({
      policies: { p: { algorithm: 'fixed_window', limit: 2, period: 60_000, descriptors: [{ name: 'constructor', header: 'x-c' }] } },
    });
    // The same descriptor given in the query works: the counter exists and is keyed by the value.
    expect((await send(`${s.url}/v1/check?policy=p&constructor=v`)).json).toMatchObject({ allowed: true, remaining: 1 });
    const a = await send(`${s.url}/v1/auth?policy=p`, { headers: { 'x-c': 'v' } });
    expect({ status: a.status, problem: a.json?.detail ?? null, ratelimit: a.headers.get('ratelimit') })
      .toStrictEqual({ status: 200, problem: null, ratelimit: '"p";r=0;t=60' });
  });
});
