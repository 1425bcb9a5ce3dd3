/**
 * The admin API through the built CLI: `sluice serve --admin-port 0 --admin-token T` as a child process (run
 * `npm run build` first). Bearer-token checks (401 for a missing, wrong or wrong-length token), the public port
 * not serving admin routes, GET and PUT /v1/policies (valid: checks follow the new numbers; invalid: 400 naming
 * the field, old rules kept), key inspect and reset, and strict mode against a redis-server of the test's own.
 * Numbers here are counts of tokens on buckets that refill one token per 864 s, so they are exact in real time;
 * time-dependent values (reset times, refills) are asserted exactly on a controlled clock in
 * test/unit/engine/inspect.test.ts.
 */
import os from 'node:os';
import path from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runSluice, send, spawnServe, type Answer, type ServeProcess } from '../helpers/server.js';
import { sharedRedis, keysUnder, type SharedRedis } from '../helpers/redis.js';
import { storeKey } from '../../src/keys/store-key.js';
import { readState } from '../helpers/state.js';
import { startAdminServer } from '../../src/server/admin.js';

const TOKEN = 'test-admin-token-0123456789abcdef';

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-admin-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const running: ServeProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.kill()));
});

/** 100 a day, burst 100: one token back every 864 s, so counts do not move during a test. */
const CONFIG = `
policies:
  free:
    algorithm: token_bucket
    limit: 100
    period: 1d
    burst: 100
  tenant:
    algorithm: fixed_window
    limit: 10
    period: 1d
    descriptors: [tenant, action]
`;

interface Admin {
  p: ServeProcess;
  /** http://127.0.0.1:<admin port> */
  admin: string;
  /** Sends to the admin port with the right token. */
  call(method: string, route: string, body?: string, type?: string): Promise<Answer>;
}

function writeTmp(name: string, text: string): string {
  const file = path.join(tmp, name);
  writeFileSync(file, text);
  return file;
}

async function serveAdmin(config = CONFIG, extra: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Admin> {
  const file = writeTmp(`policies-${running.length}-${Date.now()}.yaml`, config);
  const p = await spawnServe(['--config', file, '--admin-port', '0', '--admin-token', TOKEN, ...extra], { env });
  running.push(p);
  const line = p.logs().find((l) => l.msg === 'admin API listening');
  expect(line).toMatchObject({ host: '127.0.0.1', port: expect.any(Number) });
  const admin = `http://127.0.0.1:${line!.port as number}`;
  return {
    p, admin,
    call: (method, route, body, type = 'application/json') => send(`${admin}${route}`, {
      method, body, headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': type }) },
    }),
  };
}

async function spend(url: string, q: string, n: number): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < n; i++) if ((await send(`${url}/v1/check?${q}`)).json.allowed) admitted++;
  return admitted;
}

describe('admin API: authentication and separation', () => {
  it('answers 401 with WWW-Authenticate for a missing, wrong or malformed token, on every path', async () => {
    const { admin } = await serveAdmin();
    const wrongSameLength = TOKEN.slice(0, -1) + (TOKEN.endsWith('f') ? 'e' : 'f');
    const cases: Array<[string, Record<string, string>, string]> = [
      ['missing', {}, 'authorization: a bearer token is required'],
      ['wrong, same length', { authorization: `Bearer ${wrongSameLength}` }, 'authorization: the bearer token is not valid'],
      ['wrong, shorter', { authorization: 'Bearer nope' }, 'authorization: the bearer token is not valid'],
      ['wrong, longer', { authorization: `Bearer ${TOKEN}x` }, 'authorization: the bearer token is not valid'],
      ['another scheme', { authorization: `Basic ${TOKEN}` }, 'authorization: must be "Bearer <token>"'],
    ];
    for (const [method, route] of [['GET', '/v1/policies'], ['PUT', '/v1/policies'], ['GET', '/v1/keys/free/acme'], ['DELETE', '/v1/keys/free/acme'], ['GET', '/nope']]) {
      for (const [what, headers, detail] of cases) {
        const r = await send(`${admin}${route}`, { method, headers });
        expect({ what, route, method, status: r.status, auth: r.headers.get('www-authenticate'), type: r.contentType, body: r.json }).toStrictEqual({
          what, route, method, status: 401, auth: 'Bearer realm="sluice-admin"', type: 'application/problem+json',
          body: { type: 'about:blank', title: 'Unauthorized', status: 401, detail, field: 'authorization', code: 'UNAUTHORIZED' },
        });
      }
    }
    // the scheme is case-insensitive (RFC 9110)
    expect((await send(`${admin}/v1/policies`, { headers: { authorization: `bearer ${TOKEN}` } })).status).toBe(200);
  });

  it('the public port serves none of the admin routes, even with the token', async () => {
    const { p } = await serveAdmin();
    for (const [method, route] of [['GET', '/v1/policies'], ['PUT', '/v1/policies'], ['GET', '/v1/keys/free/acme'], ['DELETE', '/v1/keys/free/acme']]) {
      const r = await send(`${p.url}${route}`, { method, headers: { authorization: `Bearer ${TOKEN}` } });
      expect({ route, method, status: r.status, code: r.json?.code }).toStrictEqual({ route, method, status: 404, code: 'NOT_FOUND' });
    }
  });

  it('refuses to start with an admin port but no token (a usage error: exit 2)', async () => {
    const r = await runSluice(['serve', '--port', '0', '--host', '127.0.0.1', '--admin-port', '0'], { env: { SLUICE_ADMIN_TOKEN: '' } });
    expect({ code: r.code, first: r.stderr.split('\n')[0] }).toStrictEqual({
      code: 2, first: 'sluice serve: the admin API needs a token: give --admin-token or SLUICE_ADMIN_TOKEN with --admin-port (or server.admin)',
    });
  });

  it('refuses a token shorter than 16 characters, from the flag or the environment, before listening', async () => {
    const why = 'must be at least 16 characters (got 5); generate one with `openssl rand -hex 32`';
    const flag = await runSluice(['serve', '--port', '0', '--host', '127.0.0.1', '--admin-port', '0', '--admin-token', 'hunter']);
    expect({ code: flag.code, stdout: flag.stdout, first: flag.stderr.split('\n')[0] })
      .toStrictEqual({ code: 2, stdout: '', first: `sluice serve: --admin-token / SLUICE_ADMIN_TOKEN: ${why.replace('got 5', 'got 6')}` });
    const env = await runSluice(['serve', '--port', '0', '--host', '127.0.0.1', '--admin-port', '0'], { env: { SLUICE_ADMIN_TOKEN: 'abcde' } });
    expect({ code: env.code, first: env.stderr.split('\n')[0] }).toStrictEqual({ code: 2, first: `sluice serve: --admin-token / SLUICE_ADMIN_TOKEN: ${why}` });
    await expect(startAdminServer({ limiter: null as never, port: 0, host: '127.0.0.1', token: 'abcde' }))
      .rejects.toThrow(`admin token: ${why}`);
  });

  it('takes the token from SLUICE_ADMIN_TOKEN and stops with the server on SIGTERM', async () => {
    const file = writeTmp('env-token.yaml', CONFIG);
    const p = await spawnServe(['--config', file, '--admin-port', '0'], { env: { SLUICE_ADMIN_TOKEN: TOKEN } });
    running.push(p);
    const port = p.logs().find((l) => l.msg === 'admin API listening')!.port as number;
    expect((await send(`http://127.0.0.1:${port}/v1/policies`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    p.child.kill('SIGTERM');
    expect(await p.exited).toStrictEqual({ code: 0, signal: null });
  });

  it('takes the admin port and host from server.admin in the policies file', async () => {
    const file = writeTmp('file-admin.yaml', `server:\n  admin: { port: 0, host: 127.0.0.1 }\n${CONFIG}`);
    const p = await spawnServe(['--config', file], { env: { SLUICE_ADMIN_TOKEN: TOKEN } });
    running.push(p);
    const line = p.logs().find((l) => l.msg === 'admin API listening')!;
    expect(line.host).toBe('127.0.0.1');
    const r = await send(`http://127.0.0.1:${line.port as number}/v1/policies`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(Object.keys(r.json.policies)).toStrictEqual(['free', 'tenant']);
  });

  it('answers 404 and 405 like the public server', async () => {
    const { call } = await serveAdmin();
    const nf = await call('GET', '/v1/nope');
    expect({ status: nf.status, body: nf.json }).toStrictEqual({
      status: 404, body: { type: 'about:blank', title: 'Not Found', status: 404, detail: 'path: no route for /v1/nope', field: 'path', code: 'NOT_FOUND' },
    });
    const post = await call('POST', '/v1/policies', '{}');
    expect({ status: post.status, allow: post.headers.get('allow'), code: post.json.code }).toStrictEqual({ status: 405, allow: 'GET, PUT', code: 'METHOD_NOT_ALLOWED' });
    const patch = await call('PATCH', '/v1/keys/free/acme', '{}');
    expect({ status: patch.status, allow: patch.headers.get('allow') }).toStrictEqual({ status: 405, allow: 'GET, DELETE' });
    for (const path of ['/', '/status', '/v1/status', '/v1/hot']) {
      const a = await call('PATCH', path, '{}');
      expect({ path, status: a.status, allow: a.headers.get('allow'), code: a.json.code }).toStrictEqual({ path, status: 405, allow: 'GET', code: 'METHOD_NOT_ALLOWED' });
    }
  });
});

describe('admin API: policies', () => {
  it('GET /v1/policies: the version in force and each policy as a spec', async () => {
    const { p, call } = await serveAdmin();
    const r = await call('GET', '/v1/policies');
    expect(r.status).toBe(200);
    expect(r.json).toStrictEqual({
      version: p.logs().find((l) => l.msg === 'sluice serving')!.version,
      policies: {
        free: { algorithm: 'token_bucket', limit: 100, period: 86_400_000, burst: 100 },
        tenant: { algorithm: 'fixed_window', limit: 10, period: 86_400_000, burst: 10, descriptors: ['tenant', 'action'] },
      },
    });
  });

  it('PUT a valid set (JSON): 200 with what changed; checks follow the new numbers exactly', async () => {
    const { p, call } = await serveAdmin();
    expect(await spend(p.url, 'policy=free&key=acme', 3)).toBe(3);
    const before = (await call('GET', '/v1/policies')).json;
    const next = { policies: { free: { algorithm: 'token_bucket', limit: 5, period: '1d', burst: 5 }, tenant: before.policies.tenant } };
    const r = await call('PUT', '/v1/policies', JSON.stringify(next));
    expect(r.status).toBe(200);
    const after = (await call('GET', '/v1/policies')).json;
    expect(r.json).toStrictEqual({ version: after.version, added: [], removed: [], changed: ['free'] });
    expect(after.version).not.toBe(before.version);
    expect(after.policies.free).toStrictEqual({ algorithm: 'token_bucket', limit: 5, period: 86_400_000, burst: 5 });
    // new numbers, fresh state (the numbers changed): 5 admitted, the 6th denied
    const decisions = [];
    for (let i = 0; i < 6; i++) decisions.push((await send(`${p.url}/v1/check?policy=free&key=acme`)).json);
    expect(decisions.map((d) => [d.allowed, d.limit, d.remaining])).toStrictEqual([
      [true, 5, 4], [true, 5, 3], [true, 5, 2], [true, 5, 1], [true, 5, 0], [false, 5, 0],
    ]);
    // the document GET returns is accepted back as is, and changes nothing
    const again = await call('PUT', '/v1/policies', JSON.stringify({ policies: after.policies }));
    expect(again.json).toStrictEqual({ version: after.version, added: [], removed: [], changed: [] });
  });

  it('GET then PUT of a set using every kind of field changes nothing (delay, path descriptors, calendars, auth cost, RLS routes)', async () => {
    const { call } = await serveAdmin(`
policies:
  jobs: { algorithm: token_bucket, limit: 10, period: 1s, onLimit: delay, maxDelayMs: 2s, descriptors: [tenant], authCost: query }
  per-route: { algorithm: gcra, limit: 5, period: 1s, descriptors: [{ name: path, from: path }] }
  plan:
    limits:
      - { algorithm: fixed_window, limit: 1000, period: 1mo, timeZone: Asia/Tokyo, name: monthly }
      - { algorithm: fixed_window, limit: 100, period: 1d, timeZone: UTC, name: daily }
  edge: { algorithm: token_bucket, limit: 20, period: 1m, authCost: 2, rls: { domain: edge, entries: [{ key: remote_address }] } }
`);
    const read = (await call('GET', '/v1/policies')).json;
    const same = await call('PUT', '/v1/policies', JSON.stringify(read));
    expect({ status: same.status, json: same.json }).toStrictEqual({ status: 200, json: { version: read.version, added: [], removed: [], changed: [] } });
    // a policy named __proto__ (a valid name) is listed like any other, so a GET-edit-PUT keeps it
    const proto = await call('PUT', '/v1/policies', `{"policies":{"a":{"algorithm":"token_bucket","limit":5,"period":1000},"__proto__":{"algorithm":"token_bucket","limit":7,"period":1000}}}`);
    expect({ status: proto.status, added: proto.json.added }).toStrictEqual({ status: 200, added: ['a', '__proto__'] });
    const listed = (await call('GET', '/v1/policies')).json;
    expect(Object.keys(listed.policies)).toStrictEqual(['a', '__proto__']);
    expect(listed.policies.__proto__).toStrictEqual({ algorithm: 'token_bucket', limit: 7, period: 1000, burst: 7 });
    const again = await call('PUT', '/v1/policies', JSON.stringify(listed));
    expect(again.json).toMatchObject({ added: [], removed: [], changed: [] });
  });

  it('PUT with the version GET returned is a compare-and-set: the same version applies, a stale one is 409', async () => {
    const { call } = await serveAdmin();
    const read = (await call('GET', '/v1/policies')).json;
    // GET's whole document, sent back unchanged
    const same = await call('PUT', '/v1/policies', JSON.stringify(read));
    expect({ status: same.status, json: same.json }).toStrictEqual({ status: 200, json: { version: read.version, added: [], removed: [], changed: [] } });
    // edited and sent back: applied
    const edited = { ...read, policies: { ...read.policies, free: { ...read.policies.free, limit: 7, burst: 7 } } };
    const ok = await call('PUT', '/v1/policies', JSON.stringify(edited));
    expect({ status: ok.status, changed: ok.json.changed }).toStrictEqual({ status: 200, changed: ['free'] });
    // the same edit again, still carrying the version read before it: someone changed the set since
    const stale = await call('PUT', '/v1/policies', JSON.stringify({ ...edited, policies: { ...edited.policies, free: { ...read.policies.free, limit: 9, burst: 9 } } }));
    expect({ status: stale.status, code: stale.json.code, field: stale.json.field }).toStrictEqual({ status: 409, code: 'CONFLICT', field: 'version' });
    expect(stale.json.detail).toBe(`version: the policies in force are version ${ok.json.version}, not ${read.version}: someone changed them since you read them; GET them again and reapply your change`);
    expect((await call('GET', '/v1/policies')).json.policies.free.limit).toBe(7);
    const bad = await call('PUT', '/v1/policies', JSON.stringify({ ...read, version: 3 }));
    expect({ status: bad.status, field: bad.json.field }).toStrictEqual({ status: 400, field: 'version' });
  });

  it('PUT a YAML document adds a policy', async () => {
    const { p, call } = await serveAdmin();
    const yaml = `${CONFIG}  paid:\n    algorithm: gcra\n    limit: 1000\n    period: 1d\n`;
    const r = await call('PUT', '/v1/policies', yaml, 'application/yaml');
    expect({ status: r.status, added: r.json.added, changed: r.json.changed }).toStrictEqual({ status: 200, added: ['paid'], changed: [] });
    expect((await send(`${p.url}/v1/check?policy=paid&key=k&cost=10`)).json).toMatchObject({ allowed: true, limit: 1000, remaining: 990 });
  });

  it('PUT an invalid set: 400 naming the field; the old rules stay in force', async () => {
    const { p, call } = await serveAdmin();
    const before = (await call('GET', '/v1/policies')).json;
    const bad = await call('PUT', '/v1/policies', JSON.stringify({ policies: { free: { algorithm: 'token_bucket', limit: 5, period: '10x' } } }));
    expect({ status: bad.status, type: bad.contentType, body: bad.json }).toStrictEqual({
      status: 400, type: 'application/problem+json',
      body: {
        type: 'about:blank', title: 'Bad Request', status: 400, code: 'CONFIG', field: 'policies.free.period',
        detail: '<api>: policies.free.period: must be a positive integer of ms or a duration string such as "1m" (got "10x")',
      },
    });
    const yamlBad = await call('PUT', '/v1/policies', 'policies:\n  free: [', 'application/yaml');
    expect({ status: yamlBad.status, code: yamlBad.json.code }).toStrictEqual({ status: 400, code: 'CONFIG' });
    expect(yamlBad.json.detail).toMatch(/^<api>: line \d+, column \d+: invalid YAML: /);
    const notJson = await call('PUT', '/v1/policies', '{"policies":');
    expect({ status: notJson.status, field: notJson.json.field, code: notJson.json.code }).toStrictEqual({ status: 400, field: 'body', code: 'INVALID_ARGUMENT' });
    const text = await call('PUT', '/v1/policies', 'x', 'text/plain');
    expect({ status: text.status, field: text.json.field }).toStrictEqual({ status: 415, field: 'content-type' });
    expect((await call('GET', '/v1/policies')).json).toStrictEqual(before);
    expect((await send(`${p.url}/v1/check?policy=free&key=acme`)).json).toMatchObject({ allowed: true, limit: 100, remaining: 99 });
  });
});

describe('admin API: keys', () => {
  it('GET /v1/keys/{policy}/{key}: the key\'s state; DELETE resets it (the next check has a full bucket)', async () => {
    const { p, call } = await serveAdmin(CONFIG, ['--shards', '2']);
    expect(await spend(p.url, 'policy=free&key=a%2Fb%20c', 30)).toBe(30);
    const r = await call('GET', `/v1/keys/free/${encodeURIComponent('a/b c')}`);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ policy: 'free', key: 'a/b c', version: expect.stringMatching(/^[0-9a-f]{8}$/), source: 'local' });
    expect(r.json.limits).toHaveLength(1);
    expect(r.json.limits[0]).toMatchObject({
      name: 'free', algorithm: 'token_bucket', limit: 100, burst: 100, periodMs: 86_400_000,
      held: true, tokens: 70, remaining: 70, lastUpdateMs: expect.any(Number),
    });
    expect(r.json.stalenessMs).toBeUndefined();

    const del = await call('DELETE', `/v1/keys/free/${encodeURIComponent('a/b c')}`);
    expect({ status: del.status, body: del.json }).toStrictEqual({ status: 200, body: { removed: 1 } });
    expect((await call('GET', `/v1/keys/free/${encodeURIComponent('a/b c')}`)).json.limits[0]).toMatchObject({ held: false, lastUpdateMs: null, tokens: 100 });
    expect((await send(`${p.url}/v1/check?policy=free&key=a%2Fb%20c`)).json).toMatchObject({ allowed: true, remaining: 99 });
    expect((await call('DELETE', '/v1/keys/free/never-seen')).json).toStrictEqual({ removed: 0 });
  });

  it('descriptor policies: the joined key in the path, or the descriptors in the query', async () => {
    const { p, call } = await serveAdmin();
    expect(await spend(p.url, 'policy=tenant&tenant=a%3Ab&action=read', 4)).toBe(4);
    const byQuery = await call('GET', '/v1/keys/tenant?tenant=a%3Ab&action=read');
    expect(byQuery.json).toMatchObject({ policy: 'tenant', key: 'a%3Ab:read' });
    expect(byQuery.json.limits[0]).toMatchObject({ algorithm: 'fixed_window', held: true, count: 4, remaining: 6 });
    const byPath = await call('GET', `/v1/keys/tenant/${encodeURIComponent('a%3Ab:read')}`);
    // the same state (resetAfterMs follows the real clock between the two reads)
    const sansTime = (j: { limits: Array<Record<string, unknown>> }): unknown => ({ ...j, limits: j.limits.map(({ resetAfterMs: _, ...s }) => s) });
    expect(sansTime(byPath.json)).toStrictEqual(sansTime(byQuery.json));
  });

  it('bad key requests: 400 naming the field', async () => {
    const { call } = await serveAdmin();
    const unknown = await call('GET', '/v1/keys/nope/k');
    expect({ status: unknown.status, code: unknown.json.code, field: unknown.json.field }).toStrictEqual({ status: 400, code: 'UNKNOWN_POLICY', field: 'policy' });
    const badDescriptor = await call('GET', '/v1/keys/tenant?tenant=a&region=x');
    expect({ status: badDescriptor.status, field: badDescriptor.json.field }).toStrictEqual({ status: 400, field: 'descriptors.region' });
    const noKey = await call('DELETE', '/v1/keys/free');
    expect({ status: noKey.status, field: noKey.json.field }).toStrictEqual({ status: 400, field: 'key' });
    const badEncoding = await call('GET', '/v1/keys/free/%E0%A4%A');
    expect({ status: badEncoding.status, field: badEncoding.json.field }).toStrictEqual({ status: 400, field: 'key' });
  });
});

describe('admin API: strict mode (Redis)', () => {
  let redis: SharedRedis;
  beforeAll(async () => {
    redis = await sharedRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('inspect reads Redis; DELETE removes the key\'s Redis state', async () => {
    const config = `
policies:
  api:
    limits:
      - { algorithm: token_bucket, limit: 100, period: 1d, burst: 100 }
      - { algorithm: fixed_window, limit: 1000, period: 1d, name: api-daily }
    consistency: strict
    onStoreError: closed
`;
    const { p, call } = await serveAdmin(config, ['--redis', redis.url]);
    expect(await spend(p.url, 'policy=api&key=acme', 7)).toBe(7);
    const r = await call('GET', '/v1/keys/api/acme');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ policy: 'api', key: 'acme', source: 'redis' });
    const version = r.json.version as string;
    const keys = [0, 1].map((i) => storeKey('sluice:', 'api', version, 'acme', i));
    const raw = await Promise.all(keys.map((k) => readState(redis.client, k)));
    const last = Number(raw[0]!.split(' ')[2]);
    expect(r.json.limits.map((s: Record<string, unknown>) => [s.name, s.held, s.lastUpdateMs, s.tokens ?? s.count, s.remaining])).toStrictEqual([
      ['api#0', true, last, 93, 93],
      ['api-daily', true, last, 7, 993],
    ]);
    expect(raw[1]!.split(' ')[0]).toBe('7');

    expect(await keysUnder(redis.client, 'sluice:{api:')).toStrictEqual([...keys].sort());
    const del = await call('DELETE', '/v1/keys/api/acme');
    expect({ status: del.status, body: del.json }).toStrictEqual({ status: 200, body: { removed: 2 } });
    expect(await keysUnder(redis.client, 'sluice:{api:')).toStrictEqual([]);
    expect((await call('GET', '/v1/keys/api/acme')).json.limits.map((s: Record<string, unknown>) => [s.held, s.tokens ?? s.count]))
      .toStrictEqual([[false, 100], [false, 0]]);
    expect((await send(`${p.url}/v1/check?policy=api&key=acme`)).json).toMatchObject({ allowed: true, remaining: 99 });
  });

  it('--redis-prefix (or SLUICE_REDIS_PREFIX) keeps a deployment\'s keys apart in a shared Redis', async () => {
    const config = 'policies:\n  api: { algorithm: token_bucket, limit: 100, period: 1d, consistency: strict, onStoreError: closed }\n';
    const a = await serveAdmin(config, ['--redis', redis.url, '--redis-prefix', 'team-a:']);
    const b = await serveAdmin(config, ['--redis', redis.url], { SLUICE_REDIS_PREFIX: 'team-b:' });
    expect(await spend(a.p.url, 'policy=api&key=acme', 3)).toBe(3);
    expect(await spend(b.p.url, 'policy=api&key=acme', 5)).toBe(5);
    const version = (await a.call('GET', '/v1/keys/api/acme')).json.version as string;
    expect(await keysUnder(redis.client, 'team-a:{')).toStrictEqual([storeKey('team-a:', 'api', version, 'acme', 0)]);
    expect(await keysUnder(redis.client, 'team-b:{')).toStrictEqual([storeKey('team-b:', 'api', version, 'acme', 0)]);
    expect((await send(`${a.p.url}/v1/check?policy=api&key=acme`)).json).toMatchObject({ allowed: true, remaining: 96 });
    expect((await send(`${b.p.url}/v1/check?policy=api&key=acme`)).json).toMatchObject({ allowed: true, remaining: 94 });
  });
});
