/**
 * test/helpers/assert.ts: the hot-loop assertions fail exactly where expect would (they call it then), and
 * pass only where it would pass.
 */
import { describe, expect, it } from 'vitest';
import { checkBe, checkStrictEqual, checkTrue } from '../helpers/assert.js';

const fails = (f: () => void): string => {
  try {
    f();
  } catch (e) {
    return (e as Error).message;
  }
  return 'passed';
};

describe('checkStrictEqual, checkBe, checkTrue', () => {
  it('pass on what toStrictEqual / toBe accept', () => {
    expect(fails(() => checkStrictEqual({ allowed: true, remaining: 3, retryAfterMs: null }, { retryAfterMs: null, remaining: 3, allowed: true }, 'm'))).toBe('passed');
    expect(fails(() => checkStrictEqual({ a: NaN }, { a: NaN }, 'm'))).toBe('passed');
    expect(fails(() => checkStrictEqual({ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] }, 'm'))).toBe('passed'); // nested: expect decides
    expect(fails(() => checkStrictEqual(5, 5, 'm'))).toBe('passed');
    expect(fails(() => checkBe(1, 1, 'm'))).toBe('passed');
    expect(fails(() => checkTrue(true, 'm'))).toBe('passed');
  });

  it('fail, with the message given, on every difference toStrictEqual / toBe see', () => {
    expect(fails(() => checkStrictEqual({ a: 1 }, { a: 2 }, 'call #7'))).toMatch(/^call #7: expected/);
    expect(fails(() => checkStrictEqual({ a: 1 }, { a: 1, b: 2 }, 'm'))).toMatch(/^m:/);
    expect(fails(() => checkStrictEqual({ a: 1, b: undefined }, { a: 1 }, 'm'))).toMatch(/^m:/); // undefined is not absent
    expect(fails(() => checkStrictEqual({ a: 0 }, { a: -0 }, 'm'))).toMatch(/^m:/);
    expect(fails(() => checkStrictEqual({ a: null }, { a: 0 }, 'm'))).toMatch(/^m:/);
    expect(fails(() => checkStrictEqual({ a: [1] }, { a: [2] }, 'm'))).toMatch(/^m:/);
    expect(fails(() => checkStrictEqual(new (class X { a = 1 })(), { a: 1 }, 'm'))).toMatch(/^m:/); // class vs plain
    expect(fails(() => checkStrictEqual({ a: '1' }, { a: 1 }, () => 'built late'))).toMatch(/^built late:/);
    expect(fails(() => checkBe(0, -0, 'm'))).toMatch(/^m:/);
    expect(fails(() => checkTrue(false, () => 'why'))).toMatch(/^why:/);
  });
});
