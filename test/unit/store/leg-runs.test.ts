/**
 * src/store/leg-runs.ts packRuns: which legs head a run and how long it is, exactly, and that a run's later legs
 * are left out and the others kept in order; and RUN_MARK pinned against lua/check.lua's RUN and above every
 * algorithm code + UNIQUE_KEY. packLegs: the legs as sent, packRuns's kept numbers as little-endian doubles.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ALGORITHM_CODES, CALENDAR_WINDOW_CODE } from '../../../src/config/policy-spec.js';
import { UNIQUE_KEY } from '../../../src/store/contract.js';
import { RUN_MARK, packLegs, packRuns } from '../../../src/store/leg-runs.js';
import { packed } from '../../helpers/check-legs.js';

const TB = ALGORITHM_CODES.token_bucket + UNIQUE_KEY;

/** Legs as the strict decider writes them: [algorithm code (+ UNIQUE_KEY), L, P, B, cost, group length]. */
function legs(...rows: number[][]): Float64Array {
  return Float64Array.from(rows.flat());
}

/** The algorithm field of each leg packRuns keeps, in order. */
function marks(f: Float64Array): number[] {
  const kept = packRuns(f, f.length / 6);
  return Array.from({ length: kept / 6 }, (_, j) => f[6 * j]);
}

describe('packRuns', () => {
  it('pins RUN_MARK against lua/check.lua and above every marked algorithm code', () => {
    const lua = readFileSync(new URL('../../../lua/check.lua', import.meta.url), 'utf8');
    expect(Number(/^local RUN = (\d+)$/m.exec(lua)?.[1])).toBe(RUN_MARK);
    expect(RUN_MARK).toBe(32);
    for (const code of [...Object.values(ALGORITHM_CODES), CALENDAR_WINDOW_CODE]) expect(code + UNIQUE_KEY).toBeLessThan(RUN_MARK);
    expect(ALGORITHM_CODES.token_bucket).toBe(0);
  });

  it('marks a run of one shape on its first leg, by the number of legs after it, and leaves those out', () => {
    const a = [TB, 60, 60_000, 100, 1, 1];
    expect(marks(legs(a, a, a, a))).toEqual([TB + 3 * RUN_MARK]);
    expect(marks(legs(a, a))).toEqual([TB + RUN_MARK]);
    // one leg is no run
    expect(marks(legs(a))).toEqual([TB]);
    expect(marks(legs())).toEqual([]);
  });

  it('ends a run at another L, P, B or cost, and starts the next there', () => {
    const a = [TB, 60, 60_000, 100, 1, 1];
    const b = [TB, 60, 60_000, 100, 2, 1];
    const c = [TB, 60, 60_000, 101, 1, 1];
    const d = [TB, 61, 60_000, 100, 1, 1];
    const e = [TB, 60, 1_000, 100, 1, 1];
    expect(marks(legs(a, a, b, b, b, a))).toEqual([TB + RUN_MARK, TB + 2 * RUN_MARK, TB]);
    expect(marks(legs(a, c, c, d, d, e, e, a))).toEqual([TB, TB + RUN_MARK, TB + RUN_MARK, TB + RUN_MARK, TB]);
  });

  it('leaves out legs that are not single-leg token-bucket checks on unique keys of a cost above 0', () => {
    const a = [TB, 60, 60_000, 100, 1, 1];
    const notUnique = [ALGORITHM_CODES.token_bucket, 60, 60_000, 100, 1, 1];
    const gcra = [ALGORITHM_CODES.gcra + UNIQUE_KEY, 60, 60_000, 100, 1, 1];
    const free = [TB, 60, 60_000, 100, 0, 1];
    const delayed = [TB, 60, 60_000, 100, 1, 1 + 500 * 65_536];
    const groupHead = [ALGORITHM_CODES.token_bucket, 60, 60_000, 100, 1, 2];
    const groupLeg = [ALGORITHM_CODES.token_bucket, 60, 60_000, 100, 1, 0];
    for (const other of [notUnique, gcra, free, delayed]) {
      expect(marks(legs(a, other, a, a))).toEqual([a[0], other[0], TB + RUN_MARK]);
      expect(marks(legs(other, other, other))).toEqual([other[0], other[0], other[0]]);
    }
    expect(marks(legs(a, a, groupHead, groupLeg, a, a, a))).toEqual([TB + RUN_MARK, groupHead[0], groupLeg[0], TB + 2 * RUN_MARK]);
  });

  it('moves the kept legs up whole, in order, and changes nothing but the run heads\' algorithm fields', () => {
    const a = [TB, 60, 60_000, 100, 1, 1];
    const g = [ALGORITHM_CODES.gcra + UNIQUE_KEY, 7, 1_000, 3, 2, 1];
    const f = legs(a, a, a, g, a, a, g);
    expect(packRuns(f, 7)).toBe(4 * 6);
    expect(Array.from(f.subarray(0, 24))).toEqual([TB + 2 * RUN_MARK, 60, 60_000, 100, 1, 1, ...g, TB + RUN_MARK, 60, 60_000, 100, 1, 1, ...g]);
    const none = legs(g, a, g);
    expect(packRuns(none, 3)).toBe(18);
    expect(Array.from(none)).toEqual([...g, ...a, ...g]);
  });
});

describe('packLegs', () => {
  const a = [TB, 60, 60_000, 100, 1, 1];
  const g = [ALGORITHM_CODES.gcra + UNIQUE_KEY, 7, 1_000, 3, 2.5, 1];

  it('gives the kept legs as little-endian doubles, from `from` on, the caller\'s numbers as they were', () => {
    const args = [9, 9, 9, ...a, ...a, ...g, ...a];
    const before = [...args];
    const bytes = packLegs(args, 3, 4);
    expect(Buffer.from(bytes).equals(packed([TB + RUN_MARK, 60, 60_000, 100, 1, 1, ...g, ...a]))).toBe(true);
    expect(args).toEqual(before);
    expect(packLegs([], 0, 0).length).toBe(0);
  });

  it('packs a call larger than its first scratch (512 legs), all of them', () => {
    const args = Array.from({ length: 512 }, (_, j) => [ALGORITHM_CODES.gcra, j, 60_000, 1e9 + j, 1, 1]).flat();
    expect(Buffer.from(packLegs(args, 0, 512)).equals(packed(args))).toBe(true);
  });
});
