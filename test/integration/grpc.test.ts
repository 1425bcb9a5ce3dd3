/**
 * Envoy's rate limit service over gRPC (src/grpc/), with a @grpc/grpc-js client, on a manual clock: exact
 * statuses, limits, remaining counts and resets; cost from hits_addend; several descriptors; malformed
 * requests named; failure rules, consistency modes and metrics as over HTTP (the same limiter, the same
 * counters); grpc.health.v1.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { createLimiter } from '../../src/index.js';
import { startServer } from '../../src/server/http.js';
import { grpcService, startGrpcServer, RLS_SERVICE } from '../../src/grpc/server.js';
import { parseConfig } from '../../src/config/load.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { rlsClient, startGrpcRig, type GrpcRig, type RlsAnswer, type RlsCall } from '../helpers/grpc.js';
import { ManualClock } from '../helpers/clock.js';
import { freePort, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { send, TEST_MAX_KEYS } from '../helpers/server.js';

const rigs: GrpcRig[] = [];
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(rigs.splice(0).map((r) => r.close()));
  for (const c of cleanups.splice(0)) await c();
});
async function rig(o: Parameters<typeof startGrpcRig>[0]): Promise<GrpcRig> {
  const r = await startGrpcRig(o);
  rigs.push(r);
  return r;
}

const entries = (o: Record<string, string>): Array<{ key: string; value: string }> => Object.entries(o).map(([key, value]) => ({ key, value }));
const one = (domain: string, e: Record<string, string>, extra: Partial<RlsCall> = {}): RlsCall => ({ domain, descriptors: [{ entries: entries(e) }], ...extra });
const headers = (a: RlsAnswer): Record<string, string> => Object.fromEntries(a.response_headers_to_add.map((h) => [h.key, h.value]));
const status = (code: string, name: string, rpu: number, unit: string, remaining: number, resetMs: number): RlsAnswer['statuses'][0] => ({
  code, current_limit: { name, requests_per_unit: rpu, unit }, limit_remaining: remaining,
  duration_until_reset: { seconds: String(Math.floor(resetMs / 1000)), nanos: (resetMs % 1000) * 1_000_000 }, quota: null,
});
const NO_LIMIT = { code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null, quota: null };

const API: Record<string, PolicySpec> = {
  api: { algorithm: 'fixed_window', limit: 2, period: '1m', descriptors: ['tenant', 'action'] },
  bulk: { algorithm: 'token_bucket', limit: 10, period: '10s' , descriptors: ['tenant'] },
};

describe('native policies: domain = policy, entries = its descriptors', () => {
  it('admits twice, then OVER_LIMIT with exact resets, RateLimit fields and Retry-After', async () => {
    const r = await rig({ policies: API });
    const req = one('api', { tenant: 'acme', action: 'read' });
    const a = await r.client.shouldRateLimit(req);
    expect(a.overall_code).toBe('OK');
    expect(a.statuses).toStrictEqual([status('OK', 'api', 2, 'MINUTE', 1, 60_000)]);
    expect(headers(a)).toStrictEqual({ 'RateLimit-Policy': '"api";q=2;w=60', RateLimit: '"api";r=1;t=60' });
    r.clock.advance(15_500);
    const b = await r.client.shouldRateLimit(req);
    expect([b.overall_code, b.statuses]).toStrictEqual(['OK', [status('OK', 'api', 2, 'MINUTE', 0, 44_500)]]);
    r.clock.advance(1);
    const c = await r.client.shouldRateLimit(req);
    expect([c.overall_code, c.statuses]).toStrictEqual(['OVER_LIMIT', [status('OVER_LIMIT', 'api', 2, 'MINUTE', 0, 44_499)]]);
    expect(headers(c)).toStrictEqual({ 'RateLimit-Policy': '"api";q=2;w=60', RateLimit: '"api";r=0;t=45', 'Retry-After': '45' });
    // Entry order does not matter for a native policy (its declared order makes the key); another tuple has its own counter.
    const d = await r.client.shouldRateLimit({ domain: 'api', descriptors: [{ entries: entries({ action: 'read', tenant: 'acme' }) }] });
    expect(d.overall_code).toBe('OVER_LIMIT');
    expect((await r.client.shouldRateLimit(one('api', { tenant: 'acme', action: 'write' }))).statuses[0].limit_remaining).toBe(1);
  });

  it('cost: request hits_addend (0 means 1), a descriptor\'s own hits_addend (0: a look) overrides it', async () => {
    const r = await rig({ policies: API });
    const t = { tenant: 'acme' };
    const remaining = async (req: RlsCall): Promise<number> => (await r.client.shouldRateLimit(req)).statuses[0].limit_remaining;
    expect(await remaining(one('bulk', t))).toBe(9);
    expect(await remaining(one('bulk', t, { hits_addend: 0 }))).toBe(8);
    expect(await remaining(one('bulk', t, { hits_addend: 3 }))).toBe(5);
    expect(await remaining({ domain: 'bulk', hits_addend: 3, descriptors: [{ entries: entries(t), hits_addend: { value: 0 } }] })).toBe(5);
    expect(await remaining({ domain: 'bulk', hits_addend: 3, descriptors: [{ entries: entries(t), hits_addend: { value: 5 } }] })).toBe(0);
    const over = await r.client.shouldRateLimit(one('bulk', t));
    // token bucket 10 per 10 s: one token every 1 000 ms
    expect([over.overall_code, over.statuses]).toStrictEqual(['OVER_LIMIT', [status('OVER_LIMIT', 'bulk', 10, 'UNKNOWN', 0, 10_000)]]);
    expect(headers(over)['Retry-After']).toBe('1');
    const never = await r.client.shouldRateLimit(one('bulk', t, { hits_addend: 11 }));
    expect(never.overall_code).toBe('OVER_LIMIT');
    expect(headers(never)['Retry-After']).toBeUndefined(); // it can never pass: no wait would do
  });

  it('several descriptors: one status each, in order; any over limit makes the request OVER_LIMIT; no rule is OK with no limit', async () => {
    const r = await rig({ policies: API });
    await r.client.shouldRateLimit(one('api', { tenant: 'a', action: 'x' }));
    await r.client.shouldRateLimit(one('api', { tenant: 'a', action: 'x' }));
    const a = await r.client.shouldRateLimit({
      domain: 'api',
      descriptors: [
        { entries: entries({ tenant: 'b', action: 'x' }) },
        { entries: entries({ tenant: 'a', action: 'x' }) },
        { entries: entries({ remote_address: '10.0.0.1' }) },
        { entries: entries({ tenant: 'a' }) },
      ],
    });
    expect(a.overall_code).toBe('OVER_LIMIT');
    expect(a.statuses).toStrictEqual([status('OK', 'api', 2, 'MINUTE', 1, 60_000), status('OVER_LIMIT', 'api', 2, 'MINUTE', 0, 60_000), NO_LIMIT, NO_LIMIT]);
    expect(headers(a)).toStrictEqual({ 'RateLimit-Policy': '"api";q=2;w=60', RateLimit: '"api";r=1;t=60, "api";r=0;t=60', 'Retry-After': '60' });
    const unknown = await r.client.shouldRateLimit(one('nope', { tenant: 'a' }));
    expect([unknown.overall_code, unknown.statuses, unknown.response_headers_to_add]).toStrictEqual(['OK', [NO_LIMIT], []]);
  });

  it.each([
    ['no domain', { domain: '', descriptors: [{ entries: entries({ tenant: 'a' }) }] }, 'domain: is required'],
    ['no descriptors', { domain: 'api', descriptors: [] }, 'descriptors: must hold at least one descriptor'],
    ['a descriptor without entries', { domain: 'api', descriptors: [{ entries: entries({ tenant: 'a', action: 'x' }) }, { entries: [] }] }, 'descriptors[1].entries: must hold at least one entry'],
    ['an empty key', { domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: 'a' }, { key: '', value: 'x' }] }] }, 'descriptors[0].entries[1].key: must not be empty'],
    ['an empty value', { domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: '' }] }] }, 'descriptors[0].entries[0].value: must not be empty'],
    ['a limit override', { domain: 'api', descriptors: [{ entries: entries({ tenant: 'a' }), limit: { requests_per_unit: 5, unit: 'SECOND' } }] },
      'descriptors[0].limit: limit overrides are not supported: the limit is the one sluice is configured with (remove the route\'s limit override)'],
  ] as Array<[string, RlsCall, string]>)('%s → INVALID_ARGUMENT naming the field', async (_name, req, details) => {
    const r = await rig({ policies: API });
    expect(await r.client.failure(req)).toStrictEqual({ code: grpc.status.INVALID_ARGUMENT, details });
  });

  it('a descriptor whose values join to a key over 1 KiB is decided as its digest, one key per value; the others are still checked', async () => {
    const r = await rig({ policies: API });
    const long = (c: string) => ({ entries: entries({ tenant: c.repeat(1025), action: 'x' }) });
    const req = (c: string) => ({ domain: 'api', descriptors: [long(c), { entries: entries({ tenant: 'short', action: 'x' }) }] });
    const codes = async (c: string) => (await r.client.shouldRateLimit(req(c))).statuses.map((s: { code: string }) => s.code);
    // limit 2 a minute: the long value's key and the short one's each spent twice, then both denied
    expect([await codes('k'), await codes('k'), await codes('k')]).toStrictEqual([['OK', 'OK'], ['OK', 'OK'], ['OVER_LIMIT', 'OVER_LIMIT']]);
    // another long value is another key (its digest), the short one still denied
    expect(await codes('j')).toStrictEqual(['OK', 'OVER_LIMIT']);
  });

  it('a message over maxMessageBytes → RESOURCE_EXHAUSTED; more descriptors than maxDescriptors → INVALID_ARGUMENT', async () => {
    const r = await rig({ policies: API, server: { maxMessageBytes: 1024, maxDescriptors: 2 } });
    expect((await r.client.failure(one('api', { tenant: 'x'.repeat(2000), action: 'y' }))).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    const three = { domain: 'api', descriptors: [1, 2, 3].map((i) => ({ entries: entries({ tenant: String(i), action: 'x' }) })) };
    expect(await r.client.failure(three)).toStrictEqual({ code: grpc.status.INVALID_ARGUMENT, details: 'descriptors: at most 2 per request (got 3)' });
  });

  it('a closed limiter → UNAVAILABLE (Envoy then applies its failure_mode_deny)', async () => {
    const r = await rig({ policies: API });
    await r.limiter.close();
    expect(await r.client.failure(one('api', { tenant: 'a', action: 'x' }))).toStrictEqual({ code: grpc.status.UNAVAILABLE, details: 'limiter is closed' });
  });

  it('with shards: the same numbers; queues full (maxPending: OVERLOADED) → UNAVAILABLE', async () => {
    const clock = new ManualClock();
    const limiter = await createLimiter({ policies: API, shards: 1, clock: clock.now, maxKeys: TEST_MAX_KEYS, maxPending: 2 });
    const r = await rig({ policies: API, clock, limiter });
    const a = await r.client.shouldRateLimit(one('api', { tenant: 'acme', action: 'read' }));
    expect(a.statuses).toStrictEqual([status('OK', 'api', 2, 'MINUTE', 1, 60_000)]);
    const many = { domain: 'api', descriptors: [1, 2, 3, 4, 5].map((i) => ({ entries: entries({ tenant: `t${i}`, action: 'x' }) })) };
    expect(await r.client.failure(many)).toStrictEqual({ code: grpc.status.UNAVAILABLE, details: 'more than 2 checks pending' });
  });

  it('health Watch: SERVING, then NOT_SERVING when the server drains', async () => {
    const r = await rig({ policies: API });
    const Health = grpcService('grpc.health.v1.Health');
    const h = new Health(`127.0.0.1:${r.server.port}`, grpc.credentials.createInsecure()) as unknown as { Watch(req: unknown): grpc.ClientReadableStream<{ status: string }>; close(): void };
    const seen: string[] = [];
    const ended = new Promise<void>((resolve) => {
      const call = h.Watch({ service: '' });
      call.on('data', (m: { status: string }) => {
        seen.push(m.status);
        if (seen.length === 1) void r.server.close();
      });
      call.on('end', () => resolve());
      call.on('error', () => resolve());
    });
    await ended;
    h.close();
    expect(seen).toStrictEqual(['SERVING', 'NOT_SERVING']);
  });

  it('health: SERVING for the server and the rate limit service, NOT_FOUND for another', async () => {
    const r = await rig({ policies: API });
    expect(await r.client.health('')).toBe('SERVING');
    expect(await r.client.health(RLS_SERVICE)).toBe('SERVING');
    await expect(r.client.health('other')).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
  });
});

/** envoyproxy/ratelimit's README examples, in its own format. */
const ENVOY_CONFIG = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: { unit: hour, requests_per_unit: 2, name: login-per-ip }
  - key: path
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: internal
    value: "true"
    rate_limit: { unlimited: true }
  - key: beta
    shadow_mode: true
    detailed_metric: true
    rate_limit: { unit: day, requests_per_unit: 1 }
  - key: bucket
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket }
`;

describe('an envoyproxy/ratelimit config', () => {
  it('key-only entries count each value; exact values win over key-only; nested rules match the whole path', async () => {
    const clock = new ManualClock(1_700_002_800_000); // a whole hour
    const r = await rig({ policies: parseConfig(ENVOY_CONFIG, 'ratelimit.yaml').policies, clock });
    const ip = (v: string): RlsCall => one('edge', { remote_address: v });
    expect((await r.client.shouldRateLimit(ip('10.0.0.1'))).statuses).toStrictEqual([status('OK', 'edge.remote_address', 3, 'MINUTE', 2, 60_000)]);
    clock.advance(20_250);
    expect((await r.client.shouldRateLimit(ip('10.0.0.1'))).statuses).toStrictEqual([status('OK', 'edge.remote_address', 3, 'MINUTE', 1, 39_750)]);
    expect((await r.client.shouldRateLimit(ip('10.0.0.2'))).statuses).toStrictEqual([status('OK', 'edge.remote_address', 3, 'MINUTE', 2, 39_750)]);
    await r.client.shouldRateLimit(ip('10.0.0.1'));
    const over = await r.client.shouldRateLimit(ip('10.0.0.1'));
    expect([over.overall_code, over.statuses]).toStrictEqual(['OVER_LIMIT', [status('OVER_LIMIT', 'edge.remote_address', 3, 'MINUTE', 0, 39_750)]]);
    expect(headers(over)).toStrictEqual({ 'RateLimit-Policy': '"edge.remote_address";q=3;w=60', RateLimit: '"edge.remote_address";r=0;t=40', 'Retry-After': '40' });
    // epoch-aligned windows, as that service counts: the next minute starts afresh
    clock.advance(39_750);
    expect((await r.client.shouldRateLimit(ip('10.0.0.1'))).statuses[0].limit_remaining).toBe(2);

    // path=/login then remote_address: the nested rule (an hour, named); path=/other: the key-only path rule
    const login = await r.client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: entries({ path: '/login', remote_address: '10.0.0.1' }) }] });
    expect(login.statuses).toStrictEqual([status('OK', 'login-per-ip', 2, 'HOUR', 1, 3_540_000)]);
    expect((await r.client.shouldRateLimit(one('edge', { path: '/other' }))).statuses).toStrictEqual([status('OK', 'edge.path', 1, 'SECOND', 0, 1000)]);
    expect((await r.client.shouldRateLimit(one('edge', { path: '/other' }))).overall_code).toBe('OVER_LIMIT');
    // path=/login alone: that node has no rate_limit (no fallback to the key-only rule); a deeper request than the config: no limit
    expect((await r.client.shouldRateLimit(one('edge', { path: '/login' }))).statuses).toStrictEqual([NO_LIMIT]);
    expect((await r.client.shouldRateLimit(one('edge', { remote_address: '10.0.0.9', user: 'x' }))).statuses).toStrictEqual([NO_LIMIT]);
  });

  it('unlimited answers OK with the largest remaining; shadow_mode never denies; algorithm picks another algorithm', async () => {
    const r = await rig({ policies: parseConfig(ENVOY_CONFIG, 'ratelimit.yaml').policies });
    for (let i = 0; i < 3; i++) {
      expect((await r.client.shouldRateLimit(one('edge', { internal: 'true' }))).statuses)
        .toStrictEqual([{ code: 'OK', current_limit: null, limit_remaining: 4_294_967_295, duration_until_reset: null, quota: null }]);
    }
    expect((await r.client.shouldRateLimit(one('edge', { internal: 'false' }))).statuses).toStrictEqual([NO_LIMIT]);
    const day = 86_400_000 - (r.clock.now() % 86_400_000);
    expect((await r.client.shouldRateLimit(one('edge', { beta: 'u1' }))).statuses).toStrictEqual([status('OK', 'edge.beta', 1, 'DAY', 0, day)]);
    const shadow = await r.client.shouldRateLimit(one('edge', { beta: 'u1' }));
    expect([shadow.overall_code, shadow.statuses]).toStrictEqual(['OK', [status('OK', 'edge.beta', 1, 'DAY', 0, day)]]);
    expect({ ...(await r.limiter.stats()).shadow }).toStrictEqual({ 'edge.beta': { allow: 1, wouldDeny: 1 } });
    // token bucket of 10 per second: a token back every 100 ms
    await r.client.shouldRateLimit(one('edge', { bucket: 'b' }, { hits_addend: 10 }));
    r.clock.advance(250);
    expect((await r.client.shouldRateLimit(one('edge', { bucket: 'b' }))).statuses).toStrictEqual([status('OK', 'edge.bucket', 10, 'SECOND', 1, 850)]);
  });
});

describe('the same limiter as the HTTP front: counters, failure rules, consistency modes, metrics', () => {
  // a database of the run's shared redis-server, emptied after: nothing is left in the machine's own Redis
  let shared: SharedRedis;
  beforeAll(async () => {
    shared = await sharedRedis();
  });
  afterAll(async () => {
    await shared?.stop();
  });
  /** `realClock`: Redis-backed state merged against Redis's own time (sync mode) needs the wall clock. */
  async function both(policies: Record<string, PolicySpec>, redis?: { url: string; prefix?: string; timeoutMs?: number }, realClock = false) {
    const clock = new ManualClock();
    const limiter = await createLimiter({ policies, clock: realClock ? Date.now : clock.now, maxKeys: TEST_MAX_KEYS, redis });
    const http = await startServer({ limiter, host: '127.0.0.1', port: 0 });
    const g = await startGrpcServer({ limiter, host: '127.0.0.1', port: 0, metrics: http.metrics });
    const client = rlsClient(g.port);
    cleanups.push(async () => {
      client.close();
      await g.close();
      await http.close();
      await limiter.close();
    });
    return { clock, limiter, client, url: `http://127.0.0.1:${http.port}` };
  }

  it.each(['local', 'strict', 'sync'] as const)('consistency %s: gRPC and /v1/check spend one counter', async (consistency) => {
    const prefix = `grpc-${consistency}:`;
    const s = await both(
      { p: { algorithm: 'fixed_window', limit: 3, period: '1d', descriptors: ['tenant'], consistency } },
      consistency === 'local' ? undefined : { url: shared.url, prefix },
      consistency !== 'local',
    );
    const g = (): Promise<RlsAnswer> => s.client.shouldRateLimit(one('p', { tenant: 'acme' }));
    expect((await g()).statuses[0].limit_remaining).toBe(2);
    expect((await send(`${s.url}/v1/check?policy=p&tenant=acme`)).json).toMatchObject({ allowed: true, remaining: 1 });
    expect((await g()).statuses[0].limit_remaining).toBe(0);
    expect((await send(`${s.url}/v1/check?policy=p&tenant=acme`)).json).toMatchObject({ allowed: false, remaining: 0 });
    expect((await g()).overall_code).toBe('OVER_LIMIT');
  });

  it.each([
    ['open', 'OK', { code: 'OK', current_limit: { name: 'p', requests_per_unit: 3, unit: 'MINUTE' }, limit_remaining: 0, duration_until_reset: { seconds: '0', nanos: 0 }, quota: null }, {}],
    ['closed', 'OVER_LIMIT', { code: 'OVER_LIMIT', current_limit: { name: 'p', requests_per_unit: 3, unit: 'MINUTE' }, limit_remaining: 0, duration_until_reset: { seconds: '1', nanos: 0 }, quota: null }, { 'Retry-After': '1' }],
  ] as const)('Redis down, onStoreError %s → %s, as /v1/check decides', async (rule, overall, st, extra) => {
    const dead = await freePort(); // nothing listens there
    const s = await both({ p: { algorithm: 'fixed_window', limit: 3, period: '1m', descriptors: ['tenant'], consistency: 'strict', onStoreError: rule } },
      { url: `redis://127.0.0.1:${dead}`, timeoutMs: 50 });
    const a = await s.client.shouldRateLimit(one('p', { tenant: 'acme' }));
    expect([a.overall_code, a.statuses]).toStrictEqual([overall, [st]]);
    // open: admitted with nothing known of the key (reset 0), so RateLimit has no t (draft -10: t is optional)
    // not decided by Redis: said in a header, as /v1/check and /v1/auth say it
    expect(headers(a)).toStrictEqual({ 'RateLimit-Policy': '"p";q=3;w=60', RateLimit: rule === 'open' ? '"p";r=0' : '"p";r=0;t=1', ...extra, 'Sluice-Degraded': rule });
    expect((await send(`${s.url}/v1/check?policy=p&tenant=acme`)).json).toMatchObject({ allowed: rule === 'open', remaining: 0, degraded: true });
  });

  it('gRPC decisions are counted in the HTTP server\'s /metrics', async () => {
    const s = await both({ p: { algorithm: 'fixed_window', limit: 1, period: '1m', descriptors: ['tenant'] } });
    await s.client.shouldRateLimit(one('p', { tenant: 'a' }));
    await s.client.shouldRateLimit(one('p', { tenant: 'a' }));
    await s.client.failure({ domain: '', descriptors: [] });
    const text = (await send(`${s.url}/metrics`)).text;
    expect(text).toContain('sluice_decisions_total{policy="p",result="allowed"} 1');
    expect(text).toContain('sluice_decisions_total{policy="p",result="denied"} 1');
    expect(text).toContain('sluice_grpc_requests_total{code="OK"} 1');
    expect(text).toContain('sluice_grpc_requests_total{code="OVER_LIMIT"} 1');
    expect(text).toContain('sluice_grpc_requests_total{code="INVALID_ARGUMENT"} 1');
  });
});
