/**
 * `onStoreError: local` starts a strict calendar-window key from the state last learned from the store
 * (src/engine/deciders/strict.ts seed, src/engine/strict/state-rebuild.ts rebuild), not from a fresh window: a
 * tenant that spent its month stays denied while the store is down, and one that spent part of it gets only
 * the rest. The count is its window's: past that window's end the local kernel starts the next one. On a
 * MemoryStore whose decisions fail on demand (the over-limit cache off, so denials reach the store), on a
 * controlled clock.
 */
import { describe, expect, it } from 'vitest';
import type { Decision, Limiter } from '../../../src/index.js';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const MID_MARCH = Date.parse('2026-03-15T12:00:00Z');
const APRIL = Date.parse('2026-04-01T00:00:00Z');

function setup(): ReturnType<typeof flakyLimiter> {
  return flakyLimiter({ m: { algorithm: 'fixed_window', limit: 3, period: '1mo', consistency: 'strict', onStoreError: 'local' } }, MID_MARCH);
}

const check = (l: Limiter, key: string): Promise<Decision> => l.check({ policy: 'm', key, cost: 1 });
const local = { degraded: true, degradedBy: 'local' };

describe('a strict calendar window under onStoreError: local', () => {
  it('a key the store denied stays denied locally, until its window ends', async () => {
    const { l, fail, clock } = await setup();
    try {
      for (let i = 0; i < 3; i++) expect((await check(l, 'k')).allowed).toBe(true);
      expect(await check(l, 'k')).toMatchObject({ allowed: false, remaining: 0, resetAfterMs: APRIL - MID_MARCH });
      fail(true);
      clock.now += 1000;
      expect(await check(l, 'k')).toMatchObject({ allowed: false, remaining: 0, resetAfterMs: APRIL - clock.now, ...local });
      clock.now = APRIL + 5;
      expect(await check(l, 'k')).toMatchObject({ allowed: true, remaining: 2, ...local });
    } finally {
      await l.close();
    }
  });

  it('a key the store admitted twice (state rebuilt from the answer) gets the one left locally', async () => {
    const { l, fail, clock } = await setup();
    try {
      for (let i = 0; i < 2; i++) expect((await check(l, 'k')).allowed).toBe(true);
      fail(true);
      clock.now += 1000;
      expect(await check(l, 'k')).toMatchObject({ allowed: true, remaining: 0, ...local });
      expect(await check(l, 'k')).toMatchObject({ allowed: false, remaining: 0, ...local });
      // a key the store never answered for starts fresh
      expect(await check(l, 'other')).toMatchObject({ allowed: true, remaining: 2, ...local });
    } finally {
      await l.close();
    }
  });
});
