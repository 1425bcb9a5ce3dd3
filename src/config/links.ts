/**
 * Shadow mode and a policy's links to the others of its set: its guard (the aggregate every check is also
 * charged to) and, for a shadow candidate, the live policy it shadows (`shadowOf`). The links are checked
 * once the whole set is compiled.
 */
import { describeValue } from './duration.js';
import { isConcurrency, type CompiledPolicy } from './policy-spec.js';
import type { Fail } from './fields.js';

export function readShadow(v: unknown, guard: string | null, fail: Fail): boolean {
  if (v === undefined || v === false) return false;
  if (v !== true) fail('shadow', `must be true or false (got ${describeValue(v)})`);
  if (guard !== null) fail('guard', 'a shadow policy cannot have a guard: its admitted checks would spend the live guard\'s tokens');
  return true;
}

export function readShadowOf(v: unknown, shadow: boolean, fail: Fail): string | null {
  if (v === undefined) return null;
  if (typeof v !== 'string') fail('shadowOf', `must be the name of a live policy (got ${describeValue(v)})`);
  if (!shadow) fail('shadowOf', 'requires shadow: true (a candidate never denies)');
  return v;
}

export function readGuardName(v: unknown, fail: Fail): string | null {
  if (v === undefined) return null;
  if (typeof v !== 'string') fail('guard', `must be the name of another policy (got ${describeValue(v)})`);
  return v;
}

/** A guard names another policy of the same map that has no guard itself. */
export function checkGuard(policy: CompiledPolicy, all: Map<string, CompiledPolicy>, fail: Fail): void {
  const guard = policy.guard;
  if (guard === null) return;
  if (guard === policy.name) fail('guard', 'a policy cannot guard itself');
  const target = all.get(guard);
  if (target === undefined) fail('guard', `no policy named ${describeValue(guard)} in policies`);
  if (target.guard !== null) {
    fail('guard', `policy "${guard}" has a guard of its own ("${target.guard}"); a guard cannot itself be guarded`);
  }
  if (target.consistency !== policy.consistency) {
    fail('guard', `policy "${guard}" keeps its state ${target.consistency}, this one ${policy.consistency}: a check and its guard must be decided in one place`);
  }
  if (target.shadow) fail('guard', `policy "${guard}" is a shadow policy: a guard must be live (a shadow never denies)`);
  if (isConcurrency(target)) fail('guard', `policy "${guard}" is a concurrency policy (leases, acquired and released): a guard is checked`);
}

/**
 * A candidate (`shadowOf`) names a live policy of the same map, and can derive its key from the live check's:
 * it has no descriptors (it takes the live check's whole key), or each of its descriptors is one of the live
 * policy's (its key is those values, taken from the live check's key, in the candidate's order).
 */
export function checkShadowOf(policy: CompiledPolicy, all: Map<string, CompiledPolicy>, fail: Fail): void {
  const live = policy.shadowOf;
  if (live === null) return;
  if (live === policy.name) fail('shadowOf', 'a policy cannot shadow itself');
  const target = all.get(live);
  if (target === undefined) fail('shadowOf', `no policy named ${describeValue(live)} in policies`);
  if (target.shadow) fail('shadowOf', `policy "${live}" is itself a shadow policy: a candidate shadows a live policy`);
  if (isConcurrency(target)) fail('shadowOf', `policy "${live}" is a concurrency policy (leases, never checked): a candidate shadows a checked policy`);
  const liveNames = target.descriptors.map((d) => d.name);
  const missing = policy.descriptors.filter((d) => !liveNames.includes(d.name)).map((d) => d.name);
  if (missing.length > 0) {
    const has = liveNames.length === 0 ? 'has no descriptors' : `has descriptors ${liveNames.join(', ')}`;
    fail('shadowOf', `this policy's key cannot be derived from policy "${live}"'s checks: descriptor${missing.length > 1 ? 's' : ''} ${missing.join(', ')} not among the live policy's (it ${has}); use a subset of them, or none (the live check's whole key)`);
  }
}
