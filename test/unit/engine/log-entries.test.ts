/**
 * `maxLogEntries` (createLimiter option, `engine.maxLogEntries`): the bound on a sliding_log key's entries.
 * A policy whose worst case, min(limit, period in ms), exceeds it is refused naming the policy and the field,
 * at start and on reload; raised, a log of that many entries decides exactly (shards 0 and 2, and strict in
 * a frozen-clock Redis, whose script reads logs of up to 1,024 entries).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';
import { configError } from '../../helpers/limiter.js';
import { manualClock } from '../../helpers/clock.js';
import { connected, startFrozenRedis, type FrozenRedis } from '../../helpers/redis.js';

const opened: Limiter[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((l) => l.close()));
});

async function refusal(p: Promise<unknown>): Promise<SluiceError> {
  try {
    await p;
  } catch (e) {
    expect(isSluiceError(e) && e.code === 'CONFIG').toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a CONFIG error');
}

const LOG100 = { algorithm: 'sliding_log', limit: 100, period: '1m' } as const;

describe('maxLogEntries', () => {
  it('defaults to 64: a sliding_log of 100 a minute is refused naming limit', async () => {
    const e = await refusal(createLimiter({ policies: { p: LOG100 } }));
    expect([e.field, e.message]).toEqual(['limit',
      'policy "p": limit: sliding_log keeps up to min(limit, period in ms) entries per key, at most 64 (got min(100, 60000) = 100); use sliding_window or a smaller limit, or raise maxLogEntries (up to 1024)']);
  });

  it('names the binding field of a listed limit, and period when it binds', async () => {
    const e = await refusal(createLimiter({
      policies: { p: { limits: [{ algorithm: 'token_bucket', limit: 5, period: 1000 }, { algorithm: 'sliding_log', limit: 20, period: '1s' }] } },
      maxLogEntries: 16,
    }));
    expect(e.field).toBe('limits[1].limit');
    const q = await refusal(createLimiter({ policies: { q: { algorithm: 'sliding_log', limit: 5000, period: 17 } }, maxLogEntries: 16 }));
    expect([q.field, q.message.includes('got min(5000, 17) = 17')]).toEqual(['period', true]);
  });

  it('is 1 to 1024, and the loader refuses past 1024 whatever the setting', async () => {
    for (const bad of [0, 1025, 1.5]) {
      const e = await refusal(createLimiter({ policies: { p: { algorithm: 'sliding_log', limit: 1, period: 1000 } }, maxLogEntries: bad }));
      expect(e.field).toBe('maxLogEntries');
    }
    const e = configError({ p: { algorithm: 'sliding_log', limit: 2000, period: '1h' } });
    expect([e.field, e.message.includes('at most 1024 (got min(2000, 3600000) = 2000)')]).toEqual(['limit', true]);
  });

  it('a reload past the bound is refused and the set in force stays', async () => {
    const l = await createLimiter({ policies: { p: { algorithm: 'sliding_log', limit: 10, period: '1m' } }, maxLogEntries: 32 });
    opened.push(l);
    const e = await refusal(l.reload({ p: { algorithm: 'sliding_log', limit: 40, period: '1m' } }));
    expect(e.field).toBe('limit');
    expect(l.policies.get('p')!.limits[0].limit).toBe(10);
  });

  for (const shards of [0, 2]) {
    it(`raised to 100, a log of 100 entries decides exactly (shards ${shards})`, async () => {
      const clock = manualClock();
      const l = await createLimiter({ policies: { p: LOG100 }, maxLogEntries: 100, shards, clock: clock.now, maxKeys: 1024 });
      opened.push(l);
      const t0 = clock.now();
      for (let i = 0; i < 100; i++) {
        clock.set(t0 + i * 10);
        expect((await l.check({ policy: 'p', key: 'k', cost: 1 })).remaining).toBe(99 - i);
      }
      // full: the oldest entry (t0) leaves at t0 + 60 s
      clock.set(t0 + 1000);
      expect(await l.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: false, retryAfterMs: 59_000 });
      expect(await l.check({ policy: 'p', key: 'k', cost: 3 })).toMatchObject({ allowed: false, retryAfterMs: 59_020 });
      clock.set(t0 + 60_000);
      expect(await l.check({ policy: 'p', key: 'k', cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
    });
  }
});

describe('maxLogEntries, strict', () => {
  let redis: FrozenRedis;
  beforeAll(async () => { redis = await startFrozenRedis(); });
  afterAll(async () => { await redis?.stop(); });

  it('lua/sliding_log.lua reads and writes a 100-entry log', async () => {
    const clock = manualClock();
    const l = await createLimiter({
      policies: { p: { ...LOG100, consistency: 'strict' } }, maxLogEntries: 100, clock: clock.now, maxKeys: 1024,
      redis: { url: redis.url, prefix: `logent${process.pid}:`, clock: 'limiter', timeoutMs: 5000 },
    });
    opened.push(l);
    await connected(l);
    const t0 = clock.now();
    for (let i = 0; i < 100; i++) {
      clock.set(t0 + i * 10);
      expect((await l.check({ policy: 'p', key: 'k', cost: 1 })).remaining).toBe(99 - i);
    }
    clock.set(t0 + 1000);
    const d = await l.check({ policy: 'p', key: 'k', cost: 1 });
    expect([d.allowed, d.retryAfterMs, d.degraded]).toEqual([false, 59_000, undefined]);
  });
});
