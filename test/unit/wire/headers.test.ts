/**
 * The RateLimit, RateLimit-Policy and Retry-After fields per draft-ietf-httpapi-ratelimit-headers-10/-11,
 * through the HTTP front and read back with a Structured Fields parser: t is the time until more quota (the
 * wait, for a denial; absent when no wait would do), w is never a rounded sub-second period, integers stay
 * within sf-integer's 15 digits, and a bucket's burst is advertised.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { type PolicySpec } from '../../../src/config/policy-spec.js';
import { quotaWindow, rateLimitHeader, rateLimitPolicyHeader, SF_INTEGER_MAX } from '../../../src/wire/headers.js';
import { EPOCH_MINUTE, ManualClock } from '../../helpers/clock.js';
import { checkedRateHeaders, parseRateLimitList } from '../../helpers/ratelimit.js';
import { send, ServerPool } from '../../helpers/server.js';

const pool = new ServerPool();
afterAll(() => pool.closeAll());

describe('quotaWindow: w in whole seconds without changing the rate', () => {
  it.each([
    [10, 500, 20, 1], // 10 per 500 ms is 20 per second, not "10 per 1 s"
    [3, 1500, 6, 3],
    [1, 250, 4, 1],
    [7, 1001, 7000, 1001],
    [100, 60_000, 100, 60],
    [5, 2000, 5, 2],
    [0, 500, 0, 1],
  ])('limit %i per %i ms → q=%i;w=%i', (limit, periodMs, q, w) => {
    expect(quotaWindow({ limit, periodMs })).toStrictEqual({ q, w });
    expect(q / w).toBe((limit * 1000) / periodMs);
  });
});

describe('through HTTP, parsed by structured-headers', () => {
  const policies: Record<string, PolicySpec> = {
    half: { algorithm: 'token_bucket', limit: 10, period: 500, burst: 10 },
    zero: { algorithm: 'fixed_window', limit: 0, period: 60_000 },
    listed: { algorithm: 'token_bucket', limit: 5, period: 60_000, deny: ['mallory'] },
    huge: { algorithm: 'gcra', limit: 2_000_000_000_000_000, period: 1000, burst: 3_000_000_000_000_000 },
    sliding: { algorithm: 'sliding_window', limit: 2, period: 1000 },
  };

  async function check(url: string, path: string): Promise<{ json: Record<string, unknown>; headers: Record<string, unknown> }> {
    const a = await send(`${url}${path}`);
    const h = checkedRateHeaders(a.headers);
    return {
      json: a.json,
      headers: {
        ratelimit: h.ratelimit === null ? null : parseRateLimitList(h.ratelimit),
        policy: h['ratelimit-policy'] === null ? null : parseRateLimitList(h['ratelimit-policy']),
        retryAfter: h['retry-after'],
      },
    };
  }

  it('a 500 ms period is advertised as q=20;w=1, with its burst; t counts to the next token', async () => {
    const s = await pool.start({ policies, clock: new ManualClock(EPOCH_MINUTE) });
    const first = await check(s.url, '/v1/check?policy=half&key=k&cost=10');
    expect(first.headers).toStrictEqual({
      ratelimit: [{ name: 'half', params: { r: 0, t: 1 } }], // one token every 50 ms: 50 ms → 1 s
      policy: [{ name: 'half', params: { q: 20, w: 1, 'sluice-burst': 10 } }],
      retryAfter: null,
    });
    const denied = await send(`${s.url}/v1/auth?policy=half&key=k`);
    expect([denied.status, checkedRateHeaders(denied.headers)]).toStrictEqual([429, {
      ratelimit: '"half";r=0;t=1', 'ratelimit-policy': '"half";q=20;w=1;sluice-burst=10', 'retry-after': '1',
    }]);
  });

  it('limit 0 and a deny-listed key can never pass: r=0, no t, no Retry-After', async () => {
    const s = await pool.start({ policies, clock: new ManualClock(EPOCH_MINUTE) });
    const zero = await send(`${s.url}/v1/auth?policy=zero&key=k`);
    expect([zero.status, checkedRateHeaders(zero.headers)]).toStrictEqual([429, {
      ratelimit: '"zero";r=0', 'ratelimit-policy': '"zero";q=0;w=60', 'retry-after': null,
    }]);
    const listed = await send(`${s.url}/v1/auth?policy=listed&key=mallory`);
    expect([listed.status, checkedRateHeaders(listed.headers)]).toStrictEqual([429, {
      ratelimit: '"listed";r=0', 'ratelimit-policy': '"listed";q=5;w=60;sluice-burst=5', 'retry-after': null,
    }]);
    expect((await check(s.url, '/v1/check?policy=listed&key=mallory')).json).toMatchObject({ allowed: false, retryAfterMs: null, reason: 'denylist' });
  });

  it('counts of 10^15 and more are clamped to 999 999 999 999 999 (sf-integer has 15 digits)', async () => {
    const s = await pool.start({ policies, clock: new ManualClock(EPOCH_MINUTE) });
    const a = await check(s.url, '/v1/check?policy=huge&key=k');
    expect(a.json).toMatchObject({ allowed: true, limit: 2_000_000_000_000_000, remaining: 2_999_999_999_999_999 });
    expect(a.headers).toStrictEqual({
      ratelimit: [{ name: 'huge', params: { r: SF_INTEGER_MAX, t: 1 } }],
      policy: [{ name: 'huge', params: { q: SF_INTEGER_MAX, w: 1, 'sluice-burst': SF_INTEGER_MAX } }],
      retryAfter: null,
    });
  });

  it('sliding_window: t is the time until the counted grants have left both windows', async () => {
    const s = await pool.start({ policies, clock: new ManualClock(EPOCH_MINUTE + 250) });
    const a = await check(s.url, '/v1/check?policy=sliding&key=k');
    // the grant at 250 ms into its window weighs on the estimate until the next window ends: 1750 ms → 2 s
    expect([a.json.resetAfterMs, a.headers.ratelimit]).toStrictEqual([1750, [{ name: 'sliding', params: { r: 1, t: 2 } }]]);
  });
});

describe('rateLimitHeader without the binding limit (a remote limiter\'s decision)', () => {
  const d = { limit: 10, remaining: 3, resetAfterMs: 4200, policy: 'p' };
  it('says t only for a denial with a wait', () => {
    expect(rateLimitHeader({ ...d, allowed: true, retryAfterMs: 0 })).toBe('"p";r=3');
    expect(rateLimitHeader({ ...d, allowed: false, retryAfterMs: 1001 })).toBe('"p";r=3;t=2');
    expect(rateLimitHeader({ ...d, allowed: false, retryAfterMs: null })).toBe('"p";r=3');
  });
  it('a policy with a guard lists both, every member parseable', () => {
    const ps = compilePolicies({ g: { algorithm: 'fixed_window', limit: 9, period: 250 }, p: { algorithm: 'token_bucket', limit: 2, period: 1000, guard: 'g' } });
    const h = rateLimitPolicyHeader(ps.get('p')!, ps.get('g'));
    expect(parseRateLimitList(h)).toStrictEqual([
      { name: 'p', params: { q: 2, w: 1, 'sluice-burst': 2 } },
      { name: 'g', params: { q: 36, w: 1 } },
    ]);
  });
});
