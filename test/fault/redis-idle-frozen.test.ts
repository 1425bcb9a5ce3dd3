/**
 * An idle instance (no checks) and a frozen Redis (SIGSTOP): the breaker's heartbeat (src/store/breaker.ts,
 * `heartbeatMs`, default 1 s) sends its probe while nothing else asks Redis, so the breaker opens and
 * `stats().store.breaker` (the gauge, `/readyz`) says so; after SIGCONT its own probes close it, still with no
 * check. A trial run had seen `/readyz` say "connected" through a 5 s freeze on an idle instance.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { connected, startRedis, type TestRedis } from '../helpers/redis.js';
import { sleep } from '../helpers/clock.js';

const policies = { api: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;

describe('an idle instance, Redis frozen', () => {
  let r: TestRedis;
  let l: Limiter;
  beforeAll(async () => {
    r = await startRedis();
    l = await createLimiter({ policies, redis: { url: r.url, timeoutMs: 200 } });
    await connected(l);
  });
  afterAll(async () => {
    r?.resume();
    await l?.close();
    await r?.stop();
  });

  /** The breaker's state once it is `want`, polled every 50 ms for up to 5 s (the last state seen otherwise). */
  async function breakerBecomes(want: string): Promise<string | undefined> {
    let s = (await l.stats()).store?.breaker;
    for (let i = 0; i < 100 && s !== want; i++) {
      await sleep(50);
      s = (await l.stats()).store?.breaker;
    }
    return s;
  }

  it('the breaker opens without a check, and closes again after SIGCONT without one', async () => {
    expect((await l.check({ policy: 'api', key: 'k', cost: 1 })).remaining).toBe(4);
    expect((await l.stats()).store?.breaker).toBe('closed');
    r.pause();
    try {
      expect(await breakerBecomes('open')).toBe('open');
    } finally {
      r.resume();
    }
    expect(await breakerBecomes('closed')).toBe('closed');
    // and Redis decides the next check
    const d = await l.check({ policy: 'api', key: 'k', cost: 1 });
    expect([d.remaining, d.degraded ?? false]).toStrictEqual([3, false]);
  });
});
