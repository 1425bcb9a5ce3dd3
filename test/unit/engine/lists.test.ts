/**
 * Allow and deny lists (issue #8, item 5): exact keys, descriptor values, IPv4 and IPv6 CIDR ranges; deny
 * wins; an allowlisted check skips the limit and the guard and touches no state; counts are exact; bad
 * entries are refused naming the entry.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter, type PolicySpec } from '../../../src/index.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { createMetrics } from '../../../src/metrics/registry.js';
import { ManualClock } from '../../helpers/clock.js';
import { configError } from '../../helpers/limiter.js';
import { send, ServerPool } from '../../helpers/server.js';
import { parseMetrics } from '../../fault/support.js';

let limiters: Limiter[] = [];
const servers = new ServerPool();
afterEach(async () => {
  await servers.closeAll();
  await Promise.all(limiters.map((l) => l.close()));
  limiters = [];
});

async function make(policies: Record<string, PolicySpec>, shards: number): Promise<Limiter> {
  const l = await createLimiter({ policies, shards, clock: new ManualClock().now, maxKeys: 1024 });
  limiters.push(l);
  return l;
}

const API: PolicySpec = { algorithm: 'fixed_window', limit: 1, period: '1m', allow: ['vip', 'both'], deny: ['abuser', 'both'] };
const PER_IP: PolicySpec = {
  algorithm: 'fixed_window', limit: 1, period: '1m', descriptors: [{ name: 'client', header: 'x-forwarded-for' }],
  allow: ['10.0.0.0/8', '2001:db8::/32'],
  deny: ['10.6.6.0/24', '2001:db8:bad::/48', '192.0.2.1'],
};
const ALLOWED = (limit: number, policy: string): Decision => ({ allowed: true, limit, remaining: limit, resetAfterMs: 0, retryAfterMs: 0, policy, reason: 'allowlist' });
const DENIED = (limit: number, policy: string): Decision => ({ allowed: false, limit, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy, reason: 'denylist' });

describe.each([0, 2])('allow and deny lists with %i shards', (shards) => {
  it('exact keys: allowlisted keys skip the limit and touch no state, denylisted ones are refused, deny wins', async () => {
    const limiter = await make({ api: API }, shards);
    for (let i = 0; i < 3; i++) expect(await limiter.check({ policy: 'api', key: 'vip', cost: 1 })).toEqual(ALLOWED(1, 'api'));
    expect(await limiter.check({ policy: 'api', key: 'abuser', cost: 1 })).toEqual(DENIED(1, 'api'));
    expect(await limiter.check({ policy: 'api', key: 'both', cost: 1 })).toEqual(DENIED(1, 'api'));
    expect((await limiter.stats()).keys).toBe(0); // no kernel was asked
    // anyone else is limited as usual
    expect((await limiter.check({ policy: 'api', key: 'someone', cost: 1 })).allowed).toBe(true);
    expect(await limiter.check({ policy: 'api', key: 'someone', cost: 1 })).toEqual({
      allowed: false, limit: 1, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 60_000, policy: 'api',
    });
    expect((await limiter.stats()).keys).toBe(1);
    expect((await limiter.stats()).lists).toEqual({ api: { allow: 3, deny: 2 } });
  });

  it('IPv4 and IPv6 CIDR ranges and bare addresses match an ip descriptor value; deny wins', async () => {
    const limiter = await make({ 'per-ip': PER_IP }, shards);
    const check = (client: string): Promise<Decision> => limiter.check({ policy: 'per-ip', descriptors: { client }, cost: 1 });
    expect(await check('10.1.2.3')).toEqual(ALLOWED(1, 'per-ip'));
    expect(await check('10.1.2.3')).toEqual(ALLOWED(1, 'per-ip'));
    expect(await check('::ffff:10.1.2.3')).toEqual(ALLOWED(1, 'per-ip'));
    expect(await check('10.6.6.7')).toEqual(DENIED(1, 'per-ip'));
    expect(await check('2001:db8::1')).toEqual(ALLOWED(1, 'per-ip'));
    expect(await check('2001:DB8:0:0::7')).toEqual(ALLOWED(1, 'per-ip'));
    expect(await check('2001:db8:bad::1')).toEqual(DENIED(1, 'per-ip'));
    expect(await check('192.0.2.1')).toEqual(DENIED(1, 'per-ip'));
    // the joined key form of a descriptor policy matches the same way (":" escaped as %3A)
    expect(await limiter.check({ policy: 'per-ip', key: '2001%3Adb8%3A%3A1', cost: 1 })).toEqual(ALLOWED(1, 'per-ip'));
    // outside every range: limited
    expect((await check('192.0.2.2')).allowed).toBe(true);
    expect((await check('192.0.2.2')).allowed).toBe(false);
    expect((await check('2001:db9::1')).reason).toBeUndefined();
    expect((await limiter.stats()).lists).toEqual({ 'per-ip': { allow: 6, deny: 3 } });
  });

  it('matches each descriptor value and the joined key exactly', async () => {
    const limiter = await make({
      t: { algorithm: 'fixed_window', limit: 5, period: '1m', descriptors: ['tenant', 'action'], allow: ['acme'], deny: ['acme:delete'] },
    }, shards);
    expect(await limiter.check({ policy: 't', descriptors: { tenant: 'acme', action: 'read' }, cost: 1 })).toEqual(ALLOWED(5, 't'));
    expect(await limiter.check({ policy: 't', key: 'acme:write', cost: 1 })).toEqual(ALLOWED(5, 't'));
    expect(await limiter.check({ policy: 't', descriptors: { tenant: 'acme', action: 'delete' }, cost: 1 })).toEqual(DENIED(5, 't'));
    expect((await limiter.check({ policy: 't', descriptors: { tenant: 'acme2', action: 'read' }, cost: 1 })).remaining).toBe(4);
    // a value containing ":" is matched unescaped, never split
    expect((await limiter.check({ policy: 't', descriptors: { tenant: 'ac:me', action: 'read' }, cost: 1 })).remaining).toBe(4);
  });

  it('an allowlisted check skips the guard too; a denylisted one spends nothing from it', async () => {
    const limiter = await make({
      free: { algorithm: 'token_bucket', limit: 10, period: '1m', guard: 'global', allow: ['vip'], deny: ['bad'] },
      global: { algorithm: 'fixed_window', limit: 1, period: '1m' },
    }, shards);
    for (let i = 0; i < 3; i++) expect(await limiter.check({ policy: 'free', key: 'vip', cost: 1 })).toEqual(ALLOWED(10, 'free'));
    expect(await limiter.check({ policy: 'free', key: 'bad', cost: 1 })).toEqual(DENIED(10, 'free'));
    // the guard's single token is still there for the first ordinary check
    expect((await limiter.check({ policy: 'free', key: 'a', cost: 1 })).allowed).toBe(true);
    expect(await limiter.check({ policy: 'free', key: 'b', cost: 1 })).toMatchObject({ allowed: false, policy: 'global', retryAfterMs: 60_000 });
    expect((await limiter.stats()).lists).toEqual({ free: { allow: 3, deny: 1 } });
  });

  it('a shadow policy\'s deny list is a would-deny: admitted, counted in both', async () => {
    const limiter = await make({ s: { algorithm: 'fixed_window', limit: 1, period: '1m', shadow: true, deny: ['bad'] } }, shards);
    expect(await limiter.check({ policy: 's', key: 'bad', cost: 1 })).toEqual({
      allowed: true, limit: 1, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, policy: 's',
      shadow: { allowed: false, remaining: 0, retryAfterMs: null, reason: 'denylist' },
    });
    const st = await limiter.stats();
    expect(st.lists).toEqual({ s: { allow: 0, deny: 1 } });
    expect(st.shadow).toEqual({ s: { allow: 0, wouldDeny: 1 } });
  });
});

describe('allow and deny lists: metrics and HTTP', () => {
  it('counts list decisions in sluice_list_decisions_total exactly', async () => {
    const limiter = await make({ api: API, other: { algorithm: 'fixed_window', limit: 1, period: '1m' } }, 0);
    for (let i = 0; i < 4; i++) await limiter.check({ policy: 'api', key: 'vip', cost: 1 });
    for (let i = 0; i < 2; i++) await limiter.check({ policy: 'api', key: 'abuser', cost: 1 });
    await limiter.check({ policy: 'other', key: 'vip', cost: 1 });
    const m = parseMetrics(await createMetrics(limiter).render());
    expect(m.get('sluice_list_decisions_total{list="allow",policy="api"}')).toBe(4);
    expect(m.get('sluice_list_decisions_total{list="deny",policy="api"}')).toBe(2);
    expect(m.has('sluice_list_decisions_total{list="allow",policy="other"}')).toBe(false);
  });

  it('/v1/check reports the reason; /v1/auth refuses a denylisted address from X-Forwarded-For with no Retry-After', async () => {
    const s = await servers.start({ policies: { 'per-ip': PER_IP } });
    const allowed = await send(`${s.url}/v1/check?policy=per-ip&client=10.0.0.1`);
    expect(allowed.json).toEqual(ALLOWED(1, 'per-ip'));
    const denied = await send(`${s.url}/v1/check?policy=per-ip&client=192.0.2.1`);
    expect(denied.json).toEqual(DENIED(1, 'per-ip'));
    const auth = await send(`${s.url}/v1/auth?policy=per-ip`, { headers: { 'x-forwarded-for': '10.6.6.1, 10.0.0.1' } });
    expect(auth.status).toBe(429);
    expect(auth.headers.get('retry-after')).toBeNull();
    const ok = await send(`${s.url}/v1/auth?policy=per-ip`, { headers: { 'x-forwarded-for': '2001:db8::5' } });
    expect(ok.status).toBe(200);
    const m = parseMetrics((await send(`${s.url}/metrics`)).text);
    expect(m.get('sluice_list_decisions_total{list="allow",policy="per-ip"}')).toBe(2);
    expect(m.get('sluice_list_decisions_total{list="deny",policy="per-ip"}')).toBe(2);
  });
});

describe('allow and deny lists: validation', () => {
  const T = { algorithm: 'token_bucket', limit: 1, period: 1000 };
  it.each<[unknown, string, string]>([
    [{ allow: ['a', '10.0.0.0/8', '10.0.0.0/33'] }, 'allow[2]', 'is not a valid CIDR range: the prefix length must be 0 to 32 for IPv4 (got "10.0.0.0/33")'],
    [{ deny: ['2001:db8::/129'] }, 'deny[0]', 'is not a valid CIDR range: the prefix length must be 0 to 128 for IPv6 (got "2001:db8::/129")'],
    [{ allow: ['10.0.0/8'] }, 'allow[0]', 'is not a valid CIDR range: the address before "/" is not an IPv4 or IPv6 address (got "10.0.0/8")'],
    [{ allow: ['10.0.0.256'] }, 'allow[0]', 'is not a valid IPv4 address: each of the four parts must be 0 to 255 (got "10.0.0.256")'],
    [{ deny: ['ok', 5] }, 'deny[1]', 'must be a key, an IP address or a CIDR range such as "10.0.0.0/8" (got 5)'],
    [{ deny: [''] }, 'deny[0]', 'must not be empty (got "")'],
    [{ allow: '10.0.0.0/8' }, 'allow', 'must be an array of keys, IP addresses or CIDR ranges (got "10.0.0.0/8")'],
  ])('refuses %j, naming %s', (extra, field, why) => {
    const err = configError({ p: { ...T, ...(extra as object) } });
    expect(err.message).toBe(`policy "p": ${field}: ${why}`);
    expect(err.field).toBe(field);
  });

  it('compiles the entries as given', () => {
    const p = compilePolicies({ p: { ...T, allow: ['vip', '10.0.0.0/8', '::1'], deny: ['2001:db8::/32'] } }).get('p')!;
    expect(p.allow).toEqual(['vip', '10.0.0.0/8', '::1']);
    expect(p.deny).toEqual(['2001:db8::/32']);
    expect(Object.isFrozen(p.allow)).toBe(true);
  });
});
