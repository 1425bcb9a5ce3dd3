/**
 * Envoy's rate limit service (envoy.service.ratelimit.v3, the protocol envoyproxy/ratelimit and Limitador
 * speak), as a mapping between its messages and sluice checks. No I/O here: {@link planRequest} turns a
 * RateLimitRequest into one check per descriptor (or a fixed status), {@link buildResponse} turns the
 * decisions into a RateLimitResponse. The transport is src/grpc/server.ts.
 *
 * Routing (per domain, per descriptor), the rules of envoyproxy/ratelimit's config lookup:
 * - a policy with an `rls` route (`{domain, entries}`, see PolicySpec.rls) matches a descriptor whose entries
 *   are, in order, its entries: `{key, value}` matches that pair exactly, `{key}` any value of that key. At
 *   each level an exact pair wins over a key-only entry; there is no backtracking. The key is the
 *   descriptor's values, escaped and joined by `:` as descriptor tuples are (so each value counts on its own).
 * - else, domain = a policy name without an rls route, whose descriptors are exactly the entries' keys: the
 *   check carries those descriptors (the same counter as `/v1/check?policy=<domain>&<key>=<value>...`).
 * - a descriptor that matches nothing is OK with no limit (Envoy's protocol: the service has no rule for it).
 *
 * Cost: the descriptor's `hits_addend` when set (0 allowed: a look that spends nothing), else the request's
 * `hits_addend`, 0 meaning 1 (as Envoy sends it).
 */
import type { CheckRequest, Decision } from '../types/decision.js';
import type { CompiledLimit, CompiledPolicy } from '../config/policy-spec.js';
import { boundedKey, escapePart } from '../keys/derive.js';
import { UNIT_SECONDS } from '../config/envoy-ratelimit.js';
import { invalidArgument } from '../util/errors.js';
import { rateLimitHeader, rateLimitPolicyHeader, retryAfterSeconds } from '../wire/headers.js';

/** A RateLimitRequest as @grpc/proto-loader decodes it (keepCase, longs as strings, defaults filled). */
export interface RlsRequest {
  domain: string;
  descriptors: Array<{
    entries: Array<{ key: string; value: string }>;
    limit: { requests_per_unit: number; unit: string } | null;
    hits_addend: { value: string } | null;
  }>;
  hits_addend: number;
}

export type RlsCode = 'OK' | 'OVER_LIMIT';
export type RlsUnit = 'UNKNOWN' | 'SECOND' | 'MINUTE' | 'HOUR' | 'DAY' | 'WEEK' | 'MONTH' | 'YEAR';

/** One DescriptorStatus, as the encoder takes it. */
export interface RlsStatus {
  code: RlsCode;
  current_limit: { name: string; requests_per_unit: number; unit: RlsUnit } | null;
  limit_remaining: number;
  duration_until_reset: { seconds: number; nanos: number } | null;
}

export interface RlsResponse {
  overall_code: RlsCode;
  statuses: RlsStatus[];
  response_headers_to_add: Array<{ key: string; value: string }>;
}

/** What one request descriptor comes to: a check to decide, or a status fixed without one. */
export type DescriptorPlan =
  | { kind: 'check'; check: CheckRequest; policy: CompiledPolicy }
  | { kind: 'unmatched' }
  | { kind: 'unlimited' };


const UINT32_MAX = 4_294_967_295;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

interface RouteNode {
  /** `key\0value` → child. */
  exact: Map<string, RouteNode>;
  /** key → child (key-only entries). */
  any: Map<string, RouteNode>;
  policy: CompiledPolicy | null;
}

/** The routing of one policy set: per domain, the tree of rls routes; and every limit by name. */
export interface RouteTable {
  domains: Map<string, RouteNode>;
  policies: ReadonlyMap<string, CompiledPolicy>;
  /** Limit name → the limit (a decision names its binding limit). */
  limits: Map<string, CompiledLimit>;
  /** Policy name → its RateLimit-Policy field value. */
  policyHeaders: Map<string, string>;
}

const node = (): RouteNode => ({ exact: new Map(), any: new Map(), policy: null });

/**
 * Builds the routing of a policy set (once per set: the caller caches it by identity).
 * Two policies with the same route cannot both be reached: the first in the set wins, as the config
 * translator never writes two (it refuses duplicate composite keys).
 */
export function routeTable(policies: ReadonlyMap<string, CompiledPolicy>): RouteTable {
  const domains = new Map<string, RouteNode>();
  const limits = new Map<string, CompiledLimit>();
  const policyHeaders = new Map<string, string>();
  for (const p of policies.values()) {
    for (const l of p.limits) limits.set(l.name, l);
    policyHeaders.set(p.name, rateLimitPolicyHeader(p, p.guard === null ? undefined : policies.get(p.guard)));
    if (p.rls === null) continue;
    let n: RouteNode | undefined = domains.get(p.rls.domain);
    if (n === undefined) domains.set(p.rls.domain, (n = node()));
    for (const e of p.rls.entries) {
      const map: Map<string, RouteNode> = e.value === null ? n.any : n.exact;
      const k = e.value === null ? e.key : `${e.key}\0${e.value}`;
      let next: RouteNode | undefined = map.get(k);
      if (next === undefined) map.set(k, (next = node()));
      n = next;
    }
    n.policy ??= p;
  }
  return { domains, policies, limits, policyHeaders };
}

/**
 * Validates a request and plans one check per descriptor.
 * @param maxDescriptors most descriptors one request may carry.
 * @throws SluiceError INVALID_ARGUMENT naming the field (`domain`, `descriptors[1].entries[0].value`,
 *   `descriptors[0].hits_addend`, `descriptors[2].limit`...).
 */
export function planRequest(req: RlsRequest, table: RouteTable, maxDescriptors: number): DescriptorPlan[] {
  if (req.domain === '') throw invalidArgument('domain', 'is required');
  const ds = req.descriptors;
  if (ds.length === 0) throw invalidArgument('descriptors', 'must hold at least one descriptor');
  if (ds.length > maxDescriptors) throw invalidArgument('descriptors', `at most ${maxDescriptors} per request (got ${ds.length})`);
  const requestCost = req.hits_addend === 0 ? 1 : req.hits_addend;
  const root = table.domains.get(req.domain);
  const plans: DescriptorPlan[] = [];
  for (let i = 0; i < ds.length; i++) {
    const d = ds[i];
    const at = `descriptors[${i}]`;
    if (d.entries.length === 0) throw invalidArgument(`${at}.entries`, 'must hold at least one entry');
    for (let j = 0; j < d.entries.length; j++) {
      const e = d.entries[j];
      if (e.key === '') throw invalidArgument(`${at}.entries[${j}].key`, 'must not be empty');
      if (e.value === '') throw invalidArgument(`${at}.entries[${j}].value`, 'must not be empty');
    }
    if (d.limit !== null) {
      throw invalidArgument(`${at}.limit`, 'limit overrides are not supported: the limit is the one sluice is configured with (remove the route\'s limit override)');
    }
    const cost = d.hits_addend === null ? requestCost : hitsOf(d.hits_addend.value, `${at}.hits_addend`);
    plans.push(planOne(d.entries, req.domain, root, table, cost));
  }
  return plans;
}

function hitsOf(v: string, field: string): number {
  const n = BigInt(v);
  if (n > MAX_SAFE) throw invalidArgument(field, `must be at most ${MAX_SAFE} (got ${v})`);
  return Number(n);
}

function planOne(entries: RlsRequest['descriptors'][0]['entries'], domain: string, root: RouteNode | undefined,
  table: RouteTable, cost: number): DescriptorPlan {
  if (root !== undefined) {
    let n: RouteNode | undefined = root;
    for (const e of entries) {
      n = n.exact.get(`${e.key}\0${e.value}`) ?? n.any.get(e.key);
      if (n === undefined) break;
    }
    const p = n?.policy;
    if (p != null) {
      if (p.rls!.unlimited) return { kind: 'unlimited' };
      return { kind: 'check', policy: p, check: { policy: p.name, key: boundedKey(entries.map((e) => escapePart(e.value)).join(':')), cost } };
    }
    return { kind: 'unmatched' };
  }
  const p = table.policies.get(domain);
  if (p === undefined || p.rls !== null || p.descriptors.length !== entries.length || p.descriptors.length === 0) return { kind: 'unmatched' };
  const descriptors = Object.create(null) as Record<string, string>;
  for (const e of entries) {
    if (!p.descriptors.some((x) => x.name === e.key) || Object.hasOwn(descriptors, e.key)) return { kind: 'unmatched' };
    descriptors[e.key] = e.value;
  }
  // the key the descriptors join to, in the policy's order (keyOf's form, which a descriptor policy takes as
  // its key: joined once here), as its digest when it is too long
  const key = boundedKey(p.descriptors.map((x) => escapePart(descriptors[x.name])).join(':'));
  return { kind: 'check', policy: p, check: { policy: p.name, key, cost } };
}

/** A period in ms as an RLS unit, when it is exactly one; else UNKNOWN (requests_per_unit is then per period). */
export function unitOf(periodMs: number): RlsUnit {
  for (const [unit, s] of Object.entries(UNIT_SECONDS)) if (s * 1000 === periodMs) return unit as RlsUnit;
  return 'UNKNOWN';
}

const UNMATCHED: RlsStatus = { code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null };
const UNLIMITED: RlsStatus = { code: 'OK', current_limit: null, limit_remaining: UINT32_MAX, duration_until_reset: null };

/**
 * The response for `plans` decided as `decisions` (same index; undefined where no check was made).
 * - each status: OVER_LIMIT when denied, its binding limit as current_limit (`requests_per_unit` = L, the
 *   unit of its period, `name` = the limit's name), limit_remaining, duration_until_reset (exact ms);
 * - overall_code: OVER_LIMIT when any status is;
 * - response_headers_to_add: `RateLimit-Policy` and `RateLimit` (one list item per decided descriptor), and on
 *   OVER_LIMIT `Retry-After` = the longest wait among the denied descriptors (all must pass), left out when one
 *   of them can never pass. Same fields and rounding as the HTTP front (src/wire/headers.ts);
 * - `Sluice-Degraded` when Redis did not decide some descriptor (a strict policy's store failed, so its
 *   onStoreError did): each rule that decided one (`open`, `closed`, `local`), once, in descriptor order. The
 *   protocol has no field for it, and a degraded answer must say so on every transport (README "Failure
 *   behaviour"), as /v1/check's and /v1/auth's header of the same name does.
 */
export function buildResponse(plans: DescriptorPlan[], decisions: Array<Decision | undefined>, table: RouteTable): RlsResponse {
  const statuses: RlsStatus[] = [];
  const rateLimit: string[] = [];
  const policyFields: string[] = [];
  let over = false;
  let retryMs = 0;
  let never = false;
  let degraded = '';
  for (let i = 0; i < plans.length; i++) {
    const plan = plans[i];
    if (plan.kind !== 'check') {
      statuses.push(plan.kind === 'unlimited' ? UNLIMITED : UNMATCHED);
      continue;
    }
    const d = decisions[i]!;
    const limit = table.limits.get(d.policy);
    statuses.push({
      code: d.allowed ? 'OK' : 'OVER_LIMIT',
      current_limit: {
        name: d.policy, requests_per_unit: Math.min(d.limit, UINT32_MAX), unit: limit === undefined ? 'UNKNOWN' : unitOf(limit.periodMs),
      },
      limit_remaining: Math.min(d.remaining, UINT32_MAX),
      duration_until_reset: { seconds: Math.floor(d.resetAfterMs / 1000), nanos: (d.resetAfterMs % 1000) * 1_000_000 },
    });
    rateLimit.push(rateLimitHeader(d, limit));
    const field = table.policyHeaders.get(plan.policy.name);
    if (field !== undefined && !policyFields.includes(field)) policyFields.push(field);
    if (d.degraded === true) {
      const rule = d.degradedBy ?? 'local';
      if (!degraded.split(', ').includes(rule)) degraded = degraded === '' ? rule : `${degraded}, ${rule}`;
    }
    if (!d.allowed) {
      over = true;
      if (d.retryAfterMs === null) never = true;
      else retryMs = Math.max(retryMs, d.retryAfterMs);
    }
  }
  const headers: Array<{ key: string; value: string }> = [];
  if (policyFields.length > 0) headers.push({ key: 'RateLimit-Policy', value: policyFields.join(', ') });
  if (rateLimit.length > 0) headers.push({ key: 'RateLimit', value: rateLimit.join(', ') });
  if (over && !never) headers.push({ key: 'Retry-After', value: String(retryAfterSeconds(retryMs)) });
  if (degraded !== '') headers.push({ key: 'Sluice-Degraded', value: degraded });
  return { overall_code: over ? 'OVER_LIMIT' : 'OK', statuses, response_headers_to_add: headers };
}
