/**
 * The admin API's store calls (a key's reset: DEL; its inspection: GET, TIME) while Redis is frozen (SIGSTOP:
 * the connection stays open, nothing answers). They fail with STORE_FAILED under the checks' deadline
 * (`timeoutMs` of silence on the connection: src/store/deadline.ts), whatever the breaker's state. Before, a
 * reset's DEL waited for ioredis's 60 s command timeout ("Command timed out" after 60.0 s, reported by a trial
 * run), and held the admin request that long.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { connected, startRedis, type TestRedis } from '../helpers/redis.js';

const policies = {
  api: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'strict', onStoreError: 'closed' },
  leased: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'lease', onStoreError: 'closed' },
} as const;

/** The code and message a rejection carries, or 'resolved'. */
async function failure(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (e) {
    return `${(e as { code?: string }).code} ${(e as Error).message}`;
  }
}

describe('admin calls on a frozen Redis', () => {
  let r: TestRedis;
  let l: Limiter;
  beforeAll(async () => {
    r = await startRedis();
    l = await createLimiter({ policies, redis: { url: r.url, timeoutMs: 200, breaker: { resetMs: 60_000, maxResetMs: 60_000 } } });
    await connected(l);
  });
  afterAll(async () => {
    r?.resume();
    await l?.close();
    await r?.stop();
  });

  it('a reset and an inspection fail with STORE_FAILED after the deadline, the breaker closed or open; the reset runs late once Redis resumes', async () => {
    const held = async (): Promise<string[]> => r.client.keys('sluice:{api:*:k}:*');
    expect((await l.check({ policy: 'api', key: 'k', cost: 2 })).remaining).toBe(3);
    expect(await held()).toHaveLength(1);
    r.pause();
    try {
      // the breaker closed: the DEL is written, and nothing answers it
      expect((await l.stats()).store?.breaker).toBe('closed');
      expect(await failure(l.reset({ policy: 'api', key: 'k' }))).toBe('STORE_FAILED redis: no reply on the connection for 200 ms');
      // checks open the breaker (5 in a row fail); a reset still fails under the deadline, not after 60 s
      for (let i = 0; i < 6; i++) await l.check({ policy: 'api', key: `o${i}`, cost: 1 });
      expect((await l.stats()).store?.breaker).toBe('open');
      expect(await failure(l.reset({ policy: 'api', key: 'k' }))).toBe('STORE_FAILED redis: no reply on the connection for 200 ms');
      expect(await failure(l.inspect({ policy: 'api', key: 'k' }))).toMatch(/^STORE_FAILED redis: /);
      // a lease key's inspection reads its lease HASH: under the same deadline (it waited for the whole freeze)
      expect(await failure(l.inspect({ policy: 'leased', key: 'k' }))).toBe('STORE_FAILED redis: no reply on the connection for 200 ms');
    } finally {
      r.resume();
    }
    // the DELs were written to the frozen Redis's connection: it runs them once it resumes (a PING after them
    // on that connection answers after they ran)
    await l.check({ policy: 'api', key: 'other', cost: 1 });
    expect(await held()).toStrictEqual([]);
  });
});
