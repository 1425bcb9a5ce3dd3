import type { CheckRequest, Decision } from '../types.js';
import { invalidArgument } from '../util/errors.js';
import { describe } from '../keys/derive.js';

/** Fields a check may carry in a JSON body; anything else is refused by name. */
const CHECK_FIELDS = new Set(['policy', 'key', 'descriptors', 'cost']);

/**
 * A check from a query string: `policy`, `key` (or descriptor values as `name=value`), `cost` (default 1).
 * @throws SluiceError INVALID_ARGUMENT naming the parameter.
 */
export function checkFromQuery(query: string): CheckRequest {
  const params = new URLSearchParams(query);
  const seen = new Set<string>();
  const req: CheckRequest = { policy: '', cost: 1 };
  let descriptors: Record<string, string> | undefined;
  for (const [name, value] of params) {
    if (seen.has(name)) throw invalidArgument(name, 'is given more than once');
    seen.add(name);
    if (name === 'policy') req.policy = value;
    else if (name === 'key') req.key = value;
    else if (name === 'cost') req.cost = costFromString(value);
    else (descriptors ??= {})[name] = value;
  }
  if (!seen.has('policy')) throw invalidArgument('policy', 'is required');
  if (descriptors !== undefined) req.descriptors = descriptors;
  return req;
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
 * present but not a non-negative safe integer is an error). `prefix` names the item in a batch.
 * @throws SluiceError INVALID_ARGUMENT naming the field (with its batch path).
 */
export function checkFromJson(v: unknown, prefix = ''): CheckRequest {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw invalidArgument(prefix || 'body', 'must be a JSON object');
  }
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!CHECK_FIELDS.has(k)) throw invalidArgument(prefix + k, 'is not a field of a check (policy, key, descriptors, cost)');
  }
  if (!('policy' in o)) throw invalidArgument(prefix + 'policy', 'is required');
  return { ...(o as object), cost: 'cost' in o ? o.cost : 1 } as CheckRequest;
}

/** A decision as JSON, built without an intermediate object. */
export function decisionJson(d: Decision): string {
  const reason = d.reason === undefined ? '' : `,"reason":${JSON.stringify(d.reason)}`;
  return `{"allowed":${d.allowed},"limit":${d.limit},"remaining":${d.remaining},"resetAfterMs":${d.resetAfterMs},` +
    `"retryAfterMs":${d.retryAfterMs},"policy":${JSON.stringify(d.policy)}${reason}}`;
}

