/**
 * Shared case 14, scenario 1 (in process): concurrent checks for one key never all read the old state.
 * With the clock frozen, 200 checks for one key fired together (Promise.all, no await in between), limit 10
 * per 60 000 ms: exactly 10 admitted and 190 denied, the admitted answers' remaining values are 9, 8, …, 0
 * each exactly once, and a following peek reports 0. A second key mixed into the same burst gets its own 10.
 * 20 rounds with fresh keys, for every algorithm, in-thread and on two worker shards.
 */
import { describe, expect, it } from 'vitest';
import { checkBe } from '../../helpers/assert.js';
import type { Decision } from '../../../src/index.js';
import { SHARDS, main, withSession, type Session } from './table.js';

const ALGORITHMS = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'] as const;
const FROZEN = 1_700_000_000_000;
const ROUNDS = 20;

/** A deterministic shuffle (xorshift), so a failure replays. */
function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let x = seed || 1;
  for (let i = out.length - 1; i > 0; i--) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    const j = (x >>> 0) % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

function expectExactlyTen(ds: Decision[], where: string): void {
  const admitted = ds.filter((d) => d.allowed);
  expect(admitted, `${where}: admitted`).toHaveLength(10);
  expect(ds.length - admitted.length, `${where}: denied`).toBe(ds.length - 10);
  expect(admitted.map((d) => d.remaining).sort((a, b) => b - a), `${where}: remaining of the admitted`).toStrictEqual([
    9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
  ]);
  // every denial (190 a round): expect() only on a failure, it costs more than the check (test/helpers/assert.ts)
  for (const d of ds.filter((x) => !x.allowed)) {
    checkBe(d.remaining, 0, () => `${where}: a denial's remaining`);
    if (!(typeof d.retryAfterMs === 'number' && d.retryAfterMs >= 1)) expect(d.retryAfterMs, `${where}: a denial's wait`).toBeGreaterThanOrEqual(1);
  }
}

async function peek(s: Session, key: string): Promise<Decision> {
  return s.check(FROZEN, { policy: 'main', key, cost: 0 });
}

describe.each(SHARDS)('14 concurrent checks on one key, shards: %i', (shards) => {
  it.each(ALGORITHMS)('%s, limit 10 per 60 000 ms: 20 rounds of 200 concurrent checks', async (algorithm) => {
    await withSession(main(algorithm, 10, 60_000), shards, async (s) => {
      s.now = FROZEN;
      for (let round = 0; round < ROUNDS; round++) {
        const key = `hot-${round}`;
        const ds = await Promise.all(Array.from({ length: 200 }, () => s.limiter.check({ policy: 'main', key, cost: 1 })));
        expectExactlyTen(ds, `round ${round}`);
        const after = await peek(s, key);
        expect(after.allowed).toBe(true);
        expect(after.remaining, `round ${round}: peek`).toBe(0);
      }
    });
  }, 60_000);

  it.each(ALGORITHMS)('%s: a second key mixed into the burst gets its own 10', async (algorithm) => {
    await withSession(main(algorithm, 10, 60_000), shards, async (s) => {
      s.now = FROZEN;
      for (let round = 0; round < ROUNDS; round++) {
        const a = `a-${round}`;
        const b = `b-${round}`;
        const keys = shuffled([...Array<string>(200).fill(a), ...Array<string>(50).fill(b)], round + 1);
        const ds = await Promise.all(keys.map((key) => s.limiter.check({ policy: 'main', key, cost: 1 })));
        expectExactlyTen(ds.filter((_, i) => keys[i] === a), `round ${round}, key a`);
        expectExactlyTen(ds.filter((_, i) => keys[i] === b), `round ${round}, key b`);
        expect((await peek(s, a)).remaining).toBe(0);
        expect((await peek(s, b)).remaining).toBe(0);
        // A key nobody touched is still full.
        expect((await peek(s, `untouched-${round}`)).remaining).toBe(10);
      }
    });
  }, 60_000);

  // A burst larger than one kernel batch (4 096 legs) is split into several batches: still exactly 10.
  it.each(ALGORITHMS)('%s: 5 000 concurrent checks on one key, more than one batch holds', async (algorithm) => {
    await withSession(main(algorithm, 10, 60_000), shards, async (s) => {
      s.now = FROZEN;
      const ds = await Promise.all(Array.from({ length: 5000 }, () => s.limiter.check({ policy: 'main', key: 'big', cost: 1 })));
      expectExactlyTen(ds, '5 000 checks');
      expect((await peek(s, 'big')).remaining).toBe(0);
    });
  }, 60_000);
});
