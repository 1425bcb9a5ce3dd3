/**
 * The over-limit cache on the wall clock (a limiter with no clock option: the cache reads the wall clock's steps
 * against a monotonic one, src/engine/strict/redis-clock.ts): a step of the wall clock while the call that learned a
 * denial was in flight. Date and performance are faked (performance.now stands for the monotonic clock; setting
 * the system time steps Date alone); the store's clock (Redis's) is a controlled one. Token bucket, 1 a 6 s.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, type Decision } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { flakyStore } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining} retry=${d.retryAfterMs ?? 0}`;

afterEach(() => {
  vi.useRealTimers();
});

describe('the over-limit cache on the wall clock', () => {
  it('a step back while the denying call is in flight: once Redis has refilled, the check goes to Redis, which admits', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'], now: T0 });
    const redis = { now: T0 };
    const { store, hold } = flakyStore(new MemoryStore({ clock: () => redis.now }));
    const l = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 1, period: '6s', burst: 1, consistency: 'strict', onStoreError: 'closed' } }, store });
    const check = async (): Promise<string> => brief(await l.check({ policy: 'p', key: 'k', cost: 1 }));
    try {
      expect(await check()).toBe('allow r=0 retry=0');
      // denied by Redis at T0 (a token again at T0 + 6,000); the wall clock steps back 3,000 before the answer
      const release = hold();
      const inFlight = check();
      await Promise.resolve();
      vi.setSystemTime(T0 - 3000);
      release();
      expect(await inFlight).toBe('deny r=0 retry=6000');
      // 6,000 ms on (monotonic, Redis's clock, and the wall clock from where it stepped to)
      vi.advanceTimersByTime(6000);
      redis.now += 6000;
      // Redis admits; the cache, reading the bound at the answer's lead, had denied with 2,999 to wait
      expect(await check()).toBe('allow r=0 retry=0');
    } finally {
      await l.close();
    }
  });
});
