/**
 * Policies: validation and compilation to the numbers the engine runs (algorithm code, limit, period in ms,
 * burst). One set of rules serves the library (`createLimiter({policies})`, see {@link compilePolicies}) and
 * the YAML policies file (`load.ts`, through {@link compilePoliciesWith}), so both reject the same inputs
 * with the same reasons; only the prefix naming the place differs.
 *
 * This file compiles a set: each policy, then the links between them, then freezes it. Each job lives in its
 * own file, and its users import it from there: the model, spec and compiled shapes (policy-spec.ts), limits
 * (limits.ts), consistency, lease, scope, carryOver and onLimit (modes.ts), descriptors, auth cost and RLS
 * route (descriptors.ts), shadow mode, guard and shadowOf (links.ts), allow and deny lists (list-entry.ts),
 * versions (policy-version.ts), field reading (fields.ts).
 */
import { configError, SluiceError, configSourceError, policiesError } from '../util/errors.js';
import { describeValue } from './duration.js';
import { readList } from './list-entry.js';
import { MAX_TOTAL_LIMITS, NAME_PATTERN, type CompiledPolicy, type Consistency, type StoreErrorRule } from './policy-spec.js';
import { NAME_RULE, isPlainObject, own, readChoice, rejectUnknownKeys, type Fail } from './fields.js';
import { INLINE_KEYS, compileLimits } from './limits.js';
import {
  checkConcurrencyPolicy, checkLeasable, checkLuaExactness, checkSyncable, readCarryOver, readLease, readOnLimit, readScope,
} from './modes.js';
import { compileDescriptors, readAuthCost, readRlsRoute } from './descriptors.js';
import { checkGuard, checkShadowOf, readGuardName, readShadow, readShadowOf } from './links.js';
import { compileVersion } from './policy-version.js';

/** Where a policy error is: `policy` null = the `policies` object itself; `field` null = the whole policy. */
export interface PolicyErrorSite {
  policy: string | null;
  /** Path inside the policy: `period`, `limits[1].period`, `descriptors[0].header`... */
  field: string | null;
}

/** Turns a failed rule into a thrown error; never returns. */
export type PolicyErrorReporter = (site: PolicyErrorSite, why: string) => never;

const POLICY_KEYS = [...INLINE_KEYS, 'limits', 'descriptors', 'version', 'guard', 'consistency', 'lease', 'onStoreError', 'carryOver',
  'shadow', 'shadowOf', 'allow', 'deny', 'authCost', 'rls', 'scope', 'onLimit', 'maxDelayMs'];

const CONSISTENCIES: readonly Consistency[] = ['local', 'strict', 'sync', 'lease'];
const STORE_ERROR_RULES: readonly StoreErrorRule[] = ['open', 'closed', 'local'];

/**
 * Validates and compiles the library's `policies` option.
 *
 * @param policies a plain object mapping policy names to {@link PolicySpec}s.
 * @returns the compiled policies by name, in the object's key order.
 * @throws SluiceError code CONFIG whose message names the policy and the field, e.g.
 *   `policy "tenantA": period: must be a positive integer of ms or a duration string such as "1m" (got -1000)`
 *   (`field` is the path inside the policy: `period`, `limits[1].burst`...). Errors about the `policies`
 *   object itself read `policies: ...`.
 */
export function compilePolicies(policies: unknown): Map<string, CompiledPolicy> {
  return compilePoliciesWith(policies, throwLibraryError);
}

function throwLibraryError(site: PolicyErrorSite, why: string): never {
  if (site.policy === null) throw policiesError(why);
  if (site.field === null) throw configSourceError(`policy "${site.policy}"`, why);
  throw configError(`policy "${site.policy}"`, site.field, why);
}

/**
 * {@link compilePolicies} with the error formatting left to `report` (the YAML loader prefixes file and
 * document path). Rules run in a fixed order, so the first error reported is deterministic.
 * @internal
 */
export function compilePoliciesWith(policies: unknown, report: PolicyErrorReporter): Map<string, CompiledPolicy> {
  const top: Fail = (_field, why) => report({ policy: null, field: null }, why);
  if (!isPlainObject(policies)) top(null, `must be an object mapping policy names to policies (got ${describeValue(policies)})`);
  const names = Object.keys(policies);
  if (names.length === 0) top(null, 'must define at least one policy (got an empty object)');
  for (const name of names) {
    if (!NAME_PATTERN.test(name)) top(null, `invalid policy name ${describeValue(name)}: ${NAME_RULE}`);
  }
  const failFor = (policy: string): Fail => (field, why) => report({ policy, field }, why);
  const compiled = new Map<string, CompiledPolicy>();
  let total = 0;
  for (const name of names) {
    const policy = compilePolicy(name, policies[name], failFor(name));
    total += policy.limits.length;
    compiled.set(name, policy);
  }
  if (total > MAX_TOTAL_LIMITS) top(null, `too many limits: ${total} in total, at most ${MAX_TOTAL_LIMITS} across all policies`);
  for (const policy of compiled.values()) checkGuard(policy, compiled, failFor(policy.name));
  for (const policy of compiled.values()) checkShadowOf(policy, compiled, failFor(policy.name));
  for (const policy of compiled.values()) deepFreeze(policy);
  COMPILED.add(compiled);
  return compiled;
}

/** Maps made by this module: createLimiter trusts a Map of policies only if it is one of these. */
const COMPILED = new WeakSet<ReadonlyMap<string, CompiledPolicy>>();

/**
 * A structured clone of a Map that compilePolicies produced in another thread of this process (an HTTP front
 * thread's policies, src/server/threads.ts): frozen again and trusted as that Map was.
 */
export function adoptCompiled(m: Map<string, CompiledPolicy>): ReadonlyMap<string, CompiledPolicy> {
  for (const policy of m.values()) deepFreeze(policy);
  COMPILED.add(m);
  return m;
}

/** True for a Map that compilePolicies (or the config loader) produced. */
export function isCompiled(m: ReadonlyMap<string, CompiledPolicy>): boolean {
  return COMPILED.has(m);
}

function compilePolicy(name: string, raw: unknown, fail: Fail): CompiledPolicy {
  if (!isPlainObject(raw)) fail(null, `must be an object (got ${describeValue(raw)})`);
  rejectUnknownKeys(raw, POLICY_KEYS, '', 'a policy', fail);
  const limits = compileLimits(name, raw, fail);
  const descriptors = compileDescriptors(own(raw, 'descriptors'), fail);
  const version = compileVersion(own(raw, 'version'), limits, descriptors, fail);
  const guard = readGuardName(own(raw, 'guard'), fail);
  const consistency = readChoice(own(raw, 'consistency'), 'consistency', CONSISTENCIES, 'local', fail);
  const leases = limits.some((l) => l.algorithm === 'concurrency');
  if (leases) checkConcurrencyPolicy(raw, limits, consistency, fail);
  const onStoreError = readChoice(own(raw, 'onStoreError'), 'onStoreError', STORE_ERROR_RULES, leases ? 'closed' : 'local', fail);
  if (consistency !== 'local') checkLuaExactness(limits, own(raw, 'limits') !== undefined, fail);
  if (consistency === 'sync') checkSyncable(limits, own(raw, 'limits') !== undefined, fail);
  if (consistency === 'sync' && limits.some((l) => l.algorithm === 'sliding_log')) {
    fail('consistency', 'sliding_log cannot be merged in consistency sync (a log is not a sum of deltas): use local or strict');
  }
  if (consistency === 'lease') checkLeasable(limits, own(raw, 'limits') !== undefined, fail);
  const lease = readLease(own(raw, 'lease'), consistency, fail);
  const carryOver = readCarryOver(own(raw, 'carryOver'), consistency, limits, fail);
  const shadow = readShadow(own(raw, 'shadow'), guard, fail);
  const shadowOf = readShadowOf(own(raw, 'shadowOf'), shadow, fail);
  const allow = readList(own(raw, 'allow'), 'allow', fail);
  const deny = readList(own(raw, 'deny'), 'deny', fail);
  const authCost = readAuthCost(own(raw, 'authCost'), fail);
  const rls = readRlsRoute(own(raw, 'rls'), descriptors, fail);
  const scope = readScope(own(raw, 'scope'), consistency, limits, fail);
  const maxDelayMs = readOnLimit(own(raw, 'onLimit'), own(raw, 'maxDelayMs'), limits, descriptors, consistency, shadow, fail);
  const compiled: CompiledPolicy = {
    name, version, limits, descriptors, guard, consistency, lease, onStoreError, versionGiven: own(raw, 'version') !== undefined, carryOver,
    shadow, shadowOf, allow, deny, authCost, rls, scope,
  };
  // only on a policy that delays, so every other compiled policy keeps its shape (and its set's version)
  if (maxDelayMs > 0) Object.assign(compiled, { onLimit: 'delay', maxDelayMs });
  return compiled;
}

function deepFreeze(policy: CompiledPolicy): void {
  for (const limit of policy.limits) {
    if (limit.calendar !== undefined) Object.freeze(limit.calendar);
    Object.freeze(limit);
  }
  for (const descriptor of policy.descriptors) Object.freeze(descriptor);
  if (policy.lease !== null) Object.freeze(policy.lease);
  if (policy.rls !== null) {
    for (const e of policy.rls.entries) Object.freeze(e);
    Object.freeze(policy.rls.entries);
    Object.freeze(policy.rls);
  }
  Object.freeze(policy.limits);
  Object.freeze(policy.descriptors);
  Object.freeze(policy.allow);
  Object.freeze(policy.deny);
  Object.freeze(policy);
}
