import type { CheckRequest, Decision } from '../types.js';
import { invalidArgument } from '../util/errors.js';
import { describe } from '../keys/derive.js';

/** Fields a check may carry in a JSON body; anything else is refused by name. */
const CHECK_FIELDS = new Set(['policy', 'key', 'descriptors', 'cost']);

/**
 * A check from a query string: `policy`, `key` (or descriptor values as `name=value`), `cost` (default 1).
 * Percent-escapes must decode to well-formed UTF-8: a decoder that replaced bad bytes with U+FFFD would make
 * distinct keys collide.
 * @throws SluiceError INVALID_ARGUMENT naming the parameter.
 */
export function checkFromQuery(query: string): CheckRequest {
  // uWS hands over the raw query decoded as UTF-8 with bad bytes replaced by U+FFFD, so raw 0xFF and raw 0xFE
  // would be one key. A raw U+FFFD is no valid URL either (bytes outside ASCII must be percent-encoded).
  if (query.includes('\uFFFD')) throw invalidArgument('query', 'is not well-formed UTF-8 (percent-encode bytes outside ASCII)');
  const req: CheckRequest = { policy: '', cost: 1 };
  const seen = new Set<string>();
  let descriptors: Record<string, string> | undefined;
  for (const pair of query === '' ? [] : query.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = decodeParam(eq < 0 ? pair : pair.slice(0, eq), 'query');
    const value = decodeParam(eq < 0 ? '' : pair.slice(eq + 1), name);
    if (seen.has(name)) throw invalidArgument(name, 'is given more than once');
    seen.add(name);
    if (name === 'policy') req.policy = value;
    else if (name === 'key') req.key = value;
    else if (name === 'cost') req.cost = costFromString(value);
    else (descriptors ??= Object.create(null) as Record<string, string>)[name] = value;
  }
  if (!seen.has('policy')) throw invalidArgument('policy', 'is required');
  if (descriptors !== undefined) req.descriptors = descriptors;
  return req;
}

/** application/x-www-form-urlencoded decoding (`+` is a space) that refuses malformed UTF-8. */
function decodeParam(s: string, field: string): string {
  try {
    return decodeURIComponent(s.includes('+') ? s.replace(/\+/g, ' ') : s);
  } catch {
    throw invalidArgument(field, 'is not well-formed percent-encoded UTF-8');
  }
}

function costFromString(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n)) {
    throw invalidArgument('cost', `must be a non-negative safe integer (got ${describe(v)})`);
  }
  return n;
}

/**
 * A check from a parsed JSON object: `{policy, key | descriptors, cost?}` (cost defaults to 1 when absent;
 * present but not a non-negative safe integer is an error). `at` names the item in a batch (`checks[3]`).
 * @throws SluiceError INVALID_ARGUMENT naming the field (with its batch path).
 */
export function checkFromJson(v: unknown, at?: string): CheckRequest {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw invalidArgument(at ?? 'body', 'must be a JSON object');
  }
  const prefix = at === undefined ? '' : at + '.';
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!CHECK_FIELDS.has(k)) throw invalidArgument(prefix + k, 'is not a field of a check (policy, key, descriptors, cost)');
  }
  if (!('policy' in o)) throw invalidArgument(prefix + 'policy', 'is required');
  return { ...(o as object), cost: 'cost' in o ? o.cost : 1 } as CheckRequest;
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A request body as text. Malformed UTF-8 is refused rather than replaced with U+FFFD, which would make keys
 * that differ only in bad bytes one key.
 * @throws SluiceError INVALID_ARGUMENT naming `body`.
 */
export function bodyText(body: Uint8Array): string {
  try {
    return UTF8.decode(body);
  } catch {
    throw invalidArgument('body', 'is not well-formed UTF-8');
  }
}

/** A decision as JSON, built without an intermediate object. */
export function decisionJson(d: Decision): string {
  const reason = d.reason === undefined ? '' : `,"reason":${JSON.stringify(d.reason)}`;
  const degraded = d.degraded === true ? ',"degraded":true' : '';
  const stale = d.stalenessMs === undefined ? '' : `,"stalenessMs":${d.stalenessMs}`;
  return `{"allowed":${d.allowed},"limit":${d.limit},"remaining":${d.remaining},"resetAfterMs":${d.resetAfterMs},` +
    `"retryAfterMs":${d.retryAfterMs},"policy":${JSON.stringify(d.policy)}${reason}${degraded}${stale}}`;
}

