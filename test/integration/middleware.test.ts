/**
 * The middleware in real apps (Express 5, Fastify 5, node:http) on 127.0.0.1, with an embedded limiter on a
 * frozen clock or a remote sluice through the client (HTTP and WebSocket). Every status, header and body exact.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { createClient } from '../../src/client/index.js';
import { sluiceExpress } from '../../src/middleware/express.js';
import { sluiceFastify, sluiceFastifyPlugin } from '../../src/middleware/fastify.js';
import { rateLimit } from '../../src/middleware/node-http.js';
import type { Checker, RateLimitOptions } from '../../src/middleware/core.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import type { Limiter } from '../../src/types.js';
import { ManualClock } from '../helpers/clock.js';
import { closeAllServers, startStreamServer } from './ws-support.js';

const cleanup: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
  await closeAllServers();
});

/** Two requests a minute per key (one token every 30 s). */
const POLICIES: Record<string, PolicySpec> = {
  api: { algorithm: 'token_bucket', limit: 2, period: 60_000 },
  tenants: { algorithm: 'token_bucket', limit: 2, period: 60_000, descriptors: ['tenant'] },
};

async function embedded(): Promise<Limiter> {
  const clock = new ManualClock();
  const limiter = await createLimiter({ policies: POLICIES, clock: clock.now, maxKeys: 1024 });
  cleanup.push(() => limiter.close());
  return limiter;
}

interface Seen {
  status: number;
  ratelimit: string | null;
  policy: string | null;
  retryAfter: string | null;
  type: string | null;
  body: string;
}

async function get(url: string, headers: Record<string, string> = {}): Promise<Seen> {
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(5000) });
  return {
    status: r.status,
    ratelimit: r.headers.get('ratelimit'),
    policy: r.headers.get('ratelimit-policy'),
    retryAfter: r.headers.get('retry-after'),
    type: r.headers.get('content-type')?.split(';')[0] ?? null,
    body: await r.text(),
  };
}

const QUOTA_BODY = JSON.stringify({
  type: 'https://iana.org/assignments/http-problem-types#quota-exceeded', title: 'Too Many Requests', status: 429,
  detail: 'quota exceeded for "api": retry in 30 s', 'violated-policies': ['api'],
});

/** RateLimit-Policy of `api` as the limiter advertises it. */
const API_POLICY = '"api";q=2;w=60;sluice-burst=2';

/**
 * The three answers two requests a minute give, with or without RateLimit-Policy. t is the next token, 30 s
 * away after either admitted request, and the wait on the denial. A remote limiter's decision does not say
 * the limit's period, so an admitted answer has no t there (the draft makes it optional).
 */
function threeAnswers(policyHeader: string | null, okType: string, okBody: string, remote = false): Seen[] {
  const t = remote ? '' : ';t=30';
  return [
    { status: 200, ratelimit: `"api";r=1${t}`, policy: policyHeader, retryAfter: null, type: okType, body: okBody },
    { status: 200, ratelimit: `"api";r=0${t}`, policy: policyHeader, retryAfter: null, type: okType, body: okBody },
    { status: 429, ratelimit: '"api";r=0;t=30', policy: policyHeader, retryAfter: '30', type: 'application/problem+json', body: QUOTA_BODY },
  ];
}

async function expressApp(o: RateLimitOptions<express.Request>): Promise<string> {
  const app = express();
  app.use(sluiceExpress(o));
  app.get('/hello', (_req, res) => {
    res.json({ ok: true });
  });
  const server = await new Promise<http.Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  cleanup.push(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello`;
}

async function fastifyApp(register: (app: FastifyInstance) => Promise<void> | void): Promise<string> {
  const app = Fastify();
  await register(app);
  app.get('/hello', async () => ({ ok: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  cleanup.push(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/hello`;
}

const tenant = (req: { headers: http.IncomingHttpHeaders }): string | undefined => {
  const v = req.headers['x-tenant'];
  return typeof v === 'string' ? v : undefined;
};

async function three(url: string, headers: Record<string, string> = { 'x-tenant': 'acme' }): Promise<Seen[]> {
  const out: Seen[] = [];
  for (let i = 0; i < 3; i++) out.push(await get(url, headers));
  return out;
}

const JSON_OK = ['application/json', '{"ok":true}'] as const;

/** A node:http server behind `rateLimit(o)` that answers "hello" to what passes; its URL. */
async function nodeApp(o: RateLimitOptions<http.IncomingMessage>): Promise<string> {
  const limit = rateLimit(o);
  const server = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.setHeader('content-type', 'text/plain');
    res.end('hello');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  cleanup.push(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

describe('Express middleware', () => {
  it('embedded limiter: RateLimit headers, then 429 with Retry-After and a problem body', async () => {
    const url = await expressApp({ limiter: await embedded(), policy: 'api', key: tenant });
    expect(await three(url)).toStrictEqual(threeAnswers(API_POLICY, ...JSON_OK));
    // another key has its own quota
    expect((await get(url, { 'x-tenant': 'other' })).status).toBe(200);
  });

  it('remote sluice through the HTTP client: the same answers, RateLimit-Policy as the server sends it', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const client = createClient({ url: s.url });
    cleanup.push(() => client.close());
    const url = await expressApp({ limiter: client, policy: 'api', key: tenant });
    expect(await three(url)).toStrictEqual(threeAnswers(API_POLICY, ...JSON_OK, true));
  });

  it('remote sluice through the WebSocket client, with the policy header given', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const client = createClient({ url: s.wsUrl });
    cleanup.push(() => client.close());
    const url = await expressApp({ limiter: client, policy: 'api', key: tenant, policyHeader: '"api";q=2;w=60' });
    expect(await three(url)).toStrictEqual(threeAnswers('"api";q=2;w=60', ...JSON_OK, true));
  });

  it('keys by req.ip by default; descriptors and cost from the request', async () => {
    const byIp = await expressApp({ limiter: await embedded(), policy: 'api' });
    expect((await three(byIp, {})).map((a) => a.status)).toStrictEqual([200, 200, 429]);
    const byTenant = await expressApp({
      limiter: await embedded(), policy: 'tenants', descriptors: (req) => ({ tenant: tenant(req) ?? 'anonymous' }),
      cost: (req) => (req.path === '/hello' ? 2 : 1),
    });
    const a = await get(byTenant, { 'x-tenant': 'acme' });
    const b = await get(byTenant, { 'x-tenant': 'acme' });
    expect([a.status, a.ratelimit, b.status, b.retryAfter]).toStrictEqual([200, '"tenants";r=0;t=30', 429, '60']);
  });

  it('a key of undefined lets the request through unchecked', async () => {
    const url = await expressApp({ limiter: await embedded(), policy: 'api', key: tenant });
    const r = await three(url, {});
    expect(r.map((a) => [a.status, a.ratelimit, a.policy])).toStrictEqual([[200, null, null], [200, null, null], [200, null, null]]);
  });

  it('a key the limiter refuses (empty, over 1 KiB) is answered 400, under onError allow too: never let through unchecked', async () => {
    const errors: string[] = [];
    const url = await expressApp({ limiter: await embedded(), policy: 'api', key: tenant, onLimiterError: (e) => errors.push(e.message) });
    const bad = (detail: string): Seen => ({
      status: 400, ratelimit: null, policy: null, retryAfter: null, type: 'application/problem+json',
      body: JSON.stringify({ type: 'about:blank', title: 'Bad Request', status: 400, detail }),
    });
    expect(await three(url, { 'x-tenant': '' })).toStrictEqual(Array(3).fill(bad('the request\'s rate-limit key: must not be empty')));
    expect(await get(url, { 'x-tenant': 'k'.repeat(1025) })).toStrictEqual(bad('the request\'s rate-limit key: must be at most 1024 bytes of UTF-8'));
    // descriptors too; a good key is limited as before; none of these was a limiter failure
    const byTenant = await expressApp({ limiter: await embedded(), policy: 'tenants', descriptors: () => ({ tenant: 't'.repeat(1100) }) });
    expect((await get(byTenant, { 'x-tenant': 'acme' })).status).toBe(400);
    expect((await three(url)).map((a) => a.status)).toStrictEqual([200, 200, 429]);
    expect(errors).toStrictEqual([]);
  });

  it('RateLimit-Policy follows a reload: the header comes from the policies in force', async () => {
    const limiter = await embedded();
    const url = await expressApp({ limiter, policy: 'api', key: tenant });
    expect((await get(url, { 'x-tenant': 'acme' })).policy).toBe(API_POLICY);
    await limiter.reload({ ...POLICIES, api: { algorithm: 'token_bucket', limit: 50, period: 60_000 } });
    const after = await get(url, { 'x-tenant': 'acme' });
    expect([after.policy, after.ratelimit]).toStrictEqual(['"api";q=50;w=60;sluice-burst=50', '"api";r=49;t=2']);
  });

  it('a limiter that fails lets requests through by default (fail open), or answers 503 with onError "deny"', async () => {
    const down = createClient({ url: 'http://127.0.0.1:9', maxAttempts: 1, timeoutMs: 500 });
    cleanup.push(() => down.close());
    const errors: string[] = [];
    const open = await expressApp({ limiter: down, policy: 'api', key: tenant, onLimiterError: (e) => errors.push((e as { code?: string }).code ?? '') });
    expect(await get(open, { 'x-tenant': 'acme' })).toStrictEqual({
      status: 200, ratelimit: null, policy: null, retryAfter: null, type: 'application/json', body: '{"ok":true}',
    });
    expect(errors).toStrictEqual(['UNAVAILABLE']);
    const closed = await expressApp({ limiter: down, policy: 'api', key: tenant, onError: 'deny' });
    expect(await get(closed, { 'x-tenant': 'acme' })).toStrictEqual({
      status: 503, ratelimit: null, policy: null, retryAfter: '1', type: 'application/problem+json',
      body: JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'rate limiter unavailable' }),
    });
  });
});

describe('a limiter whose answer cannot be used', () => {
  /** A stub answering every check with the next of `answers`; `policyHeader` stands for the client's memory of them. */
  const stub = (answers: unknown[], policyHeader: () => string | undefined = () => undefined): Checker => {
    let i = 0;
    return { check: async () => answers[i++] as never, rateLimitPolicy: policyHeader };
  };
  const DECISION = { allowed: true, limit: 2, remaining: 1, resetAfterMs: 30_000, retryAfterMs: 0, policy: 'api' };
  const BAD = [null, {}, { ...DECISION, allowed: 'yes' }, { ...DECISION, allowed: false, retryAfterMs: 'soon' }];
  const MESSAGES = [
    'decision: must be an object (got null)', 'decision: allowed: must be true or false (got nothing)',
    'decision: allowed: must be true or false (got "yes")', 'decision: retryAfterMs: must be a non-negative safe integer or null (got "soon")',
  ];
  const passed: Seen = { status: 200, ratelimit: null, policy: null, retryAfter: null, type: 'text/plain', body: 'hello' };
  const refused: Seen = {
    status: 503, ratelimit: null, policy: null, retryAfter: '1', type: 'application/problem+json',
    body: JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'rate limiter unavailable' }),
  };

  it.each(['allow', 'deny'] as const)('node:http, onError %s: a malformed decision is a limiter failure, never an unanswered request', async (onError) => {
    const errors: string[] = [];
    const url = await nodeApp({ limiter: stub(BAD), policy: 'api', key: tenant, onError, onLimiterError: (e) => errors.push(e.message) });
    const seen: Seen[] = [];
    for (let i = 0; i < BAD.length; i++) seen.push(await get(url, { 'x-tenant': 'acme' }));
    expect(seen).toStrictEqual(Array(BAD.length).fill(onError === 'allow' ? passed : refused));
    expect(errors).toStrictEqual(MESSAGES);
  });

  it.each(['allow', 'deny'] as const)('an onLimiterError that throws does not take the answer with it (onError %s): a process warning says so', async (onError) => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      if (w.name === 'SluiceWarning') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      const url = await nodeApp({
        limiter: stub([null]), policy: 'api', key: tenant, onError,
        onLimiterError: () => {
          throw new Error('the logger is down');
        },
      });
      expect(await get(url, { 'x-tenant': 'acme' })).toStrictEqual(onError === 'allow' ? passed : refused);
      await new Promise((r) => setImmediate(r)); // warnings are emitted on a later tick
      expect(warnings).toStrictEqual(['sluice middleware: onLimiterError threw: the logger is down']);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('Express: a malformed decision, or a throw while writing the headers, goes through onError (no 500, no stack)', async () => {
    const errors: string[] = [];
    const policyHeader = (): string => {
      throw new Error('policy header failed');
    };
    const ok = ['application/json', '{"ok":true}'];
    for (const onError of ['allow', 'deny'] as const) {
      const bad = await expressApp({ limiter: stub(BAD), policy: 'api', key: tenant, onError, onLimiterError: (e) => errors.push(e.message) });
      const throwing = await expressApp({
        limiter: stub([DECISION], policyHeader), policy: 'api', key: tenant, onError, onLimiterError: (e) => errors.push(e.message),
      });
      const seen: Seen[] = [];
      for (let i = 0; i < BAD.length; i++) seen.push(await get(bad, { 'x-tenant': 'acme' }));
      seen.push(await get(throwing, { 'x-tenant': 'acme' }));
      const want = onError === 'allow' ? { ...passed, type: ok[0], body: ok[1] } : refused;
      expect(seen).toStrictEqual(Array(BAD.length + 1).fill(want));
    }
    expect(errors).toStrictEqual([...MESSAGES, 'policy header failed', ...MESSAGES, 'policy header failed']);
  });
});

describe('headers: false', () => {
  it('sends no RateLimit-Policy, RateLimit or Retry-After, on a 429 too; the problem body still says the wait', async () => {
    const url = await expressApp({ limiter: await embedded(), policy: 'api', key: tenant, headers: false });
    const none = { ratelimit: null, policy: null, retryAfter: null };
    expect(await three(url)).toStrictEqual(threeAnswers(API_POLICY, ...JSON_OK).map((a) => ({ ...a, ...none })));
  });
});

describe('Fastify middleware', () => {
  it('as an onRequest hook with an embedded limiter', async () => {
    const limiter = await embedded();
    const url = await fastifyApp((app) => {
      app.addHook('onRequest', sluiceFastify({ limiter, policy: 'api', key: tenant }));
    });
    expect(await three(url)).toStrictEqual(threeAnswers(API_POLICY, ...JSON_OK));
  });

  it('as a plugin (applies to routes outside it) with a remote sluice over the WebSocket', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const client = createClient({ url: s.wsUrl, encoding: 'json' });
    cleanup.push(() => client.close());
    const url = await fastifyApp(async (app) => {
      await app.register(sluiceFastifyPlugin, { limiter: client, policy: 'api', key: tenant, policyHeader: '"api";q=2;w=60' });
    });
    expect(await three(url)).toStrictEqual(threeAnswers('"api";q=2;w=60', ...JSON_OK, true));
  });

  it('keys by request.ip by default', async () => {
    const limiter = await embedded();
    const url = await fastifyApp((app) => {
      app.addHook('onRequest', sluiceFastify({ limiter, policy: 'api' }));
    });
    expect((await three(url, {})).map((a) => a.status)).toStrictEqual([200, 200, 429]);
  });
});

describe('node:http middleware', () => {
  it('rateLimit(req, res) resolves true to go on, or answers 429 and resolves false', async () => {
    const limiter: Checker = await embedded();
    const url = await nodeApp({ limiter, policy: 'api', key: tenant });
    expect(await three(url)).toStrictEqual(threeAnswers(API_POLICY, 'text/plain', 'hello'));
  });

  it('refuses options without a limiter or a policy', () => {
    expect(() => rateLimit({ policy: 'api' } as never)).toThrow('limiter: must be a limiter (createLimiter) or a client (createClient)');
    expect(() => rateLimit({ limiter: { check: async () => ({}) } } as never)).toThrow('policy: must be a policy name or a function');
  });
});

describe('package exports (the built dist/, as an installed package would load them)', () => {
  it('sluice/client and sluice/middleware/{node,express,fastify} resolve to their modules', async () => {
    const { execFileSync } = await import('node:child_process');
    const { PROJECT_ROOT } = await import('../helpers/server.js');
    const code = [
      "const c = await import('sluice/client');",
      "const n = await import('sluice/middleware/node');",
      "const e = await import('sluice/middleware/express');",
      "const f = await import('sluice/middleware/fastify');",
      'console.log(JSON.stringify([typeof c.createClient, typeof c.SluiceClientError, typeof n.rateLimit, typeof e.sluiceExpress, typeof f.sluiceFastify, typeof f.sluiceFastifyPlugin]));',
    ].join('\n');
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', code], { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 10_000 });
    expect(JSON.parse(out)).toStrictEqual(['function', 'function', 'function', 'function', 'function', 'function']);
  });
});
