/**
 * The held strict call (src/engine/deciders/strict.ts, StrictDecider.held) on a frozen Redis (SIGSTOP): a held
 * check is answered within timeoutMs of silence from when it was made (+ a loop turn), as one sent at once is,
 * however the held call goes out later (with a smaller turn, or once it has holdUnder checks).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision } from '../../src/index.js';
import { startRedis, connected, type TestRedis } from '../helpers/redis.js';
import { brief } from '../helpers/assert.js';

const TIMEOUT = 300;
const policies = { p: { algorithm: 'token_bucket', limit: 100, period: '1h', consistency: 'strict', onStoreError: 'closed' } } as const;
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('a held call on a frozen Redis', () => {
  let r: TestRedis;
  beforeAll(async () => {
    r = await startRedis();
  });
  afterAll(async () => {
    r.resume();
    await r.client.quit().catch(() => undefined);
    await r.stop();
  });

  it.each([
    ['a smaller turn', 1],
    ['the turn that fills it to holdUnder', 8],
  ])('held checks sent later by %s are answered within timeoutMs of when they were made', async (_, last) => {
    const l = await createLimiter({ policies, redis: { url: r.url, prefix: `hf${last}:`, timeoutMs: TIMEOUT } });
    try {
      await connected(l);
      for (let i = 0; i < 3; i++) await l.check({ policy: 'p', key: 'warm', cost: 1 });
      r.pause();
      // one call in flight, then a turn of 8 strict checks (the Redis store's holdTurn): held behind it
      const ahead = l.check({ policy: 'p', key: 'a', cost: 1 });
      await nextTurn();
      const at = performance.now();
      const held: Array<Promise<Decision>> = [];
      for (let i = 0; i < 8; i++) held.push(l.check({ policy: 'p', key: `h${i}`, cost: 1 }));
      const answered = Promise.all(held).then((ds) => ({ ds, ms: performance.now() - at }));
      await nextTurn();
      // later, before the call ahead times out, a turn sends the held call out
      await sleep((TIMEOUT * 2) / 3);
      const more: Array<Promise<Decision>> = [];
      for (let i = 0; i < last; i++) more.push(l.check({ policy: 'p', key: `m${i}`, cost: 1 }));
      await nextTurn();
      const { ds, ms } = await answered;
      expect(ds.map(brief)).toEqual(Array.from({ length: 8 }, () => 'deny r=0 degraded:closed'));
      // (sent with the later turn and given a deadline of its own, they were answered ~TIMEOUT after it: 1.67x)
      expect(ms).toBeLessThan(TIMEOUT + 100);
      expect(brief(await ahead)).toBe('deny r=0 degraded:closed');
      await Promise.all(more);
    } finally {
      r.resume();
      await l.close();
    }
  }, 30_000);
});
