/**
 * `onStoreError: local` seeds a key once per stall: a store answer to a call that was already in flight when
 * the key was seeded does not make it due again. That answer predates the local decisions made since the seed
 * (it cannot count them), so seeding the kernel from it would hand back what they spent: the instance would
 * admit, without the store, more than the R the README bounds it to. A call sent after the seed is answered
 * with what the store holds then, and ends the stall for the key as before.
 *
 * On a MemoryStore whose decisions fail on demand and whose next call can be held in flight (a slow Redis:
 * test/helpers/flaky-store.ts), on a controlled clock; token bucket, 5 an hour.
 */
import { describe, expect, it } from 'vitest';
import type { Decision, Limiter } from '../../../src/index.js';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded === true ? ` ${d.degradedBy}` : ''}`;
const check = (l: Limiter): Promise<Decision> => l.check({ policy: 'p', key: 'k', cost: 1 });

function setup(): ReturnType<typeof flakyLimiter> {
  return flakyLimiter({ p: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'strict', onStoreError: 'local' } }, T0);
}

describe('a store answer to a call in flight when the key was seeded', () => {
  it('does not seed the key again: the stall admits R locally in all, not R again per such answer', async () => {
    const { l, fail, hold, clock } = await setup();
    try {
      expect(brief(await check(l))).toBe('allow r=4');
      // a call in flight (the store slow), then the store fails the checks sent after it
      const release = hold();
      const inFlight = check(l);
      await Promise.resolve();
      fail(true);
      // seeded with the 4 left: 3 admitted locally
      const stall: string[] = [];
      for (let i = 0; i < 3; i++) stall.push(brief(await check(l)));
      expect(stall).toStrictEqual(['allow r=3 local', 'allow r=2 local', 'allow r=1 local']);
      // the call in flight is answered now: the store spends its token (4 → 3); it knows nothing of the 3
      fail(false);
      release();
      expect(brief(await inFlight)).toBe('allow r=3');
      fail(true);
      clock.now += 1; // no refill worth a token
      // the kernel goes on from what the stall left (1): 1 more, not 3 more from the store's answer
      const after: string[] = [];
      for (let i = 0; i < 4; i++) after.push(brief(await check(l)));
      expect(after).toStrictEqual(['allow r=0 local', 'deny r=0 local', 'deny r=0 local', 'deny r=0 local']);
      expect((await l.stats()).degraded).toStrictEqual({ p: { open: 0, closed: 0, local: 7 } });
    } finally {
      await l.close();
    }
  });

  it('a call sent after the seed ends the stall for the key: the next stall starts from its answer', async () => {
    const { l, fail } = await setup();
    try {
      expect(brief(await check(l))).toBe('allow r=4');
      fail(true);
      expect(brief(await check(l))).toBe('allow r=3 local');
      fail(false);
      // the local admission was never told to the store: it still holds 4
      expect(brief(await check(l))).toBe('allow r=3');
      fail(true);
      expect(brief(await check(l))).toBe('allow r=2 local');
    } finally {
      await l.close();
    }
  });
});
