import type { CheckRequest, Decision } from '../types/decision.js';
import { invalidArgument } from '../util/errors.js';
import { describe } from '../keys/derive.js';
import { remember } from './headers.js';

/** Fields a check may carry in a JSON body; anything else is refused by name. */
/** `wait`: onLimit: delay's flag, taken out by the transport (src/wire/delay.ts). */
const CHECK_FIELDS = new Set(['policy', 'key', 'descriptors', 'cost', 'wait']);

/**
 * A check from a query string: `policy`, `key` (or descriptor values as `name=value`), `cost` (default 1).
 * Percent-escapes must decode to well-formed UTF-8: a decoder that replaced bad bytes with U+FFFD would make
 * distinct keys collide.
 * @throws SluiceError INVALID_ARGUMENT naming the parameter.
 */
export function checkFromQuery(query: string): CheckRequest {
  // One pass over the characters, without split(), includes() or a Set: it finds each pair's `=`, whether a
  // name or value needs decoding at all (`%` or `+`), and U+FFFD. Every name lands in exactly one of policy,
  // key, cost or the descriptors, so those say what was seen. The checks are those of a split-and-decode, in
  // the same order (U+FFFD anywhere first, then per pair its name, its value, a repeat).
  try {
    return parseQuery(query);
  } catch (e) {
    // a pair failed before the scan reached a U+FFFD further on, which is the error to report
    if (query.includes('\uFFFD')) throw notUtf8();
    throw e;
  }
}

function notUtf8(): Error {
  // uWS hands over the raw query decoded as UTF-8 with bad bytes replaced by U+FFFD, so raw 0xFF and raw 0xFE
  // would be one key. A raw U+FFFD is no valid URL either (bytes outside ASCII must be percent-encoded).
  return invalidArgument('query', 'is not well-formed UTF-8 (percent-encode bytes outside ASCII)');
}

function parseQuery(query: string): CheckRequest {
  const req: CheckRequest = { policy: '', cost: 1 };
  let seenPolicy = false;
  let seenKey = false;
  let seenCost = false;
  let descriptors: Record<string, string> | undefined;
  const end = query.length;
  let start = 0;
  while (start <= end) {
    let eq = -1;
    let nameCoded = false;
    let valueCoded = false;
    let i = start;
    for (; i < end; i++) {
      const c = query.charCodeAt(i);
      if (c === 0x26 /* & */) break;
      if (c === 0x3d /* = */) {
        if (eq < 0) eq = i;
      } else if (c === 0x25 /* % */ || c === 0x2b /* + */) {
        if (eq < 0) nameCoded = true;
        else valueCoded = true;
      } else if (c === 0xfffd) {
        throw notUtf8();
      }
    }
    if (i > start) {
      const rawName = query.slice(start, eq < 0 ? i : eq);
      const name = nameCoded ? decodeParam(rawName, 'query') : rawName;
      let value = '';
      if (eq >= 0) {
        const rawValue = query.slice(eq + 1, i);
        value = valueCoded ? decodeParam(rawValue, name) : rawValue;
      }
      if (name === 'policy') {
        if (seenPolicy) throw twice(name);
        seenPolicy = true;
        req.policy = value;
      } else if (name === 'key') {
        if (seenKey) throw twice(name);
        seenKey = true;
        req.key = value;
      } else if (name === 'cost') {
        if (seenCost) throw twice(name);
        seenCost = true;
        req.cost = costFromString(value);
      } else {
        descriptors ??= Object.create(null) as Record<string, string>;
        if (name in descriptors) throw twice(name);
        descriptors[name] = value;
      }
    }
    start = i + 1;
  }
  if (!seenPolicy) throw invalidArgument('policy', 'is required');
  if (descriptors !== undefined) req.descriptors = descriptors;
  return req;
}

function twice(name: string): Error {
  return invalidArgument(name, 'is given more than once');
}

/**
 * application/x-www-form-urlencoded decoding (`+` is a space) that refuses malformed UTF-8 (only called for
 * text with a `%` or `+`: other text decodes to itself).
 */
function decodeParam(s: string, field: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
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
    if (!CHECK_FIELDS.has(k)) throw invalidArgument(prefix + k, 'is not a field of a check (policy, key, descriptors, cost, wait)');
  }
  if (!('policy' in o)) throw invalidArgument(prefix + 'policy', 'is required');
  return { ...(o as object), cost: 'cost' in o ? o.cost : 1 } as CheckRequest;
}

/**
 * checkFromJson for a `/v1/stream` item: the same check and the same errors from an object JSON.parse made,
 * whose fields `id` and `subscribe` (the stream's own, named in `own`) are left out, without copying it: the
 * fields are read where they are (JSON.parse makes every field, `__proto__` too, an own property, and an
 * unknown one is refused before any is read).
 * @throws SluiceError INVALID_ARGUMENT naming the field.
 */
export function checkFromStreamItem(o: Record<string, unknown>, own: ReadonlySet<string>): CheckRequest {
  const keys = Object.keys(o);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    if (!CHECK_FIELDS.has(k) && !own.has(k)) throw invalidArgument(k, 'is not a field of a check (policy, key, descriptors, cost, wait)');
  }
  if (!Object.hasOwn(o, 'policy')) throw invalidArgument('policy', 'is required');
  const req: CheckRequest = { policy: o.policy as string, cost: (Object.hasOwn(o, 'cost') ? o.cost : 1) as number };
  if (Object.hasOwn(o, 'key')) req.key = o.key as string;
  if (Object.hasOwn(o, 'descriptors')) req.descriptors = o.descriptors as Record<string, string>;
  // onLimit: delay's flag, for the transport to take out (src/wire/delay.ts takeWait)
  if (Object.hasOwn(o, 'wait')) (req as CheckRequest & { wait?: unknown }).wait = o.wait;
  return req;
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

/** A degraded decision's JSON members, with their leading comma (`,"degraded":true,"degradedBy":"<rule>"`), or ''. */
export function degradedJson(d: Pick<Decision, 'degraded' | 'degradedBy'>): string {
  return d.degraded === true ? `,"degraded":true,"degradedBy":"${d.degradedBy ?? 'local'}"` : '';
}

/** A decision as JSON, built without an intermediate object. */
export function decisionJson(d: Decision): string {
  const reason = d.reason === undefined ? '' : `,"reason":${JSON.stringify(d.reason)}`;
  const degraded = degradedJson(d);
  const stale = d.stalenessMs === undefined ? '' : `,"stalenessMs":${d.stalenessMs}`;
  const shadow = d.shadow === undefined ? '' : `,"shadow":${JSON.stringify(d.shadow)}`;
  const delay = d.delayMs === undefined ? '' : `,"delayMs":${d.delayMs}`;
  return `{"allowed":${d.allowed},"limit":${d.limit},"remaining":${d.remaining},"resetAfterMs":${d.resetAfterMs},` +
    `"retryAfterMs":${d.retryAfterMs},"policy":${jsonString(d.policy)}${reason}${degraded}${stale}${shadow}${delay}}`;
}

/** `JSON.stringify` of a limit name, computed once per name (names come from the policy set). */
function jsonString(s: string): string {
  let v = JSON_STRINGS.get(s);
  if (v === undefined) {
    v = JSON.stringify(s);
    remember(JSON_STRINGS, s, v);
  }
  return v;
}
const JSON_STRINGS = new Map<string, string>();
