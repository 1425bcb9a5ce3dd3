/**
 * Assertions for hot loops: property tests and case tables that check every one of tens of thousands of
 * decisions. vitest's expect() costs microseconds per call before it compares anything (it rebuilds its
 * state object on every call, then chains chai's proxies), which was about a third of such a test's CPU.
 * These compare first, cheaply, and call expect only when the comparison fails, so a failure is reported by
 * expect itself with the same message; a passing check has asserted exactly what expect would have.
 *
 * Messages are thunks: building a "call #i (t=..., key=...)" string for every passing check was a cost too.
 */
import { expect } from 'vitest';
import type { Decision } from '../../src/types/decision.js';

/** A message, or a function that builds it (only called when the check fails). */
export type Message = string | (() => string);

const text = (m: Message): string => (typeof m === 'string' ? m : m());

/** `expect(actual, message).toBe(expected)`, with expect called only if `Object.is(actual, expected)` is false. */
export function checkBe(actual: unknown, expected: unknown, message: Message): void {
  if (!Object.is(actual, expected)) expect(actual, text(message)).toBe(expected);
}

/** `expect(cond, message).toBe(true)`, with expect called only if `cond` is not true. */
export function checkTrue(cond: boolean, message: Message): void {
  if (cond !== true) expect(cond, text(message)).toBe(true);
}

/**
 * `expect(actual, message).toStrictEqual(expected)`. Plain objects whose values are all primitives (a
 * decision's fields) are compared here, key set and Object.is per value, as toStrictEqual compares them;
 * anything else (nested objects, arrays, class instances, symbol keys), and any difference, goes to expect.
 */
export function checkStrictEqual(actual: unknown, expected: unknown, message: Message): void {
  if (!flatEqual(actual, expected)) expect(actual, text(message)).toStrictEqual(expected);
}

function flatEqual(a: unknown, b: unknown): boolean {
  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null) {
    return typeof a !== 'object' && typeof b !== 'object' && Object.is(a, b);
  }
  if (Object.getPrototypeOf(a) !== Object.prototype || Object.getPrototypeOf(b) !== Object.prototype) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  if (Object.getOwnPropertySymbols(a).length !== 0 || Object.getOwnPropertySymbols(b).length !== 0) return false;
  for (const k of ka) {
    if (!Object.hasOwn(b, k)) return false;
    const x = (a as Record<string, unknown>)[k];
    const y = (b as Record<string, unknown>)[k];
    if ((typeof x === 'object' && x !== null) || (typeof y === 'object' && y !== null) || typeof x === 'function' || typeof y === 'function') return false;
    if (!Object.is(x, y)) return false;
  }
  return true;
}

/** A decision in a few words, for comparing runs of them: `allow r=3`, `deny r=0 degraded:closed`. */
export function brief(d: Pick<Decision, 'allowed' | 'remaining' | 'degraded' | 'degradedBy'>): string {
  return `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded ? ` degraded:${d.degradedBy}` : ''}`;
}
