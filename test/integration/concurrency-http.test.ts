/**
 * POST /v1/acquire and POST /v1/release on the real uWebSockets.js front, local and strict (the run's shared
 * redis-server), on a controlled clock: exact answers, 400 naming the field, 409 naming leaseId for a lease not
 * held (and nothing changed), 405 with Allow, 415.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ServerPool, postJson, send, type TestServer } from '../helpers/server.js';
import { connected, sharedRedis, type SharedRedis } from '../helpers/redis.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());

const JOBS = { algorithm: 'concurrency', limit: 2, leaseTtl: '30s', descriptors: ['tenant'] } as const;

let redis: SharedRedis;
let prefixes = 0;
beforeAll(async () => { redis = await sharedRedis(); });
afterAll(async () => { await redis?.stop(); });

async function start(strict: boolean): Promise<TestServer> {
  const s = await pool.start({
    policies: { jobs: { ...JOBS, ...(strict ? { consistency: 'strict' } : {}) }, free: { algorithm: 'token_bucket', limit: 1, period: '1s' } } as never,
    ...(strict ? { redis: { url: redis.url, prefix: `leasehttp${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 } } : {}),
  } as never);
  if (strict) await connected(s.limiter);
  return s;
}

describe.each([false, true])('POST /v1/acquire and /v1/release (strict: %s)', (strict) => {
  it('hands out leases up to the limit, frees them on release and at expiry, exactly', async () => {
    const s = await start(strict);
    const acquire = () => postJson(`${s.url}/v1/acquire`, { policy: 'jobs', descriptors: { tenant: 'acme' } });
    const a = await acquire();
    expect([a.status, a.contentType]).toEqual([200, 'application/json']);
    expect(a.json).toEqual({ allowed: true, leaseId: expect.stringMatching(/^[0-9a-f]{12}$/), limit: 2, remaining: 1, retryAfterMs: 0, leaseTtlMs: 30_000, policy: 'jobs' });
    if (strict) {
      // one sorted set per key (member = lease id, score = expiry), one hash tag, PX = the last expiry − now
      const key = `leasehttp${process.pid}.${prefixes}:{jobs:acme}:lease`;
      expect(await redis.client.zrange(key, 0, -1, 'WITHSCORES')).toEqual([a.json.leaseId, String(s.clock.now() + 30_000)]);
      const ttl = await redis.client.pttl(key);
      expect(ttl > 0 && ttl <= 30_000, `PTTL ${ttl}`).toBe(true);
    }
    s.clock.advance(2000);
    const b = await acquire();
    expect(b.json.remaining).toBe(0);
    s.clock.advance(1000);
    const denied = await acquire();
    expect([denied.status, denied.json]).toEqual([200, { allowed: false, leaseId: null, limit: 2, remaining: 0, retryAfterMs: 27_000, leaseTtlMs: 30_000, policy: 'jobs' }]);

    const r = await postJson(`${s.url}/v1/release`, { policy: 'jobs', key: 'acme', leaseId: b.json.leaseId });
    expect([r.status, r.json]).toEqual([200, { released: true, remaining: 1, policy: 'jobs' }]);
    // released twice: 409 naming leaseId, nothing changed
    const again = await postJson(`${s.url}/v1/release`, { policy: 'jobs', key: 'acme', leaseId: b.json.leaseId });
    expect([again.status, again.contentType, again.json.field, again.json.code, again.json.title]).toEqual([409, 'application/problem+json', 'leaseId', 'UNKNOWN_LEASE', 'Conflict']);
    expect(again.json.detail).toBe(`leaseId: "${b.json.leaseId}" is not held (unknown, already released, or expired): nothing was released`);
    expect((await acquire()).json.remaining).toBe(0);
    // a (acquired at +0) expires at +30 s: 27 s from now; at +30 s its place is free again
    expect((await acquire()).json.retryAfterMs).toBe(27_000);
    s.clock.advance(27_000);
    expect((await acquire()).json).toMatchObject({ allowed: true, remaining: 0 });
    expect((await postJson(`${s.url}/v1/release`, { policy: 'jobs', key: 'acme', leaseId: a.json.leaseId })).status).toBe(409);
  });

  it('refuses bad input with a 400 naming the field', async () => {
    const s = await start(strict);
    const bad: Array<[string, unknown, string]> = [
      ['/v1/acquire', { policy: 'jobs' }, 'key'],
      ['/v1/acquire', { key: 'k' }, 'policy'],
      ['/v1/acquire', { policy: 'jobs', key: 'k', cost: 1 }, 'cost'],
      ['/v1/acquire', { policy: 'free', key: 'k' }, 'policy'],
      ['/v1/acquire', [1], 'body'],
      ['/v1/acquire', '{"policy":', 'body'],
      ['/v1/acquire', { policy: 'jobs', descriptors: { region: 'eu' } }, 'descriptors.region'],
      ['/v1/release', { policy: 'jobs', key: 'k' }, 'leaseId'],
      ['/v1/release', { policy: 'jobs', key: 'k', leaseId: 'zz' }, 'leaseId'],
      ['/v1/release', { policy: 'jobs', key: 'k', leaseId: 5 }, 'leaseId'],
    ];
    for (const [path, body, field] of bad) {
      const a = await postJson(`${s.url}${path}`, body);
      expect([a.status, a.contentType, a.json?.field], `${path} ${JSON.stringify(body)}: ${a.text}`).toEqual([400, 'application/problem+json', field]);
      expect(a.json.detail.startsWith(`${field}: `)).toBe(true);
    }
    const unknown = await postJson(`${s.url}/v1/acquire`, { policy: 'nope', key: 'k' });
    expect([unknown.status, unknown.json.field, unknown.json.code]).toEqual([400, 'policy', 'UNKNOWN_POLICY']);
    // nothing was taken
    expect((await postJson(`${s.url}/v1/acquire`, { policy: 'jobs', key: 'k' })).json.remaining).toBe(1);
  });
});

describe('lease routes: methods and media types', () => {
  it('405 with Allow: POST, 415 for a body that is not JSON', async () => {
    const s = await start(false);
    for (const path of ['/v1/acquire', '/v1/release']) {
      const g = await send(`${s.url}${path}`);
      expect([g.status, g.headers.get('allow'), g.json.field]).toEqual([405, 'POST', 'method']);
      const t = await send(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' });
      expect([t.status, t.json.field]).toEqual([415, 'content-type']);
    }
  });
});
