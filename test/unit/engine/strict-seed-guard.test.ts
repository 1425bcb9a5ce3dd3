/**
 * `onStoreError: local` starts a strict guard from the state last learned from the store for the guard's
 * key, whichever tenant's check carried it (src/engine/strict/table.ts SharedState, src/engine/deciders/strict.ts
 * seed), once per stall: a guard the store had exhausted stays exhausted for a tenant this instance never
 * saw, and a tenant whose own copy of the guard is older does not hand its tokens back. On a MemoryStore whose
 * decisions fail on demand (the over-limit cache off, so denials reach the store), on a controlled clock.
 */
import { describe, expect, it } from 'vitest';
import type { Decision, Limiter } from '../../../src/index.js';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
/** The guard: 2 an hour, so a token comes back every 1,800,000 ms. */
const GUARD_MS_PER_TOKEN = 1_800_000;

function setup(): ReturnType<typeof flakyLimiter> {
  return flakyLimiter({
    tenant: { algorithm: 'token_bucket', limit: 5, period: '1h', consistency: 'strict', onStoreError: 'local', guard: 'glob' },
    glob: { algorithm: 'token_bucket', limit: 2, period: '1h', consistency: 'strict', onStoreError: 'local' },
  }, T0);
}

const check = (l: Limiter, key: string): Promise<Decision> => l.check({ policy: 'tenant', key, cost: 1 });
const local = { degraded: true, degradedBy: 'local' };

describe('a strict guard under onStoreError: local', () => {
  it('one the store exhausted stays exhausted for tenants this instance never saw', async () => {
    const { l, fail, clock } = await setup();
    try {
      expect(await check(l, 'A')).toMatchObject({ allowed: true, remaining: 1 });
      expect(await check(l, 'A')).toMatchObject({ allowed: true, remaining: 0 });
      expect(await check(l, 'A')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: GUARD_MS_PER_TOKEN });
      fail(true);
      clock.now += 1000;
      // 1 ms longer than the store would say: the state's store time becomes this clock's by the offset's lower
      // bound (both clocks are read in whole ms), which refills less, never more (RedisClock.toLocal)
      for (const t of ['N1', 'N2', 'N3']) {
        expect(await check(l, t)).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: GUARD_MS_PER_TOKEN - 1000 + 1, ...local });
      }
      // the guard refills locally as it would in the store: one token after its wait, then none
      clock.now = T0 + GUARD_MS_PER_TOKEN + 1;
      expect(await check(l, 'N4')).toMatchObject({ allowed: true, remaining: 0, ...local });
      expect(await check(l, 'N5')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: GUARD_MS_PER_TOKEN, ...local });
    } finally {
      await l.close();
    }
  });

  it('a tenant whose copy of the guard is older does not get its tokens back', async () => {
    const { l, fail, clock } = await setup();
    try {
      expect(await check(l, 'A')).toMatchObject({ allowed: true, remaining: 1 });
      expect(await check(l, 'B')).toMatchObject({ allowed: true, remaining: 0 });
      expect(await check(l, 'C')).toMatchObject({ allowed: false, remaining: 0 });
      fail(true);
      clock.now += 1000;
      // A's own answer saw the guard with 1 token left; the store's latest (C's denial) says none
      for (const t of ['C', 'B', 'A']) expect(await check(l, t)).toMatchObject({ allowed: false, remaining: 0, ...local });
      fail(false);
      // the store decides again, from its own state: nothing was spent during the stall
      expect(await check(l, 'A')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: GUARD_MS_PER_TOKEN - 1000 });
      expect((await check(l, 'A')).degraded).toBeUndefined();
    } finally {
      await l.close();
    }
  });

  it('a stall spends the guard once for all tenants: the second tenant sees what the first left', async () => {
    const { l, fail, clock } = await setup();
    try {
      expect(await check(l, 'A')).toMatchObject({ allowed: true, remaining: 1 });
      expect(await check(l, 'B')).toMatchObject({ allowed: true, remaining: 0 });
      // the guard has 0 left in the store: B's answer, the latest, says so
      fail(true);
      clock.now += GUARD_MS_PER_TOKEN + 1; // one token back (+1 ms: see the first test)
      expect(await check(l, 'A')).toMatchObject({ allowed: true, remaining: 0, ...local });
      // A's check spent it locally: B, seeded after A in the same stall, does not start the guard again
      expect(await check(l, 'B')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: GUARD_MS_PER_TOKEN, ...local });
    } finally {
      await l.close();
    }
  });
});
