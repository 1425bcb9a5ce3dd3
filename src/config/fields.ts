/**
 * Reading a policy's fields: the failure callback every rule reports through ({@link Fail}: the field's path
 * and why), field paths, own properties of plain objects, and the readers of names, counts, periods and
 * choices. Internal to the policy compiler (config/).
 */
import { describeValue, parseDuration } from './duration.js';
import { NAME_PATTERN } from './policy-spec.js';

/** Reports a failed rule of one policy: `field` is the path inside it (null: the whole policy); never returns. */
export type Fail = (field: string | null, why: string) => never;
/** A plain object's fields, as read from a spec. */
export type Obj = Record<string, unknown>;
export const NAME_RULE = 'must be 1 to 64 characters of A-Z a-z 0-9 _ . -';
const COUNT_RULE = 'a non-negative safe integer';
export const PERIOD_RULE = 'a positive integer of ms or a duration string such as "1m"';

/** One of `choices`, or `dflt` when absent. */
export function readChoice<T extends string>(v: unknown, field: string, choices: readonly T[], dflt: T, fail: Fail): T {
  if (v === undefined) return dflt;
  if (typeof v !== 'string' || !choices.includes(v as T)) fail(field, `must be one of ${choices.join(', ')} (got ${describeValue(v)})`);
  return v as T;
}

/** A non-negative safe integer (tokens); `-0` becomes 0. */
export function readCount(v: unknown, field: string, fail: Fail): number {
  if (v === undefined) fail(field, `is required: ${COUNT_RULE}`);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(field, `must be ${COUNT_RULE} (got ${describeValue(v)})`);
  return v + 0;
}

/** The period in ms, via {@link parseDuration}. */
export function readPeriod(v: unknown, field: string, fail: Fail): number {
  if (v === undefined) fail(field, `is required: ${PERIOD_RULE}`);
  try {
    return parseDuration(v);
  } catch (e) {
    return fail(field, (e as Error).message);
  }
}

/** A policy, limit or descriptor name ({@link NAME_PATTERN}). */
export function readName(v: unknown, field: string, fail: Fail): string {
  if (typeof v !== 'string' || !NAME_PATTERN.test(v)) fail(field, `${NAME_RULE} (got ${describeValue(v)})`);
  return v;
}

/**
 * Appends a key or index to a field path: `limits[1]`, `limits[1].period`; keys outside
 * `[A-Za-z0-9_-]` are quoted (`["a.b"]`).
 * @internal shared with the YAML loader.
 */
export function joinPath(prefix: string, key: string | number): string {
  if (typeof key === 'number') return `${prefix}[${key}]`;
  if (/^[A-Za-z0-9_-]+$/.test(key)) return prefix === '' ? key : `${prefix}.${key}`;
  return `${prefix}[${JSON.stringify(key)}]`;
}

/** An object literal (or null-prototype object): not an array, a class instance or null. */
export function isPlainObject(v: unknown): v is Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** An own property only (never an inherited one such as `constructor`); undefined counts as absent. */
export function own(o: Obj, key: string): unknown {
  return Object.hasOwn(o, key) ? o[key] : undefined;
}

/** Fails on the first key of `o` not in `allowed`, naming its path and what `allowed` is for. */
export function rejectUnknownKeys(o: Obj, allowed: readonly string[], prefix: string, what: string, fail: Fail): void {
  for (const key of Object.keys(o)) {
    if (!allowed.includes(key)) fail(joinPath(prefix, key), `unknown key (${what} accepts ${allowed.join(', ')})`);
  }
}
