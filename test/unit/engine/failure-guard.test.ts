/**
 * A guarded check's store failure rule (src/engine/runtime.ts PolicyRuntime.onStoreError): its policy's
 * `onStoreError`, or its guard's when that is stricter (closed, then local, then open). On a MemoryStore whose
 * decisions fail on demand, on a controlled clock.
 */
import { describe, expect, it } from 'vitest';
import { flakyLimiter } from '../../helpers/flaky-store.js';

const T0 = Date.parse('2026-03-15T12:00:00Z');
const bucket = { algorithm: 'token_bucket', limit: 10, period: '1m', consistency: 'strict' } as const;

describe('a guarded check when the store fails', () => {
  it('takes the stricter of its policy\'s rule and its guard\'s', async () => {
    const { l, fail } = await flakyLimiter({
      gClosed: { ...bucket, onStoreError: 'closed' },
      gLocal: { ...bucket, onStoreError: 'local' },
      gOpen: { ...bucket, onStoreError: 'open' },
      openUnderClosed: { ...bucket, onStoreError: 'open', guard: 'gClosed' },
      openUnderLocal: { ...bucket, onStoreError: 'open', guard: 'gLocal' },
      closedUnderOpen: { ...bucket, onStoreError: 'closed', guard: 'gOpen' },
      localUnderOpen: { ...bucket, onStoreError: 'local', guard: 'gOpen' },
      openUnderOpen: { ...bucket, onStoreError: 'open', guard: 'gOpen' },
    }, T0);
    try {
      fail(true);
      const rule = async (policy: string) => (await l.check({ policy, key: 't', cost: 1 })).degradedBy;
      expect(await rule('openUnderClosed')).toBe('closed');
      expect(await rule('openUnderLocal')).toBe('local');
      expect(await rule('closedUnderOpen')).toBe('closed');
      expect(await rule('localUnderOpen')).toBe('local');
      expect(await rule('openUnderOpen')).toBe('open');
      // counted under the checked policy, by the rule it took
      const { degraded } = (await l.stats()) as unknown as { degraded: Record<string, Record<string, number>> };
      expect(degraded.openUnderClosed).toStrictEqual({ open: 0, closed: 1, local: 0 });
      expect(degraded.openUnderLocal).toStrictEqual({ open: 0, closed: 0, local: 1 });
    } finally {
      await l.close();
    }
  });
});
