/**
 * ADVERSARIAL (expected to FAIL on 3b83af1): misbehaving clocks.
 * - A clock that throws is reported as SHARD_FAILED (503, "retry in 1 s"), not CLOCK: front.ts flush() maps
 *   every non-SluiceError to SHARD_FAILED, and the clock's exception is not one.
 * - A check issued from inside the clock callback never settles: flush() captured n before calling the clock,
 *   the re-entrant check is appended to the queues, and the `finally` truncates them (its resolve is dropped).
 */
import { describe, expect, it } from 'vitest';
import { createLimiter, type Decision } from '../../../src/index.js';

const POLICIES = { p: { algorithm: 'token_bucket' as const, limit: 10, period: 1000 } };

function within<T>(p: Promise<T>, ms: number): Promise<T | 'PENDING'> {
  return Promise.race([p, new Promise<'PENDING'>((r) => setTimeout(() => r('PENDING'), ms))]);
}

describe.each([0, 2])('clock faults, shards %i', (shards) => {
  it('a clock that throws rejects with CLOCK', async () => {
    const limiter = await createLimiter({ policies: POLICIES, shards, maxKeys: 64, clock: () => { throw new Error('ntp down'); } });
    try {
      const e = await limiter.check({ policy: 'p', key: 'a', cost: 1 }).catch((err: { code: string; status: number }) => err);
      // actual on 3b83af1: { code: 'SHARD_FAILED', status: 503 }
      expect({ code: (e as { code: string }).code, status: (e as { status: number }).status }).toStrictEqual({ code: 'CLOCK', status: 500 });
    } finally {
      await limiter.close();
    }
  });

  it('a check issued while the clock is being read settles', async () => {
    let inner: Promise<Decision> | undefined;
    let reentered = false;
    const holder: { l?: Awaited<ReturnType<typeof createLimiter>> } = {};
    const clock = (): number => {
      if (!reentered && holder.l) { reentered = true; inner = holder.l.check({ policy: 'p', key: 'inner', cost: 1 }); }
      return 1_700_000_000_000;
    };
    holder.l = await createLimiter({ policies: POLICIES, shards, maxKeys: 64, clock });
    try {
      await holder.l.check({ policy: 'p', key: 'outer', cost: 1 });
      expect(inner).toBeDefined();
      const r = await within(inner!.then((d) => d.allowed, (e: { code: string }) => e.code), 2000);
      // actual on 3b83af1: 'PENDING' (never settles)
      expect(r).not.toBe('PENDING');
    } finally {
      await holder.l.close();
    }
  });
});
