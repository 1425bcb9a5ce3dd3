/**
 * Unique-key floods against one limiter (shards 0, a frozen clock).
 *
 * 1. Memory is fixed: 5,000,000 distinct keys through a table of 100,000 keep exactly 100,000 keys, evict
 *    exactly 4,900,000, leave the kernel's linear memory unchanged, and keep the process's RSS within a
 *    generous bound.
 * 2. An attacker who floods new keys cannot reset its own over-limit key while the table holds idle keys
 *    (buckets refilled to full) to evict instead.
 *
 * 3. With no idle key at all, a flood of fresh keys (each one check old) never evicts an over-limit key.
 *
 * What the kernel guarantees, exactly (assembly/index.ts, evictOne): an eviction draws a key at random and
 * scans on from it until it has seen 32 occupied slots (EVICTION_SAMPLE); the first idle key among them goes;
 * a sample with no idle key evicts the key whose state becomes idle soonest (closest to full), so an
 * over-limit key goes only from a sample in which every key owes at least as long as it does. So an over-limit key survives every
 * eviction whose sample holds an idle key. That is sampled, not absolute: with idle keys a fraction f of the
 * table, a sample misses them all with probability about (1 − f)^32 (f = 10%: 3.4%; 25%: 1e-4; 40%: 8e-8;
 * 50%: 2e-10), and once the flood has used the idle keys up, the oldest key in a sample goes, which can be
 * the attacker's. The tests below assert the guarantee where it holds with overwhelming probability: floods
 * that leave at least 40% of the table idle. Hashes and the kernel's sampler are deterministic, so each run
 * is the same run.
 *
 * The 5 M flood also guards the table's speed: evicting by position (a rotating hand) once packed half the
 * table into one probe cluster and made this test take minutes instead of seconds.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type CheckRequest, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { EPOCH_MINUTE, ManualClock } from '../helpers/clock.js';

const POLICIES: Record<string, PolicySpec> = {
  // the attacker's policy: one request an hour
  strict: { algorithm: 'token_bucket', limit: 1, period: '1h' },
  // everyone else's: 10 a minute, one token back every 6 s
  free: { algorithm: 'token_bucket', limit: 10, period: '1m' },
  // 10 an hour, one token back every 6 min
  hourly: { algorithm: 'token_bucket', limit: 10, period: '1h' },
};
const MAX_KEYS = 100_000;
/** Checks per checkMany call: the front hashes and decides them in batches of up to 4,096 legs. */
const CHUNK = 20_000;

let open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.map((l) => l.close()));
  open = [];
});

async function limiter(clock: ManualClock, maxKeys = MAX_KEYS): Promise<Limiter> {
  const l = await createLimiter({ policies: POLICIES, shards: 0, maxKeys, clock: clock.now });
  open.push(l);
  return l;
}

/** Sends `count` checks made by `make(i)`, CHUNK at a time; returns how many were admitted. Rejects on any error. */
async function flood(l: Limiter, count: number, make: (i: number) => CheckRequest): Promise<number> {
  let admitted = 0;
  const pending: Array<Promise<Decision>> = new Array(CHUNK);
  for (let start = 0; start < count; start += CHUNK) {
    const n = Math.min(CHUNK, count - start);
    pending.length = n;
    for (let i = 0; i < n; i++) pending[i] = l.check(make(start + i));
    for (const d of await Promise.all(pending)) if (d.allowed) admitted++;
  }
  return admitted;
}

const MiB = 2 ** 20;

describe('a flood of unique keys', () => {
  it('5,000,000 distinct keys through a table of 100,000: keys stay at 100,000, 4,900,000 evictions, kernel memory unchanged, RSS bounded', async () => {
    const clock = new ManualClock(EPOCH_MINUTE);
    const l = await limiter(clock);
    const before = await l.stats();
    expect(before).toMatchObject({ keys: 0, evictions: 0 });
    const rssBefore = process.memoryUsage.rss();
    let rssPeak = rssBefore;

    const TOTAL = 5_000_000;
    const SLICE = 500_000;
    for (let done = 0; done < TOTAL; done += SLICE) {
      // every key is new, so every check is admitted and stores a key (a full table evicts one first)
      expect(await flood(l, SLICE, (i) => ({ policy: 'free', key: `k${done + i}`, cost: 1 }))).toBe(SLICE);
      const st = await l.stats();
      expect(st.keys).toBe(Math.min(MAX_KEYS, done + SLICE));
      expect(st.memoryBytes).toBe(before.memoryBytes);
      rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
    }
    const after = await l.stats();
    expect(after).toMatchObject({ keys: MAX_KEYS, evictions: TOTAL - MAX_KEYS, pending: 0, memoryBytes: before.memoryBytes });
    // 100,000 keys take 2^17 slots of 32 bytes (4 MiB) plus the I/O regions: the whole kernel is a few MiB
    expect(after.memoryBytes).toBeLessThan(16 * MiB);
    // Generous: the flood's own strings and promises are garbage; what the table holds does not grow.
    console.log(`key flood: RSS ${rssBefore / MiB | 0} MiB before, ${rssPeak / MiB | 0} MiB at peak`);
    expect(rssPeak - rssBefore, `RSS ${rssBefore / MiB | 0} → peak ${rssPeak / MiB | 0} MiB`).toBeLessThan(384 * MiB);

    // the limiter still decides exactly: the last key flooded has 9 of 10 tokens left, a new one starts full
    expect(await l.check({ policy: 'free', key: `k${TOTAL - 1}`, cost: 1 })).toMatchObject({ allowed: true, remaining: 8 });
    expect(await l.check({ policy: 'free', key: 'fresh', cost: 0 })).toMatchObject({ allowed: true, remaining: 10 });
  }, 120_000);
});

describe('an attacker flooding new keys to reset its own over-limit key', () => {
  /**
   * The attacker's key A spends its one token of the hour at t0, so it is over its limit (and the OLDEST key
   * in the table: least-recently-used eviction alone would take it first). `idle` legitimate keys spend one
   * token at t0 + 1 s and are full again by t0 + 60 s, when the attacker floods `floodKeys` new keys of its
   * own policy (each spends its token, so none is idle).
   */
  async function attack(idle: number, floodKeys: number): Promise<{ a: Decision; evictions: number; keys: number }> {
    const clock = new ManualClock(EPOCH_MINUTE);
    const l = await limiter(clock);
    expect(await l.check({ policy: 'strict', key: 'attacker', cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
    clock.advance(1000);
    expect(await flood(l, idle, (i) => ({ policy: 'free', key: `tenant-${i}`, cost: 1 }))).toBe(idle);
    clock.advance(59_000);
    expect(await l.check({ policy: 'strict', key: 'attacker', cost: 1 })).toMatchObject({ allowed: false, retryAfterMs: 3_540_000 });
    expect(await flood(l, floodKeys, (i) => ({ policy: 'strict', key: `attacker-${i}`, cost: 1 }))).toBe(floodKeys);
    const a = await l.check({ policy: 'strict', key: 'attacker', cost: 1 });
    const st = await l.stats();
    return { a, evictions: st.evictions, keys: st.keys };
  }

  /** A's exact decision 60 s after it spent its hour's token: denied, 59 minutes to wait. */
  const STILL_DENIED = { allowed: false, limit: 1, remaining: 0, resetAfterMs: 3_540_000, retryAfterMs: 3_540_000, policy: 'strict' };

  it('a table full of idle keys: 45,000 new keys (45,000 evictions) leave the over-limit key denied, to the millisecond', async () => {
    const r = await attack(MAX_KEYS - 1, 45_000);
    expect(r.evictions).toBe(45_000);
    expect(r.keys).toBe(MAX_KEYS);
    expect(r.a).toStrictEqual(STILL_DENIED);
  }, 60_000);

  it('idle keys half the table, the rest the attacker\'s: a flood that evicts 10,000 more keys leaves it denied', async () => {
    // 50,000 idle keys + A + 59,999 flood keys: the table fills after 49,999 of them, the last 10,000 evict
    const r = await attack(50_000, 59_999);
    expect(r.evictions).toBe(10_000);
    expect(r.keys).toBe(MAX_KEYS);
    expect(r.a).toStrictEqual(STILL_DENIED);
  }, 60_000);
});

describe('a flood with no idle key to evict (#20 item 7)', () => {
  it('maxKeys 1,000, 200,000 admitted checks on new keys: the over-limit key is never evicted (it says the most)', async () => {
    const clock = new ManualClock(EPOCH_MINUTE);
    const l = await limiter(clock, 1000);
    // the abuser's key spends its 10 tokens of the hour: full again only in an hour
    expect(await l.check({ policy: 'hourly', key: 'abuser', cost: 10 })).toMatchObject({ allowed: true, remaining: 0 });
    clock.advance(1000);
    // fresh keys, each one check old (each is 1 token from full: 6 min, or 6 s for `free`), never idle
    // while the flood lasts: every eviction's sample holds only informative keys
    expect(await flood(l, 100_000, (i) => ({ policy: 'hourly', key: `fresh-${i}`, cost: 1 }))).toBe(100_000);
    expect(await flood(l, 100_000, (i) => ({ policy: 'free', key: `fresh-${i}`, cost: 1 }))).toBe(100_000);
    const st = await l.stats();
    expect([st.keys, st.evictions]).toStrictEqual([1000, 199_001]);
    expect(await l.check({ policy: 'hourly', key: 'abuser', cost: 1 })).toStrictEqual({
      allowed: false, limit: 10, remaining: 0, resetAfterMs: 3_599_000, retryAfterMs: 359_000, policy: 'hourly',
    });
  }, 60_000);
});
