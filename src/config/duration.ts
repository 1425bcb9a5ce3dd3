/**
 * Durations in configuration: a positive integer of milliseconds, or a string `<digits><unit>`.
 *
 * | unit | meaning      | ms         |
 * |------|--------------|------------|
 * | `ms` | milliseconds | 1          |
 * | `s`  | seconds      | 1 000      |
 * | `m`  | minutes      | 60 000     |
 * | `h`  | hours        | 3 600 000  |
 * | `d`  | days         | 86 400 000 |
 * | `w`  | weeks        | 604 800 000 |
 *
 * A fixed_window limit reads `1d` with a `timeZone`, `1w` and `1mo` as calendar periods instead (see
 * src/config/calendar.ts); `mo` is not a duration.
 *
 * No spaces, signs, fractions, exponents or compound forms ("1h30m"): write "90m" or "5400s" instead.
 */

/** Milliseconds per duration unit. */
const UNIT_MS: Readonly<Record<string, bigint>> = { ms: 1n, s: 1_000n, m: 60_000n, h: 3_600_000n, d: 86_400_000n, w: 604_800_000n };

/** `<digits><unit>`; `ms` is tried before `m`. `$` without the `m` flag matches only at the very end. */
const DURATION_RE = /^([0-9]+)(ms|s|m|h|d|w)$/;

/** More digits than this cannot be a safe integer of ms whatever the unit (2^53 has 16 digits). */
const MAX_DIGITS = 20;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** What every rejected duration is told (the caller prefixes the policy and field). */
export const DURATION_RULE = 'must be a positive integer of ms or a duration string such as "1m"';

/**
 * A short, unambiguous rendering of a configuration value for error messages: numbers as written
 * (`-1000`, `NaN`, `Infinity`), strings JSON-quoted (`"10x"`), and the kind of anything else.
 * @internal shared by the config modules.
 */
export function describeValue(v: unknown): string {
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v);
  if (typeof v === 'string') return v.length > 40 ? `${JSON.stringify(v.slice(0, 40))}...` : JSON.stringify(v);
  if (typeof v === 'bigint') return `${v}n`;
  if (v === null || v === undefined || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

/**
 * Parses a duration to an integer number of milliseconds.
 *
 * @param v a positive safe integer (ms), or a string `<digits><unit>` with unit `ms`, `s`, `m`, `h`, `d` or `w`
 *   (e.g. `"500ms"`, `"1s"`, `"90s"`, `"1m"`, `"1h"`, `"1d"`).
 * @returns the duration in ms: a positive safe integer (1 ≤ ms ≤ 2^53 − 1).
 * @throws Error (a plain one, whose message is the reason only, e.g. `must be a positive integer of ms or a
 *   duration string such as "1m" (got "10x")`) for zero, negative, fractional, non-finite or unsafe numbers,
 *   malformed strings (`""`, `"abc"`, `"10x"`, `" 1s"`, `"1.5s"`, `"0s"`), results above 2^53 − 1 ms and
 *   any other type. Callers wrap it to name the policy and field.
 */
export function parseDuration(v: unknown): number {
  if (typeof v === 'number') {
    if (Number.isSafeInteger(v) && v > 0) return v;
    throw new Error(`${DURATION_RULE} (got ${describeValue(v)})`);
  }
  if (typeof v === 'string') {
    const m = DURATION_RE.exec(v);
    if (m !== null) return durationStringMs(v, m[1], m[2]);
  }
  throw new Error(`${DURATION_RULE} (got ${describeValue(v)})`);
}

/** `digits` × the unit, checked to be a positive safe integer of ms (exact: computed as a BigInt). */
function durationStringMs(text: string, digits: string, unit: string): number {
  const tooLarge = (): Error =>
    new Error(`must be at most ${Number.MAX_SAFE_INTEGER} ms (2^53 - 1) (got ${describeValue(text)})`);
  if (digits.replace(/^0+/, '').length > MAX_DIGITS) throw tooLarge();
  const ms = BigInt(digits) * UNIT_MS[unit];
  if (ms === 0n) throw new Error(`${DURATION_RULE} (got ${describeValue(text)})`);
  if (ms > MAX_SAFE) throw tooLarge();
  return Number(ms);
}
