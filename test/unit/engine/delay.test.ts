/**
 * onLimit: delay through the library on a controlled clock: the decision's delayMs (exact, FIFO per key),
 * the per-instance bound on checks waiting (maxDelayed), `check(..., {wait: true})` and its abort, the
 * policy refusals at load naming the field. free: token bucket 10 per second, burst 10 (a token = 100 ms).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { engineOf } from '../../../src/engine/handle.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';
import { manualClock } from '../../helpers/clock.js';

const bucket = { algorithm: 'token_bucket', limit: 10, period: '1s', burst: 10, onLimit: 'delay', maxDelayMs: 250 } as const;

let open: Limiter[] = [];
afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(open.map((l) => l.close()));
  open = [];
});

async function limiterWith(policies: Record<string, unknown>, extra: { maxDelayed?: number; shards?: number } = {}) {
  const clock = manualClock();
  const limiter = await createLimiter({ policies: policies as never, clock: clock.now, ...extra });
  open.push(limiter);
  return { limiter, clock };
}

function refusal(spec: Record<string, unknown>): SluiceError {
  try {
    compilePolicies({ p: spec });
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a CONFIG error');
}

describe.each([0, 2])('onLimit: delay, shards %i', (shards) => {
  it('admits with delayMs when the refill comes within maxDelayMs, in order; past it denies', async () => {
    const { limiter, clock } = await limiterWith({ free: bucket }, { shards });
    const check = (cost = 1) => limiter.check({ policy: 'free', key: 'a', cost });
    expect(await check(10)).toStrictEqual({ allowed: true, limit: 10, remaining: 0, resetAfterMs: 1000, retryAfterMs: 0, policy: 'free' });
    expect(await check()).toStrictEqual({ allowed: true, limit: 10, remaining: 0, resetAfterMs: 1100, retryAfterMs: 0, policy: 'free', delayMs: 100 });
    expect(await check()).toStrictEqual({ allowed: true, limit: 10, remaining: 0, resetAfterMs: 1200, retryAfterMs: 0, policy: 'free', delayMs: 200 });
    // a third would wait 300 > 250: denied, and the earliest retry that is admitted is 50 ms away
    expect(await check()).toStrictEqual({ allowed: false, limit: 10, remaining: 0, resetAfterMs: 1200, retryAfterMs: 50, policy: 'free' });
    clock.advance(50);
    expect(await check()).toMatchObject({ allowed: true, delayMs: 250, resetAfterMs: 1250 });
    // other keys are not behind this one's queue
    expect(await limiter.check({ policy: 'free', key: 'b', cost: 1 })).toMatchObject({ allowed: true, remaining: 9 });
    expect((await limiter.stats()).delayed).toStrictEqual({ waiting: 3, reserved: 0, max: 10_000, full: 0 });
    // places are held on the limiter's clock: due at +100, +200 and +300 from the start
    clock.advance(150); // t = 200
    expect((await limiter.stats()).delayed.waiting).toBe(1);
    clock.advance(100);
    expect((await limiter.stats()).delayed.waiting).toBe(0);
  });

  it('a batch of checks in one turn gets consecutive delays', async () => {
    const { limiter } = await limiterWith({ free: { ...bucket, maxDelayMs: 1000 } }, { shards });
    await limiter.check({ policy: 'free', key: 'k', cost: 10 });
    const ds = await Promise.all([1, 2, 3, 4].map(() => limiter.check({ policy: 'free', key: 'k', cost: 2 })));
    expect(ds.map((d) => d.delayMs)).toStrictEqual([200, 400, 600, 800]);
  });
});

describe('the bound on checks waiting (maxDelayed)', () => {
  it('past maxDelayed, a check short of tokens is denied as with onLimit: deny; a freed place is reused', async () => {
    const { limiter, clock } = await limiterWith({ free: { ...bucket, maxDelayMs: 10_000 } }, { maxDelayed: 2 });
    await limiter.check({ policy: 'free', key: 'a', cost: 10 });
    const a1 = await limiter.check({ policy: 'free', key: 'a', cost: 1 });
    const a2 = await limiter.check({ policy: 'free', key: 'b', cost: 1 }); // b is full: no delay, no place
    const a3 = await limiter.check({ policy: 'free', key: 'a', cost: 1 });
    expect([a1.delayMs, a2.delayMs, a3.delayMs]).toStrictEqual([100, undefined, 200]);
    // both places held: denied, and its retry is the plain wait (no delay was on offer)
    expect(await limiter.check({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ allowed: false, retryAfterMs: 300 });
    expect((await limiter.stats()).delayed).toStrictEqual({ waiting: 2, reserved: 0, max: 2, full: 1 });
    // a transport whose connection closed frees its place early (the tokens stay spent)
    const places = engineOf(limiter)!.delays;
    expect(places.release(a3)).toBe(true);
    expect(places.release(a3)).toBe(false);
    expect(await limiter.check({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ allowed: true, delayMs: 300 });
    clock.advance(100); // a1 is due
    expect(await limiter.check({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ allowed: true, delayMs: 300 });
  });

  it('maxDelayed: 0 turns every delay into a denial', async () => {
    const { limiter } = await limiterWith({ free: bucket }, { maxDelayed: 0 });
    await limiter.check({ policy: 'free', key: 'a', cost: 10 });
    expect(await limiter.check({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ allowed: false, retryAfterMs: 100 });
  });
});

describe('check(..., {wait: true})', () => {
  it('resolves once the delay has passed (timers), then frees the place', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { limiter } = await limiterWith({ free: bucket });
    await limiter.check({ policy: 'free', key: 'a', cost: 10 });
    let done = false;
    const p = limiter.check({ policy: 'free', key: 'a', cost: 1 }, { wait: true }).then((d) => {
      done = true;
      return d;
    });
    await vi.advanceTimersByTimeAsync(99);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await p).toMatchObject({ allowed: true, delayMs: 100 });
    expect((await limiter.stats()).delayed.waiting).toBe(0);
    // a check that proceeds at once resolves at once
    expect(await limiter.check({ policy: 'free', key: 'b', cost: 1 }, { wait: true })).toMatchObject({ allowed: true, remaining: 9 });
  });

  it('an abort frees the place and rejects with the reason; the tokens stay spent', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { limiter } = await limiterWith({ free: bucket });
    await limiter.check({ policy: 'free', key: 'a', cost: 10 });
    const ac = new AbortController();
    const p = limiter.check({ policy: 'free', key: 'a', cost: 1 }, { wait: true, signal: ac.signal });
    const settled = p.catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(10);
    expect((await limiter.stats()).delayed.waiting).toBe(1);
    ac.abort(new Error('client went away'));
    expect(await settled).toStrictEqual(new Error('client went away'));
    expect((await limiter.stats()).delayed.waiting).toBe(0);
    expect(await limiter.check({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ delayMs: 200 });
  });
});

describe('checkSync', () => {
  it('returns a delayed admission with delayMs and holds its place, as check() without wait', async () => {
    const { limiter, clock } = await limiterWith({ free: bucket }, { maxDelayed: 1 });
    expect(limiter.checkSync({ policy: 'free', key: 'a', cost: 10 })).toStrictEqual(
      { allowed: true, limit: 10, remaining: 0, resetAfterMs: 1000, retryAfterMs: 0, policy: 'free' });
    const d = limiter.checkSync({ policy: 'free', key: 'a', cost: 1 });
    expect(d).toStrictEqual({ allowed: true, limit: 10, remaining: 0, resetAfterMs: 1100, retryAfterMs: 0, policy: 'free', delayMs: 100 });
    expect((await limiter.stats()).delayed).toStrictEqual({ waiting: 1, reserved: 0, max: 1, full: 0 });
    // the one place is held: the next is denied as with onLimit: deny, its retry the plain wait
    expect(limiter.checkSync({ policy: 'free', key: 'a', cost: 1 })).toStrictEqual(
      { allowed: false, limit: 10, remaining: 0, resetAfterMs: 1100, retryAfterMs: 200, policy: 'free' });
    // the decision checkSync returned is the one a transport frees early
    const places = engineOf(limiter)!.delays;
    expect(places.release(d)).toBe(true);
    expect(limiter.checkSync({ policy: 'free', key: 'a', cost: 1 })).toMatchObject({ allowed: true, delayMs: 200 });
    clock.advance(200);
    expect((await limiter.stats()).delayed.waiting).toBe(0);
    // checks queued by check() are decided first, in order
    const queued = limiter.check({ policy: 'free', key: 'a', cost: 1 });
    expect(limiter.checkSync({ policy: 'free', key: 'b', cost: 1 })).toMatchObject({ allowed: true, remaining: 9 });
    expect(await queued).toMatchObject({ allowed: true, delayMs: 100 });
  });

  it('a bad request on a delay policy throws INVALID_ARGUMENT naming the field, and takes no place', async () => {
    const { limiter } = await limiterWith({ free: bucket });
    expect(() => limiter.checkSync({ policy: 'free', key: 'a', cost: -1 })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'cost' }));
    expect((await limiter.stats()).delayed).toStrictEqual({ waiting: 0, reserved: 0, max: 10_000, full: 0 });
  });
});

describe('GCRA, guards and several limits', () => {
  it('gcra gives the token bucket\'s numbers; a guard with a delay delays the guarded check', async () => {
    const { limiter } = await limiterWith({
      g: { algorithm: 'gcra', limit: 5, period: '1s', onLimit: 'delay', maxDelayMs: 1000 },
      t: { algorithm: 'gcra', limit: 100, period: '1s', guard: 'g' },
    });
    for (let i = 0; i < 5; i++) await limiter.check({ policy: 't', key: String(i), cost: 1 });
    expect(await limiter.check({ policy: 't', key: 'x', cost: 1 })).toStrictEqual({
      allowed: true, limit: 5, remaining: 0, resetAfterMs: 1200, retryAfterMs: 0, policy: 'g', delayMs: 200,
    });
  });

  it('two limits: the check waits for the slower one', async () => {
    const { limiter } = await limiterWith({
      p: { limits: [{ algorithm: 'token_bucket', limit: 10, period: '1s' }, { algorithm: 'token_bucket', limit: 2, period: '1s' }], onLimit: 'delay', maxDelayMs: 2000 },
    });
    await limiter.check({ policy: 'p', key: 'a', cost: 2 });
    expect(await limiter.check({ policy: 'p', key: 'a', cost: 1 })).toStrictEqual({
      allowed: true, limit: 2, remaining: 0, resetAfterMs: 1500, retryAfterMs: 0, policy: 'p#1', delayMs: 500,
    });
  });
});

describe('refused at load, naming the field', () => {
  it.each([
    [{ ...bucket, maxDelayMs: undefined }, 'maxDelayMs', 'is required with onLimit: delay'],
    [{ algorithm: 'token_bucket', limit: 1, period: 1000, maxDelayMs: 5 }, 'maxDelayMs', 'applies with onLimit: delay only'],
    [{ ...bucket, onLimit: 'queue' }, 'onLimit', 'must be one of deny, delay'],
    [{ ...bucket, maxDelayMs: 0 }, 'maxDelayMs', 'positive'],
    [{ ...bucket, maxDelayMs: 2 ** 29 }, 'maxDelayMs', 'at most 536870911'],
    [{ ...bucket, algorithm: 'fixed_window', burst: undefined }, 'onLimit', 'token_bucket and gcra limits only (got algorithm fixed_window)'],
    [{ limits: [{ algorithm: 'token_bucket', limit: 1, period: 1000 }, { algorithm: 'sliding_window', limit: 5, period: 1000 }], onLimit: 'delay', maxDelayMs: 5 }, 'onLimit', 'got algorithm sliding_window'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1m', onLimit: 'delay', maxDelayMs: 5 }, 'onLimit', 'got algorithm concurrency): a lease is held until released'],
    [{ ...bucket, consistency: 'sync' }, 'onLimit', 'consistency sync'],
    [{ ...bucket, consistency: 'lease' }, 'onLimit', 'delay cannot be exact in consistency lease'],
    [{ ...bucket, consistency: 'lease', scope: 'global' }, 'onLimit', 'delay cannot be exact in consistency lease'],
    [{ ...bucket, shadow: true }, 'onLimit', 'shadow policy never denies'],
    [{ ...bucket, limit: 2 ** 40, burst: 1, period: 1000, maxDelayMs: 2 ** 23 }, 'maxDelayMs', 'at most 2^62'],
    [{ ...bucket, consistency: 'strict', limit: 2 ** 30, burst: 1, period: 1, maxDelayMs: 2 ** 22 }, 'maxDelayMs', 'at most 2^51'],
  ])('%j: %s', (spec, field, words) => {
    const e = refusal(spec as Record<string, unknown>);
    expect(e.code).toBe('CONFIG');
    expect(e.message).toContain(`${field}: `);
    expect(e.message).toContain(words);
  });

  it('a duration string is taken as maxDelayMs; the compiled policy says so', () => {
    const p = compilePolicies({ p: { ...bucket, maxDelayMs: '2s' } }).get('p')!;
    expect([p.onLimit, p.maxDelayMs]).toStrictEqual(['delay', 2000]);
    expect('onLimit' in compilePolicies({ p: { algorithm: 'gcra', limit: 1, period: 1000, onLimit: 'deny' } }).get('p')!).toBe(false);
  });
});
