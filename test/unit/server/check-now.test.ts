import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { engineOf } from '../../../src/engine/handle.js';
import type { CheckRequest, Decision } from '../../../src/types/decision.js';
import type { Limiter } from '../../../src/types.js';

/** The synchronous path of the HTTP front (Front.checkNow through the limiter's engine handle; with shards, their channels). */
type CheckNow = (req: CheckRequest) => Decision | undefined;
const nowOf = (l: Limiter): CheckNow | null => engineOf(l)!.checkNow;

const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

describe('checkNow (synchronous decisions for the HTTP front)', () => {
  it('decides at once, after the checks this turn already queued, in order', async () => {
    const l = await createLimiter({ policies: { p: { algorithm: 'fixed_window', limit: 2, period: 60_000 } }, clock: () => 1_000 });
    open.push(l);
    const first = l.check({ policy: 'p', key: 'k', cost: 1 });
    const second = nowOf(l)!({ policy: 'p', key: 'k', cost: 1 });
    const third = nowOf(l)!({ policy: 'p', key: 'k', cost: 1 });
    expect(second).toMatchObject({ allowed: true, remaining: 0 });
    expect(third).toMatchObject({ allowed: false, remaining: 0 });
    expect(await first).toMatchObject({ allowed: true, remaining: 1 });
    expect(await l.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('throws what check() rejects with, and changes nothing', async () => {
    const l = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 5, period: 1_000 } }, clock: () => 0 });
    open.push(l);
    const now = nowOf(l)!;
    for (const req of [
      { policy: 'nope', key: 'k', cost: 1 },
      { policy: 'p', key: '', cost: 1 },
      { policy: 'p', key: 'k', cost: -1 },
      { policy: 'p', cost: 1 },
    ] as CheckRequest[]) {
      let thrown: unknown;
      try {
        now(req);
      } catch (e) {
        thrown = e;
      }
      const rejected = await l.check(req).then(() => undefined, (e: unknown) => e);
      expect(thrown, JSON.stringify(req)).toBeInstanceOf(Error);
      expect({ ...(thrown as object), message: (thrown as Error).message })
        .toStrictEqual({ ...(rejected as object), message: (rejected as Error).message });
    }
    expect(now({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ allowed: true, remaining: 5 });
  });

  it('with shards, decides on the owning shard at once, in order with the checks queued this turn', async () => {
    const l = await createLimiter({ policies: { p: { algorithm: 'fixed_window', limit: 3, period: 60_000 } }, shards: 2, clock: () => 1_000 });
    open.push(l);
    const first = l.check({ policy: 'p', key: 'k', cost: 1 });
    expect(nowOf(l)!({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 1 });
    expect(nowOf(l)!({ policy: 'p', key: 'k', cost: 2 })).toMatchObject({ allowed: false, remaining: 1 });
    expect(await first).toMatchObject({ allowed: true, remaining: 2 });
    expect(nowOf(l)!({ policy: 'p', key: 'other', cost: 3 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await l.check({ policy: 'p', key: 'k', cost: 0 })).toMatchObject({ allowed: true, remaining: 1 });
    expect(() => nowOf(l)!({ policy: 'p', key: 'k', cost: -1 })).toThrow(/cost/);
  });

  it('throws CLOSED after close()', async () => {
    const l = await createLimiter({ policies: { p: { algorithm: 'token_bucket', limit: 5, period: 1_000 } } });
    await l.close();
    expect(() => nowOf(l)!({ policy: 'p', key: 'k', cost: 1 })).toThrow(/closed/);
  });
});
