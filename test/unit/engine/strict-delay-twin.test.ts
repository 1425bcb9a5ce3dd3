/**
 * A strict policy with `onLimit: delay` decides a check under its runtime's delayed twin while a wait place is
 * free (src/engine/delay.ts) and under the runtime itself when every place is taken. The two are one policy
 * version: the over-limit cache's entry for a key must treat them as one runtime, not as a reload. Taken for a
 * reload, a check under one after a check under the other (1) dropped the store's answer to the earlier call
 * ("sent under a runtime since replaced"), and (2) skipped seeding the kernel in a stall, so `onStoreError:
 * local` decided the key from a full bucket while the store had spent most of it.
 *
 * On a MemoryStore whose calls can be held in flight and then failed (test/helpers/flaky-store.ts), on a
 * controlled clock; token bucket, 5 an hour; one wait place (maxDelayed 1).
 */
import { describe, expect, it } from 'vitest';
import type { Decision, Limiter } from '../../../src/index.js';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded === true ? ` ${d.degradedBy}` : ''}`;
const check = (l: Limiter, cost = 1): Promise<Decision> => l.check({ policy: 'p', key: 'k', cost });
/** Lets the limiter send what it has queued (its batches go out on the next turn). */
const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('strict with onLimit: delay, checks under the delayed twin and under the runtime itself', () => {
  it('learns from either and seeds a stall from the last answer, whichever runtime the failed check had', async () => {
    const held: Array<(fail?: boolean) => void> = [];
    const { l, hold: holdNext } = await flakyLimiter({
      p: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'strict', onStoreError: 'local', onLimit: 'delay', maxDelayMs: '1m' },
    }, T0, { maxDelayed: 1 });
    const hold = (): ((fail?: boolean) => void) => {
      const release = holdNext();
      held.push(release);
      return release;
    };
    try {
      // under the twin (the place is free): the store holds 3
      expect(brief(await check(l, 2))).toBe('allow r=3');
      // W under the twin, in flight: it holds the one place, so X, made while W is in flight, is decided under
      // the runtime itself; its call is in flight too
      const releaseW = hold();
      const w = check(l);
      await turn();
      const releaseX = hold();
      const x = check(l);
      await turn();
      // W answered: the store holds 2
      releaseW();
      expect(brief(await w)).toBe('allow r=2');
      // Y under the twin again (W gave its place back), in flight
      const releaseY = hold();
      const y = check(l);
      await turn();
      // X, then Y, fail: decided locally from the 2 the store holds (W's answer), not from a full bucket (4 after
      // X) nor from the 3 before W
      releaseX(true);
      expect(brief(await x)).toBe('allow r=1 local');
      releaseY(true);
      expect(brief(await y)).toBe('allow r=0 local');
      expect((await l.stats()).degraded).toStrictEqual({ p: { open: 0, closed: 0, local: 2 } });
    } finally {
      // a call still held (a failed expectation above) would keep close() waiting
      for (const release of held) release(true);
      await l.close();
    }
  });
});
