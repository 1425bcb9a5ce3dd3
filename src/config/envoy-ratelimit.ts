/**
 * envoyproxy/ratelimit's configuration format, translated to sluice policies: a team points
 * `sluice serve --config` at the file that service already loads and gets the same numbers over the same
 * gRPC protocol (src/grpc/). Detected by a top-level `domain` key.
 *
 * ```yaml
 * domain: edge
 * descriptors:
 *   - key: remote_address            # key-only: any value, each value counted on its own
 *     rate_limit: { unit: minute, requests_per_unit: 60 }
 *   - key: path
 *     value: /login                   # key and value: this value only
 *     descriptors:                    # nested: matched after the parent entry, in order
 *       - key: remote_address
 *         rate_limit: { unit: second, requests_per_unit: 5, algorithm: gcra }   # algorithm: sluice's extension
 *   - key: internal
 *     rate_limit: { unlimited: true }
 *   - key: beta
 *     rate_limit: { unit: hour, requests_per_unit: 100 }
 *     shadow_mode: true
 *     detailed_metric: true
 * ```
 *
 * Each node with a `rate_limit` becomes one policy whose `rls` route is the node's path of entries
 * (src/grpc/rls.ts matches descriptors against it as envoyproxy/ratelimit does). Numbers: that service counts
 * fixed windows aligned to the Unix epoch (`now / unit * unit`), a month being 30 days and a year 365, so a
 * rule becomes `fixed_window` with `limit = requests_per_unit`, `period = unit`: the same windows, counts and
 * resets. `rate_limit.algorithm` (sluice's own key, which envoyproxy/ratelimit would refuse) picks another
 * algorithm for that rule. `shadow_mode` makes the policy a shadow policy (evaluated, never denies).
 * `detailed_metric` is accepted: each rule is its own policy, so its decisions are already counted per rule in
 * `sluice_decisions_total{policy}`; per-value series (one per remote address...) are not emitted, as their
 * number is unbounded. `unlimited: true` answers OK without a check.
 *
 * Refused, naming the path: `replaces`, `quota_mode`, `value_to_metric`, `share_threshold`, `metadata`,
 * values with `*` (wildcard matching), unknown keys, duplicate composite keys, bad units.
 */
import { createHash } from 'node:crypto';
import { configError } from '../util/errors.js';
import { describeValue } from './duration.js';
import { ALGORITHM_CODES, NAME_PATTERN, type Algorithm, type PolicySpec } from './policy-spec.js';

/** Seconds per envoyproxy/ratelimit unit (its UnitToDivider: a month is 30 days, a year 365). */
export const UNIT_SECONDS: Readonly<Record<'SECOND' | 'MINUTE' | 'HOUR' | 'DAY' | 'WEEK' | 'MONTH' | 'YEAR', number>> = {
  SECOND: 1, MINUTE: 60, HOUR: 3600, DAY: 86_400, WEEK: 604_800, MONTH: 2_592_000, YEAR: 31_536_000,
};

/** True for a document in envoyproxy/ratelimit's format (a mapping with a top-level `domain`). */
export function isEnvoyRateLimitDocument(raw: unknown): boolean {
  return typeof raw === 'object' && raw !== null && !Array.isArray(raw) && Object.hasOwn(raw, 'domain');
}

const NODE_KEYS = ['key', 'value', 'rate_limit', 'descriptors', 'shadow_mode', 'detailed_metric'];
const RATE_LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'algorithm'];
/** envoyproxy/ratelimit keys sluice does not implement, and why (said in the error). */
const UNSUPPORTED: Record<string, string> = {
  replaces: 'is not supported by sluice (every matched rule applies; none replaces another)',
  quota_mode: 'is not supported by sluice',
  value_to_metric: 'is not supported by sluice (per-value metric series are unbounded)',
  share_threshold: 'is not supported by sluice (wildcard values are not supported)',
  metadata: 'is not supported by sluice',
};
const UINT32_MAX = 4_294_967_295;
/** A period long enough for "unlimited" and a limit no check reaches (never consulted: see rls.unlimited). */
const UNLIMITED_LIMIT: PolicySpec = { algorithm: 'fixed_window', limit: Number.MAX_SAFE_INTEGER, period: 1000 };

type Obj = Record<string, unknown>;

/**
 * Translates a document in envoyproxy/ratelimit's format to sluice policy specs (one per rule with a
 * rate_limit, in document order), named after their path (`edge.path_login.remote_address`) when that is a
 * valid policy name, else the path's first characters and a hash of it.
 * @param file the name error messages start with.
 * @throws SluiceError CONFIG `<file>: <path>: <reason>`, path such as `descriptors[1].descriptors[0].rate_limit.unit`.
 */
export function policiesFromEnvoyRateLimit(raw: Obj, file: string): Record<string, PolicySpec> {
  const fail = (at: string, why: string): never => {
    throw configError(file, at, why);
  };
  for (const k of Object.keys(raw)) {
    if (k !== 'domain' && k !== 'descriptors') fail(k, 'unknown key (an envoyproxy/ratelimit config accepts domain, descriptors)');
  }
  const domain = raw.domain;
  if (typeof domain !== 'string' || domain === '') fail('domain', `must be a non-empty string (got ${describeValue(domain)})`);
  const out: Record<string, PolicySpec> = {};
  const walk = (list: unknown, at: string, parents: Array<{ key: string; value?: string }>, namePath: string): void => {
    if (list === undefined || list === null) return;
    if (!Array.isArray(list)) fail(at, `must be a list of descriptors (got ${describeValue(list)})`);
    const seen = new Map<string, number>();
    (list as unknown[]).forEach((n, i) => {
      const here = `${at}[${i}]`;
      if (typeof n !== 'object' || n === null || Array.isArray(n)) fail(here, `must be a mapping {key, value?, rate_limit?, descriptors?} (got ${describeValue(n)})`);
      const node = n as Obj;
      for (const k of Object.keys(node)) {
        if (Object.hasOwn(UNSUPPORTED, k)) fail(`${here}.${k}`, UNSUPPORTED[k]);
        if (!NODE_KEYS.includes(k)) fail(`${here}.${k}`, `unknown key (a descriptor accepts ${NODE_KEYS.join(', ')})`);
      }
      const key = node.key;
      if (typeof key !== 'string' || key === '') fail(`${here}.key`, `must be a non-empty string (got ${describeValue(key)})`);
      const value = node.value;
      if (value !== undefined && value !== null && (typeof value !== 'string' || value === '')) {
        fail(`${here}.value`, `must be a non-empty string when given (got ${describeValue(value)})`);
      }
      if (typeof value === 'string' && value.includes('*')) fail(`${here}.value`, 'wildcard values (*) are not supported by sluice: list the values, or leave value out to match any value');
      const entry = typeof value === 'string' ? { key: key as string, value } : { key: key as string };
      const composite = typeof value === 'string' ? `${key}_${value}` : (key as string);
      const previous = seen.get(composite);
      if (previous !== undefined) fail(here, `duplicate descriptor composite key "${composite}" (also ${at}[${previous}])`);
      seen.set(composite, i);
      const shadow = flag(node.shadow_mode, `${here}.shadow_mode`, fail);
      flag(node.detailed_metric, `${here}.detailed_metric`, fail);
      const path = [...parents, entry];
      const ruleName = `${namePath}.${composite}`;
      if (node.rate_limit !== undefined && node.rate_limit !== null) {
        const spec = ruleSpec(node.rate_limit, `${here}.rate_limit`, fail);
        const name = policyName(ruleName, out);
        const limit = 'unlimited' in spec ? UNLIMITED_LIMIT : spec;
        out[name] = {
          ...limit,
          ...(shadow ? { shadow: true } : {}),
          rls: { domain: domain as string, entries: path, ...('unlimited' in spec ? { unlimited: true } : {}) },
        };
      }
      walk(node.descriptors, `${here}.descriptors`, path, ruleName);
    });
  };
  walk(raw.descriptors, 'descriptors', [], domain as string);
  if (Object.keys(out).length === 0) fail('descriptors', 'has no rule with a rate_limit: sluice needs at least one');
  return out;
}

function flag(v: unknown, at: string, fail: (at: string, why: string) => never): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') fail(at, `must be true or false (got ${describeValue(v)})`);
  return v as boolean;
}

/** One `rate_limit:` mapping as a limit spec, or `{unlimited}`. */
function ruleSpec(v: unknown, at: string, fail: (at: string, why: string) => never): PolicySpec | { unlimited: true } {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(at, `must be a mapping {unit, requests_per_unit} (got ${describeValue(v)})`);
  const r = v as Obj;
  for (const k of Object.keys(r)) {
    if (k === 'replaces') fail(`${at}.${k}`, UNSUPPORTED.replaces);
    if (!RATE_LIMIT_KEYS.includes(k)) fail(`${at}.${k}`, `unknown key (a rate_limit accepts ${RATE_LIMIT_KEYS.join(', ')})`);
  }
  const unlimited = flag(r.unlimited, `${at}.unlimited`, fail);
  const unit = r.unit;
  const units = Object.keys(UNIT_SECONDS).map((u) => u.toLowerCase());
  const unitOk = typeof unit === 'string' && units.includes(unit.toLowerCase());
  if (unlimited) {
    if (unit !== undefined && unit !== null) fail(`${at}.unit`, 'must not be given with unlimited: true');
    for (const k of ['requests_per_unit', 'algorithm']) if (r[k] !== undefined) fail(`${at}.${k}`, 'must not be given with unlimited: true');
    return { unlimited: true };
  }
  if (!unitOk) fail(`${at}.unit`, `must be one of ${units.join(', ')} (got ${describeValue(unit)})`);
  const rpu = r.requests_per_unit;
  if (typeof rpu !== 'number' || !Number.isInteger(rpu) || rpu < 0 || rpu > UINT32_MAX) {
    fail(`${at}.requests_per_unit`, `must be an integer from 0 to ${UINT32_MAX} (got ${describeValue(rpu)})`);
  }
  const algorithm = r.algorithm ?? 'fixed_window';
  // concurrency is leases (acquire, release), which Envoy's rate limit service never asks for
  if (typeof algorithm !== 'string' || !Object.hasOwn(ALGORITHM_CODES, algorithm) || algorithm === 'concurrency') {
    fail(`${at}.algorithm`, `must be one of ${Object.keys(ALGORITHM_CODES).filter((a) => a !== 'concurrency').join(', ')} (got ${describeValue(algorithm)})`);
  }
  const name = r.name;
  if (name !== undefined && (typeof name !== 'string' || !NAME_PATTERN.test(name))) {
    fail(`${at}.name`, `must be 1 to 64 characters of A-Z a-z 0-9 _ . - (got ${describeValue(name)})`);
  }
  const seconds = UNIT_SECONDS[(unit as string).toUpperCase() as keyof typeof UNIT_SECONDS];
  const spec: PolicySpec = { algorithm: algorithm as Algorithm, limit: rpu as number, period: seconds * 1000 };
  if (name !== undefined) return { limits: [{ ...(spec as Required<Pick<PolicySpec, 'algorithm' | 'limit' | 'period'>>), name: name as string }] };
  return spec;
}

/** The rule's path as a policy name when it is one (and not taken), else a readable prefix and a hash. */
function policyName(path: string, taken: Record<string, unknown>): string {
  if (NAME_PATTERN.test(path) && !Object.hasOwn(taken, path)) return path;
  const hash = createHash('sha256').update(path).digest('hex').slice(0, 8);
  return `${path.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 55)}-${hash}`;
}
