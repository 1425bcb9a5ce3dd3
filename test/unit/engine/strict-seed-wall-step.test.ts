/**
 * The `local` rule's seed on the wall clock (a limiter with no clock option: the cache reads the wall clock's
 * steps against a monotonic one, src/engine/strict/redis-clock.ts toLocal): the kernel decides a failed check at the
 * time its call was sent, so a state's Redis time must be read on the wall clock as it was then, whatever
 * batches were decided since. Date and performance are faked (performance.now stands for the monotonic clock;
 * setting the system time steps Date alone); the store's clock (Redis's) is a controlled one, which does not
 * step. Token bucket, 1 a second, burst 1.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, type Decision } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { flakyStore } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded === true ? ` ${d.degradedBy}` : ''}`;
/** Lets the limiter send what it has queued (its batches go out on the next turn). */
const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

afterEach(() => {
  vi.useRealTimers();
});

describe('the local rule\'s seed on the wall clock', () => {
  it('a step back while two calls of a key are in flight, a batch decided after it: the failed one is seeded on its own send\'s clock, no refill Redis did not give', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'], now: T0 });
    const redis = { now: T0 };
    const { store, hold } = flakyStore(new MemoryStore({ clock: () => redis.now, overLimitCache: false }));
    const l = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 1, period: '1s', burst: 1, consistency: 'strict', onStoreError: 'local' } }, store });
    const check = (key = 'k'): Promise<Decision> => l.check({ policy: 'p', key, cost: 1 });
    const held: Array<(fail?: boolean) => void> = [];
    try {
      // Redis's bucket for k is empty at T0 (a token again at T0 + 1,000)
      expect(brief(await check())).toBe('allow r=0');
      // A, then C, on k, sent at T0 (no time passes: Redis's clock, the wall clock and the monotonic one stand)
      held.push(hold());
      const a = check();
      await turn();
      held.push(hold());
      const c = check();
      await turn();
      // the wall clock steps back 3,000 ms; a check of another key is decided (and answered) after it
      vi.setSystemTime(T0 - 3000);
      expect(brief(await check('other'))).toBe('allow r=0');
      // A answered by Redis (its time T0: denied, empty), read at this instance's T0 − 3,000
      held[0]();
      expect(brief(await a)).toBe('deny r=0');
      // C fails: decided locally at its send's time, T0, from A's state. Redis would deny it (empty at T0, and
      // no time has passed); read at the latest batch's lead, A's Redis time T0 was this instance's
      // T0 − 2,999 on C's clock, 2,999 ms of refill: a token, admitted
      held[1](true);
      expect(brief(await c)).toBe('deny r=0 local');
    } finally {
      for (const release of held) release(true);
      await l.close();
    }
  });
});
