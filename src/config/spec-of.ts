/**
 * A compiled policy written back as a spec: what `GET /v1/policies` shows and `PUT /v1/policies` takes back.
 * Compiling the spec again gives the same compiled policy, field for field (test/unit/config/spec-of.test.ts
 * checks that over every field and every shipped config), so a read-modify-write of the policy set changes
 * only what the caller changed.
 */
import { calendarText } from './limits.js';
import type { CompiledDescriptor, CompiledLimit, CompiledPolicy, DescriptorSpec, LimitSpec, PolicySpec, RlsRouteSpec } from './policy-spec.js';

/**
 * The spec of `p`: one limit inline (named as its policy) or a `limits` array; periods in ms, except a
 * calendar window's (`1d`, `1w`, `1mo` with its `timeZone`); defaults (consistency local, onStoreError local,
 * authCost 1, scope local, a derived version) left out.
 */
export function policySpecOf(p: CompiledPolicy): PolicySpec {
  const spec: PolicySpec = {};
  const inline = p.limits.length === 1 && p.limits[0].name === p.name;
  if (inline) Object.assign(spec, limitSpecOf(p.limits[0]));
  // a concurrency limit is always inline (the loader refuses it in limits), so each listed limit has a period
  else spec.limits = p.limits.map((l, i) => ({ ...limitSpecOf(l), ...(l.name === `${p.name}#${i}` ? {} : { name: l.name }) }) as LimitSpec);
  if (p.descriptors.length > 0) spec.descriptors = p.descriptors.map(descriptorSpecOf);
  if (p.versionGiven) spec.version = p.version;
  if (p.guard !== null) spec.guard = p.guard;
  if (p.consistency !== 'local') spec.consistency = p.consistency;
  if (p.lease !== null) spec.lease = { ...p.lease };
  if (p.onStoreError !== 'local') spec.onStoreError = p.onStoreError;
  if (p.carryOver) spec.carryOver = true;
  if (p.onLimit === 'delay') {
    spec.onLimit = 'delay';
    if (p.maxDelayMs !== undefined) spec.maxDelayMs = p.maxDelayMs;
  }
  if (p.shadow) spec.shadow = true;
  if (p.shadowOf !== null) spec.shadowOf = p.shadowOf;
  if (p.allow.length > 0) spec.allow = [...p.allow];
  if (p.deny.length > 0) spec.deny = [...p.deny];
  if (p.authCost !== 1) spec.authCost = p.authCost;
  if (p.rls !== null) spec.rls = rlsSpecOf(p.rls);
  if (p.scope !== 'local') spec.scope = p.scope;
  return spec;
}

/** A limit's fields: `leaseTtl` instead of `period` and `burst` for concurrency. */
type LimitFields = Omit<LimitSpec, 'name' | 'period'> & { period?: LimitSpec['period'] };

function limitSpecOf(l: CompiledLimit): LimitFields {
  if (l.algorithm === 'concurrency') return { algorithm: l.algorithm, limit: l.limit, leaseTtl: l.periodMs };
  // a calendar window's periodMs is its unit's nominal length, for display: the unit and zone are the limit
  if (l.calendar !== undefined) {
    return { algorithm: l.algorithm, limit: l.limit, period: calendarText(l.calendar.unit), timeZone: l.calendar.timeZone, burst: l.burst };
  }
  return { algorithm: l.algorithm, limit: l.limit, period: l.periodMs, burst: l.burst };
}

/** A name when /v1/auth reads it from the query (the default), else the object that says where from. */
function descriptorSpecOf(d: CompiledDescriptor): DescriptorSpec {
  if (d.header !== null) return { name: d.name, header: d.header };
  return d.from === 'query' ? d.name : { name: d.name, from: d.from };
}

function rlsSpecOf(r: NonNullable<CompiledPolicy['rls']>): RlsRouteSpec {
  return {
    domain: r.domain,
    entries: r.entries.map((e) => (e.value === null ? { key: e.key } : { key: e.key, value: e.value })),
    ...(r.unlimited ? { unlimited: true } : {}),
  };
}
