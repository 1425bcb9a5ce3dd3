/**
 * The shared cases through the HTTP front (src/server/http.ts) against the real uWebSockets.js server on
 * 127.0.0.1, port 0, with a frozen, test-controlled clock: wait rounding (case 08) in Retry-After and the
 * RateLimit fields, cases 02, 08 and 16 giving the engine's answers with exact headers, and awkward keys (case
 * 16) via the query and JSON. The rest of the front is test/integration/http.test.ts.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import type { Decision } from '../../src/types/decision.js';
import type { Limiter } from '../../src/types.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { EPOCH_MINUTE, ManualClock } from '../helpers/clock.js';
import { checkInput, loadCases, pickExpected, type Case } from '../helpers/cases.js';
import { postJson, query, send, ServerPool, TEST_MAX_KEYS, type Answer } from '../helpers/server.js';
import { parseRateLimitList } from '../helpers/ratelimit.js';
import { checkUrl, expectProblem, isWellFormed, rateHeaders } from '../helpers/http-answers.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());

describe('wait rounding through HTTP (case 08)', () => {
  type Row = [t: number, allowed: boolean, retryAfterMs: number, retryAfter: string | null, rateLimit: string];
  const tables: Array<[string, PolicySpec, Row[]]> = [
    ['one token per 1500 ms', { algorithm: 'token_bucket', limit: 1, period: 1500 }, [
      [0, true, 0, null, '"p";r=0;t=2'], // reset 1500 → 2
      [100, false, 1400, '2', '"p";r=0;t=2'], // 1400 → 2
      [1100, false, 400, '1', '"p";r=0;t=1'], // 400 → 1
      [1500, true, 0, null, '"p";r=0;t=2'],
    ]],
    ['one token per 2000 ms: exact seconds stay exact', { algorithm: 'token_bucket', limit: 1, period: 2000 }, [
      [0, true, 0, null, '"p";r=0;t=2'],
      [0, false, 2000, '2', '"p";r=0;t=2'], // 2000 → 2, not 3
    ]],
    ['6 per minute', { algorithm: 'gcra', limit: 6, period: 60_000 }, [
      // t is the next token (one every 10 s), whatever the time to full (10, 20 ... 60 s)
      [0, true, 0, null, '"p";r=5;t=10'],
      [0, true, 0, null, '"p";r=4;t=10'],
      [0, true, 0, null, '"p";r=3;t=10'],
      [0, true, 0, null, '"p";r=2;t=10'],
      [0, true, 0, null, '"p";r=1;t=10'],
      [0, true, 0, null, '"p";r=0;t=10'],
      [0, false, 10_000, '10', '"p";r=0;t=10'], // 10 000 → 10, and t says the same as Retry-After
      [4000, false, 6000, '6', '"p";r=0;t=6'],
      [9999, false, 1, '1', '"p";r=0;t=1'], // 1 → 1
      [10_000, true, 0, null, '"p";r=0;t=10'],
    ]],
    ['3 per second: a third of a ms rounds up', { algorithm: 'token_bucket', limit: 3, period: 1000 }, [
      [0, true, 0, null, '"p";r=2;t=1'],
      [0, true, 0, null, '"p";r=1;t=1'],
      [0, true, 0, null, '"p";r=0;t=1'],
      [0, false, 334, '1', '"p";r=0;t=1'],
      [333, false, 1, '1', '"p";r=0;t=1'],
      [334, true, 0, null, '"p";r=0;t=1'],
    ]],
    ['the fixed window\'s last ms', { algorithm: 'fixed_window', limit: 1, period: 1000 }, [
      [0, true, 0, null, '"p";r=0;t=1'],
      [999, false, 1, '1', '"p";r=0;t=1'],
      [1000, true, 0, null, '"p";r=0;t=1'],
    ]],
    ['sliding window 3 per second', { algorithm: 'sliding_window', limit: 3, period: 1000 }, [
      // The grants of [0, 1000) weigh on the estimate until 2000: reset 2000 → t=2.
      [0, true, 0, null, '"p";r=2;t=2'],
      [0, true, 0, null, '"p";r=1;t=2'],
      [0, true, 0, null, '"p";r=0;t=2'],
      [0, false, 1334, '2', '"p";r=0;t=2'], // 1334 → 2
      [1333, false, 1, '1', '"p";r=0;t=1'], // reset 667 → 1
      [1334, true, 0, null, '"p";r=0;t=2'], // reset 1666 → 2
    ]],
  ];

  // The same checks to /v1/check (200 with the decision, no Retry-After) and, on a twin server with the same
  // clock, to /v1/auth (429 with Retry-After on a denial): both must send the same RateLimit.
  it.each(tables)('%s', async (_name, spec, rows) => {
    const s = await pool.start({ policies: { p: spec }, clock: new ManualClock(EPOCH_MINUTE) });
    const auth = await pool.start({ policies: { p: spec }, clock: new ManualClock(EPOCH_MINUTE) });
    const got: Row[] = [];
    for (const [t] of rows) {
      s.clock.set(EPOCH_MINUTE + t);
      auth.clock.set(EPOCH_MINUTE + t);
      const a = await send(`${s.url}/v1/check?policy=p&key=k`);
      const b = await send(`${auth.url}/v1/auth?policy=p&key=k`);
      const [ah, bh] = [rateHeaders(a), rateHeaders(b)];
      expect({ status: a.status, retryAfter: ah['retry-after'], authStatus: b.status, authRateLimit: bh.ratelimit })
        .toStrictEqual({ status: 200, retryAfter: null, authStatus: a.json.allowed ? 200 : 429, authRateLimit: ah.ratelimit });
      got.push([t, a.json.allowed, a.json.retryAfterMs, bh['retry-after'], ah.ratelimit!]);
    }
    expect(got).toStrictEqual(rows);
  });
});

// ---------------------------------------------------------------------------------------------------------

/** The shared cases that must hold through HTTP: 02 (last unit), 08 (rounding), 16 (awkward keys). */
const httpCases = loadCases().filter((c) => /^(02|08|16)-/.test(c.id));

describe('shared cases 02, 08, 16 through HTTP: same answers as the engine, exact headers', () => {
  it('every call of these cases can be sent over HTTP', () => {
    expect(httpCases.length).toBeGreaterThanOrEqual(23);
    for (const c of httpCases) {
      for (const call of c.calls) {
        expect(typeof call.key === 'string' && isWellFormed(call.key as string), `${c.id} #${call.index}`).toBe(true);
        expect(Number.isSafeInteger(call.cost) && (call.cost as number) >= 0, `${c.id} #${call.index}`).toBe(true);
      }
    }
  });

  /**
   * The t a decision's RateLimit must carry, found independently of the server: a denial's wait (Retry-After's
   * seconds), none for a denial for good, else the first ms at which a peek (cost 0, which changes nothing) at a
   * later time sees more than `remaining`, searched on the engine: seconds rounded up, exact for token_bucket,
   * gcra and fixed_window; for sliding_window the server says resetAfterMs, which must be no earlier than it.
   */
  let engine: Limiter;
  let setEngineNow: (t: number) => void;
  async function expectedT(d: Decision, input: { policy: string; key: string }, now: number): Promise<{ t?: number }> {
    if (!d.allowed) return d.retryAfterMs === null ? {} : { t: Math.max(1, Math.ceil(d.retryAfterMs / 1000)) };
    if (d.resetAfterMs === 0) return {};
    const more = async (dt: number): Promise<boolean> => {
      setEngineNow(now + dt);
      try {
        return (await engine.check({ ...input, cost: 0 })).remaining > d.remaining;
      } finally {
        setEngineNow(now);
      }
    };
    let lo = 0; // no more at lo (a peek now sees exactly `remaining`)
    let hi = d.resetAfterMs; // full again at hi
    if (!(await more(hi))) return {};
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (await more(mid)) hi = mid;
      else lo = mid;
    }
    const exact = Math.ceil(hi / 1000);
    const algorithm = engine.policies.get(input.policy)!.limits.find((l) => l.name === d.policy)!.algorithm;
    if (algorithm !== 'sliding_window' && algorithm !== 'sliding_log') return { t: exact };
    const t = Math.ceil(d.resetAfterMs / 1000);
    expect(t).toBeGreaterThanOrEqual(exact);
    return { t };
  }

  async function runOverHttp(c: Case, via: 'query' | 'json'): Promise<void> {
    const s = await pool.start({ policies: c.policies as Record<string, PolicySpec>, clock: new ManualClock(0) });
    let engineNow = 0;
    engine = await createLimiter({ policies: c.policies as Record<string, PolicySpec>, clock: () => engineNow, maxKeys: TEST_MAX_KEYS });
    setEngineNow = (t) => (engineNow = t);
    try {
      for (const call of c.calls) {
        const where = `${c.id} via ${via} call #${call.index + 1} (key ${JSON.stringify(call.key).slice(0, 40)})`;
        s.clock.set(call.t);
        engineNow = call.t;
        const input = checkInput(call) as { policy: string; key: string; cost: number };
        const [a, expected] = await Promise.all([
          via === 'query'
            ? send(checkUrl(s, { policy: input.policy, key: input.key, cost: input.cost }))
            : postJson(`${s.url}/v1/check`, input),
          engine.check(input).then((d) => d, (e: unknown) => e as Error & { field?: string }),
        ]);
        if (expected instanceof Error) {
          expect(call.expectError, where).toBe(true);
          expectProblem(a, 400, expected.field ?? '?', where);
          expect(a.json.detail, where).toBe(expected.message);
          expect(call.errorMentions.every((w) => (a.json.detail as string).toLowerCase().includes(w)), where).toBe(true);
          continue;
        }
        expect(call.expectError, where).toBe(false);
        expect({ status: a.status, contentType: a.contentType }, where).toStrictEqual({ status: 200, contentType: 'application/json' });
        expect(a.json, where).toStrictEqual(expected);
        if (call.expect !== undefined) expect(pickExpected(a.json, call.expect), where).toStrictEqual(call.expect);
        expect(a.json.remaining, where).toBeGreaterThanOrEqual(0);
        expect(a.json.retryAfterMs === 0, where).toBe(a.json.allowed);
        const policy = s.limiter.policies.get(input.policy)!;
        const headers = rateHeaders(a);
        expect(headers['retry-after'], where).toBe(null);
        expect(parseRateLimitList(headers['ratelimit-policy']!), where).toStrictEqual(policy.limits.map((l) => ({
          name: l.name,
          params: { q: l.limit * 1000 / gcd(l.periodMs, 1000), w: l.periodMs / gcd(l.periodMs, 1000), ...(l.algorithm === 'token_bucket' || l.algorithm === 'gcra' ? { 'sluice-burst': l.burst } : {}) },
        })));
        const d = a.json as Decision;
        const [item] = parseRateLimitList(headers.ratelimit!);
        expect(item, where).toStrictEqual({ name: d.policy, params: { r: d.remaining, ...(await expectedT(d, input, call.t)) } });
      }
    } finally {
      await engine.close();
    }
  }

  describe.each(['query', 'json'] as const)('via %s', (via) => {
    it.each(httpCases.map((c) => [c.id, c] as [string, Case]))('%s', async (_id, c) => {
      await runOverHttp(c, via);
    });
  });
});

describe('awkward keys (case 16) through HTTP', () => {
  it('keys over 1 KiB of UTF-8 and the empty key get a 400 naming key, via query and JSON, never a 5xx', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 2, period: 60_000 } } });
    for (const key of ['a'.repeat(1025), 'é'.repeat(513), '€'.repeat(342), '', '\ud800', 'x\udfffy']) {
      const where = `key of ${key.length} chars`;
      const viaJson = await postJson(`${s.url}/v1/check`, { policy: 'p', key });
      expectProblem(viaJson, 400, 'key', `${where} via JSON`);
      if (isWellFormed(key)) expectProblem(await send(checkUrl(s, { policy: 'p', key })), 400, 'key', `${where} via query`);
    }
  });

  it('the longest allowed keys work via the query: 1024 a, 512 é, 341 €', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 1, period: 60_000 } } });
    for (const key of ['a'.repeat(1024), 'é'.repeat(512), '€'.repeat(341)]) {
      const a = await send(checkUrl(s, { policy: 'p', key }));
      expect([a.status, a.json?.allowed], `${key.length} chars`).toStrictEqual([200, true]);
    }
  });

  it('keys that differ only in invalid UTF-8 bytes do not share a counter', async () => {
    // URLSearchParams (query) and Buffer#toString('utf8') (JSON body) turn every invalid byte into U+FFFD, so
    // key=%FF, key=%FE and key=%EF%BF%BD (a real U+FFFD) all become the key "\ufffd": one counter for all
    // three. Case 16: a key that passes validation must be independent of every other key; anything else
    // is a validation error. The engine itself refuses lone surrogates for exactly this reason.
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 1, period: 60_000 } } });
    const outcome = (a: Answer): string =>
      a.status === 400 ? `refused:${a.json?.field}` : a.json?.allowed === true ? 'independent' : 'collided';
    const first = await send(`${s.url}/v1/check?policy=p&key=%FF`);
    expect(first.status).toBeLessThan(500);
    const viaQuery = outcome(await send(`${s.url}/v1/check?policy=p&key=%FE`));
    const body = (b: number): Uint8Array =>
      Buffer.concat([Buffer.from('{"policy":"p","key":"j'), Buffer.from([b]), Buffer.from('"}')]);
    await send(`${s.url}/v1/check`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(0xff) });
    const viaJson = outcome(await send(`${s.url}/v1/check`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(0xfe) }));
    expect({ viaQuery, viaJson }).toStrictEqual({
      viaQuery: expect.stringMatching(/^(independent|refused:key)$/),
      viaJson: expect.stringMatching(/^(independent|refused:key|refused:body)$/),
    });
  });
});

// ---------------------------------------------------------------------------------------------------------

afterAll(() => pool.closeAll());

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}
