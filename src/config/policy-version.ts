/**
 * Versions: a policy's (the given `version`, or a hash of its limits and descriptors) and a policy set's (a
 * hash of every compiled policy), the same on every instance for the same rules.
 */
import { createHash } from 'node:crypto';
import { describeValue } from './duration.js';
import type { CompiledDescriptor, CompiledLimit, CompiledPolicy } from './policy-spec.js';
import type { Fail } from './fields.js';

const VERSION_PATTERN = /^[\x21-\x7e]{1,64}$/;

/** The given version as a string, or a content hash of the compiled limits and descriptors. */
export function compileVersion(v: unknown, limits: CompiledLimit[], descriptors: CompiledDescriptor[], fail: Fail): string {
  if (v === undefined) return contentVersion(limits, descriptors);
  if (typeof v === 'number' && Number.isSafeInteger(v)) return String(v + 0);
  if (typeof v === 'string' && VERSION_PATTERN.test(v)) return v;
  return fail('version', `must be an integer or a string of 1 to 64 visible ASCII characters (got ${describeValue(v)})`);
}

/**
 * First 8 hex chars of sha256 over the canonical JSON
 * `{"limits":[[algorithm,limit,periodMs,burst],...],"descriptors":[[name,header],...]}`.
 */
export function contentVersion(limits: readonly CompiledLimit[], descriptors: readonly CompiledDescriptor[]): string {
  const canonical = JSON.stringify({
    limits: limits.map(limitNumbers),
    descriptors: descriptors.map((d) => [d.name, d.header]),
  });
  return createHash('sha256').update(canonical).digest('hex').slice(0, 8);
}

/**
 * A policy set's version: the first 12 hex chars of sha256 over the canonical JSON of every compiled policy
 * in name order, so the same rules give the same version on every instance.
 */
export function policySetVersion(policies: ReadonlyMap<string, CompiledPolicy>): string {
  const names = [...policies.keys()].sort();
  const canonical = JSON.stringify(names.map((n) => canonicalPolicy(policies.get(n)!)));
  return createHash('sha256').update(canonical).digest('hex').slice(0, 12);
}

function canonicalPolicy(p: CompiledPolicy): unknown[] {
  const out: unknown[] = [p.name, p.version, p.versionGiven, p.limits.map((l) => [l.name, ...limitNumbers(l)]),
    p.descriptors.map((d) => [d.name, d.header]), p.guard, p.consistency, p.onStoreError, p.carryOver,
    p.shadow, p.shadowOf, p.allow, p.deny];
  // Appended only when not the defaults, so sets written before these fields keep their versions.
  if (p.descriptors.some((d) => d.from === 'path') || p.authCost !== 1 || p.rls !== null) {
    out.push(p.descriptors.map((d) => d.from), p.authCost, p.rls);
  }
  if (p.onLimit !== undefined) out.push(p.onLimit, p.maxDelayMs);
  if (p.scope !== 'local') out.push(p.scope);
  return out;
}

/** [algorithm, limit, periodMs, burst], plus the calendar unit and time zone of a calendar window. */
export function limitNumbers(l: CompiledLimit): unknown[] {
  const n: unknown[] = [l.algorithm, l.limit, l.periodMs, l.burst];
  if (l.calendar !== undefined) n.push(l.calendar.unit, l.calendar.timeZone);
  return n;
}
