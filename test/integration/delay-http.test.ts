/**
 * onLimit: delay over HTTP, against the real server on 127.0.0.1 with a frozen clock: /v1/check and
 * /v1/auth hold a delayed answer until its delay has passed (a real timer) and then answer 200 with
 * `Sluice-Delay-Ms` and no Retry-After; `wait=0` answers at once with the delay; a client that leaves frees
 * its wait place, not its tokens. No timing is asserted: only what the answers say, and the order of events.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { postJson, send, ServerPool, type Answer, type TestServer } from '../helpers/server.js';
import { checkedRateHeaders } from '../helpers/ratelimit.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());
afterAll(() => pool.closeAll());

// 10 per second, burst 10: one token is 100 ms
const fast = { algorithm: 'token_bucket', limit: 10, period: '1s', onLimit: 'delay', maxDelayMs: 250 } as const;
// 1 per minute: a delay of a minute, for a request that is left before it is answered
const slow = { algorithm: 'gcra', limit: 1, period: '1m', onLimit: 'delay', maxDelayMs: 120_000 } as const;

function facts(a: Answer): Record<string, unknown> {
  return { status: a.status, json: a.json ?? null, delay: a.headers.get('sluice-delay-ms'), ...checkedRateHeaders(a.headers) };
}

async function start(shards = 0): Promise<TestServer> {
  return pool.start({ policies: { fast, slow } as never, shards });
}

async function waitingIs(s: TestServer, n: number): Promise<void> {
  const deadline = Date.now() + 5000;
  while ((await s.limiter.stats()).delayed.waiting !== n) {
    if (Date.now() > deadline) throw new Error(`wait places never reached ${n}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('/v1/check', () => {
  // shards 2: decided on the shard through its synchronous channel (Front.checkNow), the delay and wait place carried
  it.each([0, 2])('holds a delayed answer until its delay has passed; wait=0 answers at once with the delay (shards %i)', async (shards) => {
    const s = await start(shards);
    await send(`${s.url}/v1/check?policy=fast&key=a&cost=10`);
    const held = await send(`${s.url}/v1/check?policy=fast&key=a`);
    expect(facts(held)).toStrictEqual({
      status: 200, delay: '100',
      json: { allowed: true, limit: 10, remaining: 0, resetAfterMs: 1100, retryAfterMs: 0, policy: 'fast', delayMs: 100 },
      ratelimit: '"fast";r=0;t=1', 'ratelimit-policy': '"fast";q=10;w=1;sluice-burst=10', 'retry-after': null,
    });
    const now = await send(`${s.url}/v1/check?policy=fast&key=a&wait=0`);
    expect(facts(now)).toMatchObject({ status: 200, delay: '200', json: { allowed: true, delayMs: 200, resetAfterMs: 1200 } });
    // past maxDelayMs: denied as ever (200 with the decision), the earliest admitted retry in 50 ms
    const denied = await send(`${s.url}/v1/check?policy=fast&key=a`);
    expect(facts(denied)).toMatchObject({ status: 200, delay: null, json: { allowed: false, retryAfterMs: 50 }, 'retry-after': null });
  });

  it('POST: {"wait": 0} in the body; a bad wait is a 400 naming it; a batch answers at once with each delay', async () => {
    const s = await start();
    await postJson(`${s.url}/v1/check`, { policy: 'fast', key: 'b', cost: 10 });
    const a = await postJson(`${s.url}/v1/check`, { policy: 'fast', key: 'b', cost: 1, wait: 0 });
    expect(a.json).toMatchObject({ allowed: true, delayMs: 100 });
    const bad = await postJson(`${s.url}/v1/check`, { policy: 'fast', key: 'b', cost: 1, wait: 'later' });
    expect([bad.status, bad.json?.field]).toStrictEqual([400, 'wait']);
    const q = await send(`${s.url}/v1/check?policy=fast&key=b&wait=2`);
    expect([q.status, q.json?.field]).toStrictEqual([400, 'wait']);
    const batch = await postJson(`${s.url}/v1/check`, { checks: [{ policy: 'fast', key: 'b' }, { policy: 'fast', key: 'c' }] });
    expect(batch.json.results.map((r: { delayMs?: number; remaining: number }) => [r.delayMs ?? 0, r.remaining])).toStrictEqual([[200, 0], [0, 9]]);
  });

  // found by the mass fuzz: the wait flag was looked for in descriptors before they were validated (a 500)
  it.each([null, 'x', 7, [['wait', '0']]])('POST with descriptors %j: a 400 naming descriptors, not a 500', async (descriptors) => {
    const s = await start();
    const a = await postJson(`${s.url}/v1/check`, { policy: 'fast', cost: 1, descriptors });
    expect([a.status, a.json?.field]).toStrictEqual([400, 'descriptors']);
  });

  it('a client that leaves frees its wait place; its tokens stay spent', async () => {
    const s = await start();
    await send(`${s.url}/v1/check?policy=slow&key=k`);
    const ac = new AbortController();
    const left = fetch(`${s.url}/v1/check?policy=slow&key=k`, { signal: ac.signal }).catch((e: Error) => e.name);
    await waitingIs(s, 1);
    ac.abort();
    expect(await left).toBe('AbortError');
    await waitingIs(s, 0);
    // the abandoned check's token was reserved: the next one waits two emission intervals
    const next = await send(`${s.url}/v1/check?policy=slow&key=k&wait=0`);
    expect(next.json).toMatchObject({ allowed: true, delayMs: 120_000 });
  });
});

describe('/v1/auth', () => {
  it('holds, then 200 with Sluice-Delay-Ms and no Retry-After; wait=0 at once; past the bound a 429', async () => {
    const s = await start();
    await send(`${s.url}/v1/auth?policy=fast&key=a`);
    for (let i = 0; i < 9; i++) await send(`${s.url}/v1/auth?policy=fast&key=a`);
    const held = await send(`${s.url}/v1/auth?policy=fast&key=a`);
    expect(facts(held)).toStrictEqual({
      status: 200, json: null, delay: '100', ratelimit: '"fast";r=0;t=1', 'ratelimit-policy': '"fast";q=10;w=1;sluice-burst=10', 'retry-after': null,
    });
    const now = await send(`${s.url}/v1/auth?policy=fast&key=a&wait=0`);
    expect(facts(now)).toMatchObject({ status: 200, delay: '200', 'retry-after': null });
    const denied = await send(`${s.url}/v1/auth?policy=fast&key=a`);
    expect(facts(denied)).toMatchObject({ status: 429, delay: null, 'retry-after': '1', ratelimit: '"fast";r=0;t=1' });
  });
});
