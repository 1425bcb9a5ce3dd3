/**
 * algorithm: concurrency against a reference model, call for call: the local lease table (createLimiter) and
 * strict mode (lua/concurrency.lua in a frozen-clock Redis, `clock: 'limiter'`). fast-check draws limits 0..5
 * and lease TTLs 1..3000 ms, and up to 120 calls over 1–3 keys: acquires, and releases of a lease handed out
 * earlier (to any key: the wrong key's release must fail), released twice, or never issued; time moves by 0,
 * 1 ms, a few ms, about a TTL, a lot, or backwards, or to 1 ms before, at or after a live lease's expiry.
 *
 * The model keeps every lease ever issued, with its expiry and whether it is gone; each call on a key first
 * marks the key's leases with expiry ≤ now gone (a lease seen expired stays gone, even if the clock then steps
 * back), then counts the rest. Nothing is ordered or coalesced: a denied acquire's wait is found by sorting.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkBe, checkStrictEqual } from '../helpers/assert.js';
import { createLimiter } from '../../src/index.js';
import { isSluiceError } from '../../src/util/errors.js';
import { connected, startFrozenRedis, type FrozenRedis } from '../helpers/redis.js';
import { Clock, MAX_KEYS, type Limiter } from './support.js';

interface Lease { key: string; expiry: number; gone: boolean }

/** What an acquire or release answered, without the random lease id. */
type Outcome = { allowed: boolean; remaining: number; retryAfterMs: number | null } | { released: true; remaining: number } | { error: string };

class Model {
  readonly leases: Lease[] = [];
  constructor(private readonly limit: number, private readonly ttl: number) {}

  private live(key: string, now: number): Lease[] {
    for (const l of this.leases) if (l.key === key && !l.gone && l.expiry <= now) l.gone = true;
    return this.leases.filter((l) => l.key === key && !l.gone);
  }

  /** The outcome, and the index of the lease issued (−1 when none). */
  acquire(key: string, now: number): [Outcome, number] {
    const held = this.live(key, now);
    if (this.limit === 0) return [{ allowed: false, remaining: 0, retryAfterMs: null }, -1];
    if (held.length >= this.limit) {
      const expiries = held.map((l) => l.expiry).sort((a, b) => a - b);
      return [{ allowed: false, remaining: 0, retryAfterMs: expiries[held.length - this.limit] - now }, -1];
    }
    this.leases.push({ key, expiry: now + this.ttl, gone: false });
    return [{ allowed: true, remaining: this.limit - held.length - 1, retryAfterMs: 0 }, this.leases.length - 1];
  }

  release(key: string, index: number, now: number): Outcome {
    const held = this.live(key, now);
    const l = this.leases[index];
    if (l === undefined || !held.includes(l)) return { error: 'UNKNOWN_LEASE' };
    l.gone = true;
    return { released: true, remaining: Math.max(0, this.limit - held.length + 1) };
  }
}

/**
 * `snap` (when not null) moves the clock to a live lease's expiry plus snap (−1, 0 or +1 ms) instead of by dt:
 * the boundary where a lease is held 1 ms more, or just gone.
 */
interface Call { dt: number; snap: number | null; key: string; op: 'acquire' | 'release'; pick: number }

const callArb: fc.Arbitrary<Call> = fc.record({
  dt: fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 3, arbitrary: fc.integer({ min: 1, max: 20 }) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: 4000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 4000, max: 10_000_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: -3000, max: -1 }) },
  ),
  snap: fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.integer({ min: -1, max: 1 }) }),
  key: fc.constantFrom('a', 'b', 'c'),
  op: fc.constantFrom('acquire' as const, 'acquire' as const, 'release' as const),
  // which lease to release: one issued so far (counted from the newest), or past them all (never issued)
  pick: fc.integer({ min: 0, max: 12 }),
});

const runArb = fc.tuple(
  fc.integer({ min: 0, max: 5 }), fc.integer({ min: 1, max: 3000 }), fc.integer({ min: 0, max: 2 ** 40 }),
  fc.array(callArb, { minLength: 1, maxLength: 120 }),
);

/** A lease id no acquire hands out to these runs' keys (ids are random 48-bit: 1 in 2^48 per lease). */
const NEVER_ISSUED = 'ffffffffffff';

/**
 * Runs `calls` on `limiter`, returning each outcome; `ids` collects the lease ids issued, by model index
 * (issued[i] = the id of the model's lease i, in the order acquires succeeded).
 */
async function outcome(p: Promise<unknown>): Promise<Outcome> {
  try {
    const r = await p as Record<string, unknown>;
    if ('released' in r) return { released: true, remaining: r.remaining as number };
    return { allowed: r.allowed as boolean, remaining: r.remaining as number, retryAfterMs: r.retryAfterMs as number | null };
  } catch (e) {
    if (!isSluiceError(e)) throw e;
    return { error: e.code };
  }
}

function policies(limit: number, ttl: number, strict: boolean) {
  return { jobs: { algorithm: 'concurrency', limit, leaseTtl: ttl, ...(strict ? { consistency: 'strict' } : {}) } } as never;
}

/** Replays `calls` on each limiter and the model, expecting the same outcome from all; lease ids per limiter. */
async function compare(limiters: Limiter[], clock: Clock, limit: number, ttl: number, start: number, calls: Call[]): Promise<void> {
  const model = new Model(limit, ttl);
  const ids: string[][] = limiters.map(() => []);
  let t = start;
  for (const [i, c] of calls.entries()) {
    const live = model.leases.filter((l) => !l.gone);
    t = Math.max(0, c.snap !== null && live.length > 0 ? live[c.pick % live.length].expiry + c.snap : t + c.dt);
    clock.now = t;
    // check*: expect() only on a difference (test/helpers/assert.ts): this runs for every call of every run
    const where = (): string => `call #${i} t=${t} ${c.op} ${c.key} pick ${c.pick} (limit ${limit}, ttl ${ttl})`;
    if (c.op === 'acquire') {
      const [want, issued] = model.acquire(c.key, t);
      for (const [k, l] of limiters.entries()) {
        const d = await l.acquire({ policy: 'jobs', key: c.key });
        checkStrictEqual({ allowed: d.allowed, remaining: d.remaining, retryAfterMs: d.retryAfterMs }, want, () => `${where()} limiter ${k}`);
        checkBe(d.leaseId === null, issued < 0, where);
        if (issued >= 0) ids[k][issued] = d.leaseId!;
      }
    } else {
      const index = model.leases.length - 1 - c.pick;
      const want = model.release(c.key, index, t);
      for (const [k, l] of limiters.entries()) {
        const leaseId = index >= 0 ? ids[k][index] : NEVER_ISSUED;
        checkStrictEqual(await outcome(l.release({ policy: 'jobs', key: c.key, leaseId })), want, () => `${where()} limiter ${k}`);
      }
    }
  }
}

describe('concurrency: local lease table = reference model', () => {
  it('acquires and releases, clock moving both ways', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ([limit, ttl, start, calls]) => {
      const clock = new Clock();
      const l = await createLimiter({ policies: policies(limit, ttl, false), clock: clock.read, maxKeys: MAX_KEYS });
      try {
        await compare([l], clock, limit, ttl, start, calls);
      } finally {
        await l.close();
      }
    }), { numRuns: 300, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});

describe('concurrency: strict (lua/concurrency.lua, limiter clock) = reference model = local', () => {
  let redis: FrozenRedis;
  let prefixes = 0;
  beforeAll(async () => { redis = await startFrozenRedis(); });
  afterAll(async () => { await redis?.stop(); });

  it('call for call', async () => {
    await fc.assert(fc.asyncProperty(runArb, async ([limit, ttl, start, calls]) => {
      const clock = new Clock();
      const local = await createLimiter({ policies: policies(limit, ttl, false), clock: clock.read, maxKeys: MAX_KEYS });
      const strict = await createLimiter({
        policies: policies(limit, ttl, true), clock: clock.read, maxKeys: MAX_KEYS,
        redis: { url: redis.url, prefix: `lease${process.pid}.${++prefixes}:`, clock: 'limiter', timeoutMs: 5000 },
      });
      try {
        await connected(strict);
        await compare([local, strict], clock, limit, ttl, start, calls);
      } finally {
        await strict.close();
        await local.close();
      }
    }), { numRuns: 80, interruptAfterTimeLimit: 30_000, markInterruptAsFailure: false });
  }, 60_000);
});
