/**
 * algorithm: concurrency in the library: acquire and release, exact numbers on a controlled clock (a lease
 * acquired at t is held over [t, t + leaseTtl)), the errors that name their field, the policy rules refused
 * at load, reloads, the bounded lease table.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { LeaseTable } from '../../../src/engine/lease-table.js';
import { hex } from '../../../src/engine/leases.js';
import { manualClock } from '../../helpers/clock.js';
import { configError } from '../../helpers/limiter.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';

const opened: Limiter[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((l) => l.close()));
});

async function limiter(policies: Record<string, unknown>, o: { shards?: number; maxKeys?: number } = {}) {
  const clock = manualClock();
  const l = await createLimiter({ policies: policies as never, clock: clock.now, ...o });
  opened.push(l);
  return { l, clock };
}

async function failure(p: Promise<unknown>): Promise<SluiceError> {
  try {
    await p;
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a SluiceError');
}

const JOBS = { jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '30s' } };

describe('concurrency: acquire and release', () => {
  for (const shards of [0, 2]) {
    it(`holds at most limit leases per key; release frees a place (shards ${shards})`, async () => {
      const { l, clock } = await limiter(JOBS, { shards });
      const a = await l.acquire({ policy: 'jobs', key: 'acme' });
      expect(a).toEqual({ allowed: true, leaseId: expect.stringMatching(/^[0-9a-f]{12}$/), limit: 2, remaining: 1, retryAfterMs: 0, leaseTtlMs: 30_000, policy: 'jobs' });
      clock.advance(1000);
      const b = await l.acquire({ policy: 'jobs', key: 'acme' });
      expect([b.allowed, b.remaining]).toEqual([true, 0]);
      expect(b.leaseId).not.toBe(a.leaseId);
      clock.advance(4000);
      // full: the earliest lease (a, acquired 5 s ago) expires in 25 s
      expect(await l.acquire({ policy: 'jobs', key: 'acme' })).toEqual({
        allowed: false, leaseId: null, limit: 2, remaining: 0, retryAfterMs: 25_000, leaseTtlMs: 30_000, policy: 'jobs',
      });
      // another key is its own
      expect((await l.acquire({ policy: 'jobs', key: 'other' })).remaining).toBe(1);
      expect(await l.release({ policy: 'jobs', key: 'acme', leaseId: b.leaseId! })).toEqual({ released: true, remaining: 1, policy: 'jobs' });
      const c = await l.acquire({ policy: 'jobs', key: 'acme' });
      expect([c.allowed, c.remaining]).toEqual([true, 0]);
    });
  }

  it('a lease expires exactly leaseTtl after it was acquired (a crashed holder)', async () => {
    const { l, clock } = await limiter(JOBS);
    const a = await l.acquire({ policy: 'jobs', key: 'k' });
    clock.advance(10_000);
    await l.acquire({ policy: 'jobs', key: 'k' });
    clock.advance(19_999); // a held 29,999 ms: 1 ms left
    expect(await l.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: false, retryAfterMs: 1 });
    clock.advance(1); // a expired: its place is free, and a release of it is an error
    expect(await l.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: true, remaining: 0 });
    const e = await failure(l.release({ policy: 'jobs', key: 'k', leaseId: a.leaseId! }));
    expect([e.code, e.status, e.field]).toEqual(['UNKNOWN_LEASE', 409, 'leaseId']);
    expect(e.message).toBe(`leaseId: "${a.leaseId}" is not held (unknown, already released, or expired): nothing was released`);
    // the second lease (acquired at +10 s) expires at +40 s: 10 s from now
    expect(await l.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: false, retryAfterMs: 10_000 });
  });

  it('a second release of one lease, and a release of an unknown one, are errors that change nothing', async () => {
    const { l } = await limiter(JOBS);
    const a = await l.acquire({ policy: 'jobs', key: 'k' });
    const b = await l.acquire({ policy: 'jobs', key: 'k' });
    await l.release({ policy: 'jobs', key: 'k', leaseId: a.leaseId! });
    expect((await failure(l.release({ policy: 'jobs', key: 'k', leaseId: a.leaseId! }))).code).toBe('UNKNOWN_LEASE');
    expect((await failure(l.release({ policy: 'jobs', key: 'k', leaseId: '000000000000' === b.leaseId ? '000000000001' : '000000000000' }))).code).toBe('UNKNOWN_LEASE');
    // another key's lease is not this key's
    expect((await failure(l.release({ policy: 'jobs', key: 'other', leaseId: b.leaseId! }))).code).toBe('UNKNOWN_LEASE');
    // b is still held: one place left
    expect((await l.acquire({ policy: 'jobs', key: 'k' })).remaining).toBe(0);
    expect((await l.acquire({ policy: 'jobs', key: 'k' })).allowed).toBe(false);
  });

  it('limit 0 never admits', async () => {
    const { l } = await limiter({ none: { algorithm: 'concurrency', limit: 0, leaseTtl: 1000 } });
    expect(await l.acquire({ policy: 'none', key: 'k' })).toEqual({
      allowed: false, leaseId: null, limit: 0, remaining: 0, retryAfterMs: null, leaseTtlMs: 1000, policy: 'none', reason: 'limit is 0',
    });
  });

  it('descriptors form the key as in a check', async () => {
    const { l } = await limiter({ exports: { algorithm: 'concurrency', limit: 1, leaseTtl: '1m', descriptors: ['tenant', 'kind'] } });
    const a = await l.acquire({ policy: 'exports', descriptors: { tenant: 'acme', kind: 'csv' } });
    expect(a.allowed).toBe(true);
    expect((await l.acquire({ policy: 'exports', key: 'acme:csv' })).allowed).toBe(false);
    await l.release({ policy: 'exports', key: 'acme:csv', leaseId: a.leaseId! });
    expect((await l.acquire({ policy: 'exports', descriptors: { tenant: 'acme', kind: 'csv' } })).allowed).toBe(true);
  });

  it('bad input is refused naming the field, and changes nothing', async () => {
    const { l } = await limiter({ ...JOBS, free: { algorithm: 'token_bucket', limit: 10, period: '1s' } });
    const cases: Array<[Promise<unknown>, string, string]> = [
      [l.acquire({ policy: 'nope', key: 'k' }), 'UNKNOWN_POLICY', 'policy'],
      [l.acquire({ policy: 7 as never, key: 'k' }), 'INVALID_ARGUMENT', 'policy'],
      [l.acquire({ policy: 'free', key: 'k' }), 'INVALID_ARGUMENT', 'policy'],
      [l.acquire({ policy: 'jobs', key: '' }), 'INVALID_ARGUMENT', 'key'],
      [l.acquire({ policy: 'jobs' }), 'INVALID_ARGUMENT', 'key'],
      [l.release({ policy: 'jobs', key: 'k' } as never), 'INVALID_ARGUMENT', 'leaseId'],
      [l.release({ policy: 'jobs', key: 'k', leaseId: 'ABCDEF000000' }), 'INVALID_ARGUMENT', 'leaseId'],
      [l.release({ policy: 'jobs', key: 'k', leaseId: 12 as never }), 'INVALID_ARGUMENT', 'leaseId'],
    ];
    for (const [p, code, field] of cases) {
      const e = await failure(p);
      expect([e.code, e.field]).toEqual([code, field]);
    }
    expect((await failure(l.acquire({ policy: 'free', key: 'k' }))).message)
      .toBe('policy: "free" is a token_bucket policy: acquire and release take an algorithm: concurrency policy (check this one)');
    expect((await l.acquire({ policy: 'jobs', key: 'k' })).remaining).toBe(1);
  });

  it('a reload that changes the limit keeps the leases held; the new limit applies to the next acquire', async () => {
    const { l, clock } = await limiter({ jobs: { algorithm: 'concurrency', limit: 3, leaseTtl: '10s' } });
    for (let i = 0; i < 3; i++) {
      await l.acquire({ policy: 'jobs', key: 'k' });
      clock.advance(1000);
    }
    await l.reload({ jobs: { algorithm: 'concurrency', limit: 1, leaseTtl: '10s' } });
    // 3 held, limit 1: room once 3 have expired, the third at +12 s (acquired at +2 s), 9 s from now (+3 s)
    expect(await l.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 9000 });
    clock.advance(9000);
    expect(await l.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('the lease table is bounded by maxKeys: a new key past it frees expired keys, else OVERLOADED', async () => {
    const { l, clock } = await limiter({ jobs: { algorithm: 'concurrency', limit: 1, leaseTtl: 1000 } }, { maxKeys: 2 });
    await l.acquire({ policy: 'jobs', key: 'a' });
    await l.acquire({ policy: 'jobs', key: 'b' });
    const e = await failure(l.acquire({ policy: 'jobs', key: 'c' }));
    expect([e.code, e.message]).toEqual(['OVERLOADED', 'lease table full: 2 keys hold live leases (maxKeys)']);
    clock.advance(1000); // both expired: their keys are freed for c
    expect((await l.acquire({ policy: 'jobs', key: 'c' })).allowed).toBe(true);
    expect((await l.acquire({ policy: 'jobs', key: 'd' })).allowed).toBe(true);
  });

  it('after close, acquire and release reject with CLOSED', async () => {
    const { l } = await limiter(JOBS);
    await l.close();
    expect((await failure(l.acquire({ policy: 'jobs', key: 'k' }))).code).toBe('CLOSED');
    expect((await failure(l.release({ policy: 'jobs', key: 'k', leaseId: '000000000000' }))).code).toBe('CLOSED');
  });

  it('a check under a concurrency policy is refused naming the policy', async () => {
    const { l } = await limiter(JOBS);
    const e = await failure(l.check({ policy: 'jobs', key: 'k', cost: 1 }));
    expect([e.code, e.field, e.message]).toEqual(['INVALID_ARGUMENT', 'policy',
      'policy: "jobs" is a concurrency policy: acquire and release its leases (limiter.acquire, POST /v1/acquire); it is never checked']);
    expect((await failure(l.inspect({ policy: 'jobs', key: 'k' }))).field).toBe('policy');
  });
});

describe('lease ids', () => {
  it('are 12 lowercase hex digits of the 48-bit id', () => {
    expect([0, 1, 255, 2 ** 32, 0x123456789abc, 2 ** 48 - 1].map(hex))
      .toEqual(['000000000000', '000000000001', '0000000000ff', '000100000000', '123456789abc', 'ffffffffffff']);
  });
});

describe('LeaseTable', () => {
  it('orders leases by expiry, equal expiries in acquisition order; frees the oldest keys first', () => {
    const t = new LeaseTable(10);
    expect(t.acquire('p', 'k', 3, 100, 1000, 1)).toEqual({ allowed: true, remaining: 2, retryAfterMs: 0 });
    expect(t.acquire('p', 'k', 3, 100, 990, 2)).toEqual({ allowed: true, remaining: 1, retryAfterMs: 0 }); // clock stepped back
    expect(t.acquire('p', 'k', 3, 100, 1000, 3)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0 });
    expect(t.acquire('p', 'k', 3, 100, 1050, 4)).toEqual({ allowed: false, remaining: 0, retryAfterMs: 40 }); // lease 2 at 1090
    expect(t.acquire('q', 'k', 1, 100, 1050, 4)).toEqual({ allowed: true, remaining: 0, retryAfterMs: 0 }); // another policy's key
    expect(t.size).toBe(2);
    expect(t.held('p', 'k', 1090)).toBe(2);
    expect(t.release('p', 'k', 2, 1090)).toBe(-1); // expired
    expect(t.release('p', 'k', 4, 1090)).toBe(-1); // q's
    expect(t.release('p', 'k', 3, 1090)).toBe(1);
    expect(t.held('p', 'k', 1099)).toBe(1);
    expect(t.held('p', 'k', 1100)).toBe(0);
    expect(t.size).toBe(1);
  });
});

describe('concurrency policies at load', () => {
  it.each([
    [{ algorithm: 'concurrency', limit: 2 }, 'leaseTtl', 'policy "p": leaseTtl: is required for algorithm concurrency: a positive integer of ms or a duration string such as "1m" (how long a lease lasts unless released)'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1s', period: '1s' }, 'period', 'policy "p": period: does not apply to algorithm concurrency (it takes limit and leaseTtl); omit it'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1s', burst: 3 }, 'burst', 'policy "p": burst: does not apply to algorithm concurrency (it takes limit and leaseTtl); omit it'],
    [{ algorithm: 'concurrency', limit: 1025, leaseTtl: '1s' }, 'limit', 'policy "p": limit: concurrency holds at most 1024 leases per key (got 1025)'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '30d' }, 'leaseTtl', 'policy "p": leaseTtl: must be at most 2147483647 ms (got 2592000000 ms)'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: 'soon' }, 'leaseTtl', undefined],
    [{ algorithm: 'token_bucket', limit: 2, period: '1s', leaseTtl: '1s' }, 'leaseTtl', 'policy "p": leaseTtl: applies to algorithm concurrency only (got algorithm token_bucket); omit it'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1s', consistency: 'sync' }, 'consistency', 'policy "p": consistency: concurrency cannot be exact in consistency sync (a lease held on one instance would be unknown to the others until a merge): use local or strict'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1s', consistency: 'strict', onStoreError: 'local' }, 'onStoreError', 'policy "p": onStoreError: concurrency takes open or closed (the default): local would hand out leases Redis does not know of'],
    [{ algorithm: 'concurrency', limit: 2, leaseTtl: '1s', shadow: true }, 'shadow', 'policy "p": shadow: does not apply to algorithm concurrency (leases are acquired and released, never checked)'],
    [{ limits: [{ algorithm: 'token_bucket', limit: 2, period: '1s' }, { algorithm: 'concurrency', limit: 2, leaseTtl: '1s' }] }, 'limits[1].algorithm',
      'policy "p": limits[1].algorithm: concurrency is a policy of its own (acquire and release leases), not one of a check\'s limits: give it inline'],
  ])('%j is refused naming %s', (spec, field, message) => {
    const e = configError({ p: spec });
    expect(e.field).toBe(field);
    if (message !== undefined) expect(e.message).toBe(message);
  });

  it('a guard naming a concurrency policy is refused', () => {
    expect(configError({ jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '1s' }, p: { algorithm: 'token_bucket', limit: 1, period: 1, guard: 'jobs' } }).message)
      .toBe('policy "p": guard: policy "jobs" is a concurrency policy (leases, acquired and released): a guard is checked');
    expect(configError({ jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '1s', guard: 'g' }, g: { algorithm: 'token_bucket', limit: 1, period: 1 } }).field).toBe('guard');
  });

  it('onStoreError defaults to closed', async () => {
    const { compilePolicies } = await import('../../../src/config/policies.js');
    const p = compilePolicies({ jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '1s' } }).get('jobs')!;
    expect([p.onStoreError, p.limits[0].periodMs, p.limits[0].burst]).toEqual(['closed', 1000, 2]);
  });
});
