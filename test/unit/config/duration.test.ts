import { describe, expect, it } from 'vitest';
import { describeValue, parseDuration } from '../../../src/config/duration.js';

const RULE = 'must be a positive integer of ms or a duration string such as "1m"';
const MAX = Number.MAX_SAFE_INTEGER;

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['1ms', 1],
    ['1s', 1_000],
    ['90s', 90_000],
    ['1m', 60_000],
    ['90m', 5_400_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['007s', 7_000],
    [`${MAX}ms`, MAX],
  ])('parses %j to %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([1, 1000, 60_000, MAX])('accepts the positive safe integer %d as ms', (ms) => {
    expect(parseDuration(ms)).toBe(ms);
  });

  it('accepts the largest whole number of days that fits, and no more', () => {
    const days = Math.floor(MAX / 86_400_000);
    expect(parseDuration(`${days}d`)).toBe(days * 86_400_000);
    expect(() => parseDuration(`${days + 1}d`)).toThrow(
      `must be at most 9007199254740991 ms (2^53 - 1) (got "${days + 1}d")`,
    );
  });

  it.each([
    ['', '""'],
    ['abc', '"abc"'],
    ['10x', '"10x"'],
    ['0s', '"0s"'],
    ['0ms', '"0ms"'],
    ['0', '"0"'],
    ['10', '"10"'],
    ['1.5s', '"1.5s"'],
    [' 1s', '" 1s"'],
    ['1s ', '"1s "'],
    ['1s\n', '"1s\\n"'],
    ['-1s', '"-1s"'],
    ['+1s', '"+1s"'],
    ['1S', '"1S"'],
    ['1 s', '"1 s"'],
    ['1h30m', '"1h30m"'],
    ['1e3ms', '"1e3ms"'],
    ['s', '"s"'],
  ])('rejects the string %j', (text, shown) => {
    expect(() => parseDuration(text)).toThrow(new Error(`${RULE} (got ${shown})`));
  });

  it.each([
    [0, '0'],
    [-0, '-0'],
    [-1000, '-1000'],
    [1.5, '1.5'],
    [Number.NaN, 'NaN'],
    [Number.POSITIVE_INFINITY, 'Infinity'],
    [Number.NEGATIVE_INFINITY, '-Infinity'],
    [2 ** 53, '9007199254740992'],
    [null, 'null'],
    [undefined, 'undefined'],
    [true, 'true'],
    [1000n, '1000n'],
    [[1000], 'an array'],
    [{ ms: 1000 }, 'an object'],
  ])('rejects %s', (value, shown) => {
    expect(() => parseDuration(value)).toThrow(new Error(`${RULE} (got ${shown})`));
  });

  it('rejects a digit string too long to be a safe integer whatever the unit', () => {
    const text = `${'9'.repeat(30)}ms`;
    expect(() => parseDuration(text)).toThrow(`must be at most 9007199254740991 ms (2^53 - 1) (got ${describeValue(text)})`);
    expect(() => parseDuration(`${MAX + 1}ms`)).toThrow('must be at most 9007199254740991 ms');
  });

  it('throws a plain Error (the caller names the policy and field)', () => {
    let thrown: unknown;
    try {
      parseDuration('10x');
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(Error);
    expect((thrown as Error).constructor).toBe(Error);
  });
});

describe('describeValue', () => {
  it('renders values unambiguously', () => {
    expect(describeValue('x'.repeat(50))).toBe(`"${'x'.repeat(40)}"...`);
    expect(describeValue(() => 1)).toBe('a function');
    expect(describeValue(Symbol('s'))).toBe('a symbol');
  });
});
