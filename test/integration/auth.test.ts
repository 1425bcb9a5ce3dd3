/**
 * /v1/auth, the forward-auth endpoint (nginx auth_request, Traefik ForwardAuth, Envoy ext_authz HTTP), against
 * the real server on 127.0.0.1, port 0, with a frozen clock. Any method; 200 + RateLimit headers and an empty
 * body when admitted; the configured deny status (429, or 403 for nginx) + Retry-After + RateLimit when denied;
 * the key from `key=`, descriptor query parameters, or the headers the policy names.
 */
import { HttpConn } from '../helpers/http-conn.js';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/config/default.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { send, ServerPool, type Answer } from '../helpers/server.js';
import { checkedRateHeaders } from '../helpers/ratelimit.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());
afterAll(() => pool.closeAll());

const DEFAULT_POLICY_HEADER = '"free";q=100;w=60;sluice-burst=100, "global";q=200000;w=60;sluice-burst=20000';
/** The built-in default with `free` taking its cost from the auth URL (`authCost: query`). */
const rawDefault = (defaultConfig().raw as { policies: Record<string, PolicySpec> }).policies;
const QUERY_COST: Record<string, PolicySpec> = { ...rawDefault, free: { ...rawDefault.free, authCost: 'query' } };

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
    const s = await pool.start({ policies: QUERY_COST });
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
    const s = await pool.start({ policies: QUERY_COST });
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
    // /v1/check names the same counter with the descriptor given directly.
    expect((await send(`${s.url}/v1/check?policy=tenant&tenant=acme`)).json).toMatchObject({ allowed: false, remaining: 0 });
    // Another tenant has its own counter.
    expect(authFacts(await send(`${s.url}/v1/auth?policy=tenant`, { headers: { 'x-tenant-id': 'globex' } }))).toStrictEqual(ok('"tenant";r=1;t=60', TH));
  });

  it('a descriptor declared from a header is never taken from the query, and key= cannot stand in for it', async () => {
    const s = await pool.start({ policies });
    await send(`${s.url}/v1/auth?policy=client`, { headers: { 'x-forwarded-for': '203.0.113.7' } });
    await send(`${s.url}/v1/auth?policy=client`, { headers: { 'x-forwarded-for': '203.0.113.7' } });
    const xff = { headers: { 'x-forwarded-for': '203.0.113.7' } };
    const a = await send(`${s.url}/v1/auth?policy=client&client=1.2.3.4`, xff);
    expect(problemFacts(a)).toStrictEqual(problem(400, 'client'));
    expect(a.json.detail).toBe('client: is read from header x-forwarded-for for policy "client", never from the query');
    const b = await send(`${s.url}/v1/auth?policy=client&key=1.2.3.4`, xff);
    expect(problemFacts(b)).toStrictEqual(problem(400, 'key'));
    expect(b.json.detail).toBe('key: is not accepted on /v1/auth for policy "client": descriptor "client" is read from header x-forwarded-for, never from the query');
    // Nothing was spent by the refused requests; the header's client is still denied, 1.2.3.4 was never counted.
    expect(authFacts(await send(`${s.url}/v1/auth?policy=client`, xff))).toStrictEqual(denied(429, '"client";r=0;t=60', CH, '60'));
    expect((await send(`${s.url}/v1/check?policy=client&client=1.2.3.4&cost=0`)).json).toMatchObject({ allowed: true, remaining: 2 });
  });

  it('cost comes from the query only with authCost: query; a fixed authCost is what each request costs', async () => {
    const s = await pool.start({
      policies: {
        fixed: { algorithm: 'fixed_window', limit: 10, period: 60_000 },
        heavy: { algorithm: 'fixed_window', limit: 10, period: 60_000, authCost: 4 },
        chosen: { algorithm: 'fixed_window', limit: 10, period: 60_000, authCost: 'query' },
      },
    });
    const c0 = await send(`${s.url}/v1/auth?policy=fixed&key=k&cost=0`);
    expect(problemFacts(c0)).toStrictEqual(problem(400, 'cost'));
    expect(c0.json.detail).toBe('cost: is not accepted on /v1/auth for policy "fixed": each request costs 1 (set authCost: query to let the auth URL choose)');
    expect(problemFacts(await send(`${s.url}/v1/auth?policy=fixed&key=k&co%73t=0`))).toStrictEqual(problem(400, 'cost'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=fixed&key=k`))).toStrictEqual(ok('"fixed";r=9;t=60', '"fixed";q=10;w=60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=heavy&key=k`))).toStrictEqual(ok('"heavy";r=6;t=60', '"heavy";q=10;w=60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=chosen&key=k&cost=3`))).toStrictEqual(ok('"chosen";r=7;t=60', '"chosen";q=10;w=60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=chosen&key=k`))).toStrictEqual(ok('"chosen";r=6;t=60', '"chosen";q=10;w=60'));
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

  it('a header descriptor sent on two field lines → 400 naming the header; X-Forwarded-For\'s lines join (its first hop is the first line\'s)', async () => {
    const s = await pool.start({ policies });
    const conn = await HttpConn.open(Number(new URL(s.url).port));
    try {
      const twice = await conn.get('/v1/auth?policy=tenant', [['X-Tenant-Id', 'client-picked'], ['x-tenant-id', 'gateway-set']]);
      expect({ status: twice.status, field: twice.json.field, detail: twice.json.detail }).toStrictEqual({
        status: 400, field: 'x-tenant-id', detail: 'x-tenant-id: header is given 2 times (descriptor "tenant"): send it once',
      });
      const once = await conn.get('/v1/auth?policy=tenant', [['X-Tenant-Id', 'gateway-set']]);
      expect(once.status).toBe(200);
      const xff = await conn.get('/v1/auth?policy=client', [['X-Forwarded-For', '203.0.113.9'], ['X-Forwarded-For', '10.0.0.1']]);
      expect({ status: xff.status, ratelimit: xff.headers['ratelimit'] }).toStrictEqual({ status: 200, ratelimit: '"client";r=1;t=60' });
    } finally {
      conn.close();
    }
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
    // Same (tenant, action) tuple through /v1/check: same counter.
    expect((await send(`${s.url}/v1/check?policy=mixed&tenant=acme&action=read`)).json).toMatchObject({ allowed: true, remaining: 0 });
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

describe('/v1/auth/<policy>/<path>: the form Envoy ext_authz sends (path_prefix + the original path)', () => {
  const policies: Record<string, PolicySpec> = {
    route: {
      algorithm: 'fixed_window', limit: 2, period: 60_000,
      descriptors: [{ name: 'client', header: 'x-forwarded-for' }, { name: 'path', from: 'path' }],
    },
    ip: { algorithm: 'fixed_window', limit: 1, period: 60_000, descriptors: [{ name: 'client', header: 'x-forwarded-for' }], authCost: 1 },
    bare: { algorithm: 'fixed_window', limit: 1, period: 60_000 },
    q: { algorithm: 'fixed_window', limit: 1, period: 60_000, descriptors: ['tenant'] },
    chosen: { algorithm: 'fixed_window', limit: 1, period: 60_000, descriptors: [{ name: 'client', header: 'x-forwarded-for' }], authCost: 'query' },
  };
  const RH = '"route";q=2;w=60';
  const xff = (ip: string): RequestInit => ({ headers: { 'x-forwarded-for': ip } });

  it('the path after the policy is a descriptor; the query is the original request\'s and is never read', async () => {
    const s = await pool.start({ policies });
    const seq: Array<[string, string, Record<string, unknown>]> = [
      ['/v1/auth/route/api/users', '203.0.113.7', ok('"route";r=1;t=60', RH)],
      // the client's query (policy, cost, key, a descriptor's name) changes nothing: same counter, cost 1
      ['/v1/auth/route/api/users?policy=bare&cost=0&key=x&client=1.2.3.4&path=/other', '203.0.113.7', ok('"route";r=0;t=60', RH)],
      ['/v1/auth/route/api/users', '203.0.113.7', denied(429, '"route";r=0;t=60', RH, '60')],
      ['/v1/auth/route/api/orders', '203.0.113.7', ok('"route";r=1;t=60', RH)],
      ['/v1/auth/route/api/users', '198.51.100.1', ok('"route";r=1;t=60', RH)],
      ['/v1/auth/route', '203.0.113.7', ok('"route";r=1;t=60', RH)], // no rest: the path is "/"
    ];
    for (const [path, ip, expected] of seq) expect(authFacts(await send(s.url + path, xff(ip))), path).toStrictEqual(expected);
    // The same counters as /v1/check with the descriptors given directly.
    expect((await send(`${s.url}/v1/check?policy=route&client=203.0.113.7&path=${encodeURIComponent('/api/users')}&cost=0`)).json)
      .toMatchObject({ allowed: true, remaining: 0 });
    expect((await send(`${s.url}/v1/check?policy=route&client=203.0.113.7&path=%2F&cost=0`)).json).toMatchObject({ remaining: 1 });
  });

  it('a policy whose descriptors are all headers works on both forms, with one counter', async () => {
    const s = await pool.start({ policies });
    expect(authFacts(await send(`${s.url}/v1/auth/ip/anything?x=1`, xff('192.0.2.1')))).toStrictEqual(ok('"ip";r=0;t=60', '"ip";q=1;w=60'));
    expect(authFacts(await send(`${s.url}/v1/auth?policy=ip`, xff('192.0.2.1')))).toStrictEqual(denied(429, '"ip";r=0;t=60', '"ip";q=1;w=60', '60'));
  });

  it.each([
    ['/v1/auth/nope/x', 400, 'policy', 'policy: unknown policy "nope"'],
    ['/v1/auth//x', 400, 'policy', 'policy: is required: /v1/auth/<policy>/...'],
    ['/v1/auth/bare/x', 400, 'key', 'key: policy "bare" has no descriptors, and /v1/auth/bare/... reads no key= (its query is the original request\'s): declare descriptors from headers or the path'],
    ['/v1/auth/q/x?tenant=acme', 400, 'tenant', 'tenant: is read from the query, which /v1/auth/q/... does not read (it is the original request\'s): declare a header or from: path, or use /v1/auth?policy=q'],
    ['/v1/auth/chosen/x?cost=2', 400, 'cost', 'cost: policy "chosen" takes its cost from the query (authCost: query), which /v1/auth/chosen/... does not read (it is the original request\'s)'],
    ['/v1/auth/route/x', 400, 'x-forwarded-for', 'x-forwarded-for: header is required (descriptor "client")'],
    ['/v1/auth?policy=route&path=/x', 400, 'path', 'path: is read from the path for policy "route", never from the query'],
    ['/v1/authx', 404, 'path', 'path: no route for /v1/authx'],
  ] as Array<[string, number, string, string]>)('%s → %i naming %s', async (path, status, field, detail) => {
    const s = await pool.start({ policies });
    const a = await send(s.url + path);
    expect(problemFacts(a)).toStrictEqual(problem(status, field));
    expect(a.json.detail).toBe(detail);
  });
});
