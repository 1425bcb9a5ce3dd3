/**
 * limiter.inspect and limiter.reset on a controlled clock, in-thread and with two shards: exact tokens, counts,
 * last-update times, remaining and reset times per limit, keys found as checks find them (descriptors, guards),
 * and a reset key starting fresh.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, isSluiceError, type Limiter, type PolicySpec } from '../../../src/index.js';
import { EPOCH_MINUTE, ManualClock } from '../../helpers/clock.js';
import { spend } from '../../helpers/limiter.js';

const T0 = EPOCH_MINUTE;
const FREE: PolicySpec = { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 100 };

let limiter: Limiter | undefined;
afterEach(async () => {
  await limiter?.close();
  limiter = undefined;
});

async function start(policies: Record<string, PolicySpec>, shards: number, clock = new ManualClock()): Promise<[Limiter, ManualClock]> {
  limiter = await createLimiter({ policies, shards, clock: clock.now, maxKeys: 4096 });
  return [limiter, clock];
}

async function rejection(p: Promise<unknown>): Promise<{ code: string; field: string | undefined }> {
  try {
    await p;
  } catch (e) {
    if (isSluiceError(e)) return { code: e.code, field: e.field };
    throw e;
  }
  throw new Error('expected a rejection');
}

describe.each([0, 2])('limiter.inspect / reset with %i shards', (shards) => {
  it('token bucket: tokens, last update, remaining and reset, exact as time passes', async () => {
    const [l, clock] = await start({ free: FREE }, shards);
    const version = l.policies.get('free')!.version;
    expect(await l.inspect({ policy: 'free', key: 'acme' })).toEqual({
      policy: 'free', key: 'acme', version, source: 'local',
      limits: [{
        name: 'free', algorithm: 'token_bucket', limit: 100, burst: 100, periodMs: 60_000,
        held: false, lastUpdateMs: null, tokens: 100, remaining: 100, resetAfterMs: 0,
      }],
    });
    expect(await spend(l, 'free', 'acme', 30)).toBe(30);
    expect((await l.inspect({ policy: 'free', key: 'acme' })).limits).toEqual([{
      name: 'free', algorithm: 'token_bucket', limit: 100, burst: 100, periodMs: 60_000,
      held: true, lastUpdateMs: T0, tokens: 70, remaining: 70, resetAfterMs: 30 * 600,
    }]);
    // 1,500 ms refill 2.5 tokens: 72.5 held, 72 whole; back to full in 27.5 · 600 ms
    clock.advance(1500);
    const s = (await l.inspect({ policy: 'free', key: 'acme' })).limits[0];
    expect(s).toMatchObject({ held: true, lastUpdateMs: T0, tokens: 72, remaining: 72, resetAfterMs: 16_500 });
    // inspect changed nothing: a check sees the same numbers, less its cost
    expect(await l.check({ policy: 'free', key: 'acme', cost: 2 })).toMatchObject({ allowed: true, remaining: 70, resetAfterMs: 17_700 }); // 70.5 left
    expect((await l.inspect({ policy: 'free', key: 'acme' })).limits[0]).toMatchObject({ lastUpdateMs: T0 + 1500, tokens: 70 });
  });

  it('gcra reports the same numbers as the token bucket', async () => {
    const [l, clock] = await start({ g: { ...FREE, algorithm: 'gcra' } }, shards);
    expect(await spend(l, 'g', 'k', 30)).toBe(30);
    clock.advance(1500);
    expect((await l.inspect({ policy: 'g', key: 'k' })).limits[0]).toMatchObject({
      algorithm: 'gcra', held: true, lastUpdateMs: T0, tokens: 72, remaining: 72, resetAfterMs: 16_500,
    });
  });

  it('fixed window: the count of the current window, 0 once it ended', async () => {
    const [l, clock] = await start({ w: { algorithm: 'fixed_window', limit: 10, period: '1m' } }, shards);
    clock.advance(1000);
    expect(await spend(l, 'w', 'k', 4)).toBe(4);
    const s = (await l.inspect({ policy: 'w', key: 'k' })).limits[0];
    expect(s).toEqual({
      name: 'w', algorithm: 'fixed_window', limit: 10, burst: 10, periodMs: 60_000,
      held: true, lastUpdateMs: T0 + 1000, count: 4, remaining: 6, resetAfterMs: 59_000,
    });
    clock.advance(59_000);
    expect((await l.inspect({ policy: 'w', key: 'k' })).limits[0]).toMatchObject({
      held: true, lastUpdateMs: T0 + 1000, count: 0, remaining: 10, resetAfterMs: 60_000,
    });
  });

  it('sliding window: current and previous counts, the weighted remaining', async () => {
    const [l, clock] = await start({ s: { algorithm: 'sliding_window', limit: 10, period: '1m' } }, shards);
    expect(await spend(l, 's', 'k', 4)).toBe(4);
    clock.advance(75_000); // next window, 15 s in: the previous 4 weigh 4 · 45/60 = 3
    expect((await l.inspect({ policy: 's', key: 'k' })).limits[0]).toMatchObject({
      held: true, lastUpdateMs: T0, count: 0, previousCount: 4, remaining: 7, resetAfterMs: 45_000,
    });
    expect(await spend(l, 's', 'k', 2)).toBe(2);
    expect((await l.inspect({ policy: 's', key: 'k' })).limits[0]).toEqual({
      name: 's', algorithm: 'sliding_window', limit: 10, burst: 10, periodMs: 60_000,
      held: true, lastUpdateMs: T0 + 75_000, count: 2, previousCount: 4, remaining: 5, resetAfterMs: 105_000,
    });
    clock.advance(60_000); // two windows after the first: only the 2 are left, weighing 2 · 45/60 = 1.5
    expect((await l.inspect({ policy: 's', key: 'k' })).limits[0]).toMatchObject({
      count: 0, previousCount: 2, remaining: 8, resetAfterMs: 45_000,
    });
  });

  it('a policy of several limits reports each, by name', async () => {
    const [l] = await start({
      api: { limits: [
        { algorithm: 'token_bucket', limit: 10, period: '1s', name: 'api-burst' },
        { algorithm: 'fixed_window', limit: 1000, period: '1h' },
      ] },
    }, shards);
    expect(await spend(l, 'api', 'k', 3)).toBe(3);
    const st = await l.inspect({ policy: 'api', key: 'k' });
    expect(st.limits.map((s) => [s.name, s.tokens ?? s.count, s.remaining, s.resetAfterMs])).toEqual([
      ['api-burst', 7, 7, 300],
      ['api#1', 3, 997, 2_760_000], // T0 is 14 minutes into its hour
    ]);
  });

  it('finds descriptor keys by descriptors or by the joined key, and guarded keys on the guard\'s shard', async () => {
    const [l] = await start({
      free: { ...FREE, descriptors: ['tenant', 'action'], guard: 'global' },
      global: { algorithm: 'token_bucket', limit: 1000, period: '1m', burst: 500 },
    }, shards);
    for (let i = 0; i < 3; i++) {
      expect((await l.check({ policy: 'free', descriptors: { tenant: 'a:b', action: 'read' }, cost: 1 })).allowed).toBe(true);
    }
    const byDescriptors = await l.inspect({ policy: 'free', descriptors: { tenant: 'a:b', action: 'read' } });
    expect(byDescriptors.key).toBe('a%3Ab:read');
    expect(byDescriptors.limits.map((s) => s.tokens)).toEqual([97]); // own limits only, not the guard's
    expect(await l.inspect({ policy: 'free', key: 'a%3Ab:read' })).toEqual(byDescriptors);
    expect((await l.inspect({ policy: 'global', key: '*' })).limits[0]).toMatchObject({ held: true, tokens: 497 });
    // resetting the tenant leaves the guard as it is
    expect(await l.reset({ policy: 'free', descriptors: { tenant: 'a:b', action: 'read' } })).toEqual({ removed: 1 });
    expect((await l.inspect({ policy: 'free', key: 'a%3Ab:read' })).limits[0]).toMatchObject({ held: false, tokens: 100 });
    expect((await l.inspect({ policy: 'global', key: '*' })).limits[0]).toMatchObject({ held: true, tokens: 497 });
  });

  it('reset forgets the key: the next check sees a full bucket; other keys keep theirs', async () => {
    const [l] = await start({ free: FREE }, shards);
    expect(await spend(l, 'free', 'acme', 100)).toBe(100);
    expect(await spend(l, 'free', 'other', 5)).toBe(5);
    expect((await l.check({ policy: 'free', key: 'acme', cost: 1 })).allowed).toBe(false);
    expect(await l.reset({ policy: 'free', key: 'acme' })).toEqual({ removed: 1 });
    expect((await l.inspect({ policy: 'free', key: 'acme' })).limits[0]).toMatchObject({ held: false, lastUpdateMs: null, tokens: 100 });
    expect(await l.check({ policy: 'free', key: 'acme', cost: 1 })).toEqual({
      allowed: true, limit: 100, remaining: 99, resetAfterMs: 600, retryAfterMs: 0, policy: 'free',
    });
    expect(await l.reset({ policy: 'free', key: 'never-seen' })).toEqual({ removed: 0 });
    expect((await l.inspect({ policy: 'free', key: 'other' })).limits[0]).toMatchObject({ tokens: 95 });
  });

  it('after a reload that changes the numbers, old state reads as not held (fresh)', async () => {
    const [l] = await start({ free: FREE }, shards);
    expect(await spend(l, 'free', 'acme', 40)).toBe(40);
    await l.reload({ free: { ...FREE, limit: 200, burst: 50 } });
    expect((await l.inspect({ policy: 'free', key: 'acme' })).limits[0]).toMatchObject({
      limit: 200, burst: 50, held: false, lastUpdateMs: null, tokens: 50, remaining: 50, resetAfterMs: 0,
    });
  });

  it('refuses bad requests naming the field', async () => {
    const [l] = await start({ free: FREE, d: { ...FREE, descriptors: ['tenant'] } }, shards);
    expect(await rejection(l.inspect({ policy: 'nope', key: 'k' }))).toEqual({ code: 'UNKNOWN_POLICY', field: 'policy' });
    expect(await rejection(l.reset({ policy: 'nope', key: 'k' }))).toEqual({ code: 'UNKNOWN_POLICY', field: 'policy' });
    expect(await rejection(l.inspect({ policy: 'free' }))).toEqual({ code: 'INVALID_ARGUMENT', field: 'key' });
    expect(await rejection(l.inspect({ policy: 'free', key: '' }))).toEqual({ code: 'INVALID_ARGUMENT', field: 'key' });
    expect(await rejection(l.inspect({ policy: 'd', descriptors: { region: 'x' } }))).toEqual({ code: 'INVALID_ARGUMENT', field: 'descriptors.region' });
    expect(await rejection(l.inspect({ policy: 42 as unknown as string, key: 'k' }))).toEqual({ code: 'INVALID_ARGUMENT', field: 'policy' });
    await l.close();
    expect(await rejection(l.inspect({ policy: 'free', key: 'k' }))).toEqual({ code: 'CLOSED', field: undefined });
  });

  it('checks queued in the same turn are decided before the inspect reads', async () => {
    const [l] = await start({ free: FREE }, shards);
    const checks = [l.check({ policy: 'free', key: 'acme', cost: 5 }), l.check({ policy: 'free', key: 'acme', cost: 5 })];
    const state = l.inspect({ policy: 'free', key: 'acme' });
    await Promise.all(checks);
    expect((await state).limits[0].tokens).toBe(90);
  });
});
