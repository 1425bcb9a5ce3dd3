import { createHash } from 'node:crypto';
import { isWellFormed } from '../util/text.js';
import { invalidArgument } from '../util/errors.js';
import { MAX_KEY_BYTES } from './bounds.js';

/**
 * Validates a key: a well-formed string of 1 to 1,024 bytes of UTF-8. Keys are bytes, compared exactly:
 * no normalisation, no trimming. Lone surrogates are refused because UTF-8 would turn them all into U+FFFD,
 * making distinct keys collide.
 * @throws SluiceError INVALID_ARGUMENT naming `field`.
 */
export function validateKey(key: unknown, field = 'key'): string {
  if (typeof key !== 'string') throw invalidArgument(field, `must be a string (got ${describe(key)})`);
  if (key.length === 0) throw invalidArgument(field, 'must not be empty');
  // UTF-8 takes at most 3 bytes per UTF-16 unit, so short keys need no byte count
  if (key.length > MAX_KEY_BYTES || (key.length * 3 > MAX_KEY_BYTES && Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES)) {
    throw invalidArgument(field, `must be at most ${MAX_KEY_BYTES} bytes of UTF-8`);
  }
  if (!isWellFormed(key)) {
    throw invalidArgument(field, 'must be well-formed Unicode (no lone surrogates)');
  }
  return key;
}

/** Escapes `%` and `:` so that joined descriptor tuples stay unambiguous: ("a:b","c") ≠ ("a","b:c"). */
export function escapePart(v: string): string {
  if (!v.includes('%') && !v.includes(':')) return v;
  return v.replace(/[%:]/g, (c) => (c === '%' ? '%25' : '%3A'));
}

/**
 * What key derivation reads of a policy: its name and its descriptors in declared order. A CompiledPolicy
 * (config/policy-spec.ts) is one; the shape is spelled here so keys/ sits below config/ and imports nothing of it.
 */
export interface KeyedPolicy {
  readonly name: string;
  readonly descriptors: readonly { readonly name: string }[];
}

/**
 * A joined descriptor key (escaped parts joined by `:`) that fits {@link MAX_KEY_BYTES}: itself, or when longer
 * `%sha256:` and the SHA-256 of its UTF-8 in hex (72 bytes). For a transport whose failure lets the request
 * through (Envoy's rate limit service, `failure_mode_deny: false` by default), a value the client controls
 * must not turn the request into an error: the long key is limited as its digest, one key per value. The
 * digest form cannot be a joined key: there every `%` is escaped as `%25`.
 */
export function boundedKey(joined: string): string {
  if (joined.length * 3 <= MAX_KEY_BYTES || Buffer.byteLength(joined, 'utf8') <= MAX_KEY_BYTES) return joined;
  return `%sha256:${createHash('sha256').update(joined, 'utf8').digest('hex')}`;
}

/**
 * The key a check stands for: its `key`, or its descriptors' values in the policy's declared order,
 * each escaped, joined by `:`. A `key` given to a descriptor policy is taken as that joined form.
 * @throws SluiceError INVALID_ARGUMENT naming `key` or `descriptors.<name>`.
 */
export function keyOf(policy: KeyedPolicy, key: unknown, descriptors: unknown): string {
  const values = descriptors === undefined ? undefined : descriptorValues(policy, descriptors);
  if (key !== undefined) {
    if (values !== undefined) throw invalidArgument('descriptors', 'give key or descriptors, not both');
    return validateKey(key);
  }
  if (values === undefined) {
    throw invalidArgument('key', policy.descriptors.length === 0
      ? 'is required'
      : `is required (or descriptors: ${policy.descriptors.map((d) => d.name).join(', ')})`);
  }
  const parts = policy.descriptors.map((d) => {
    const v = Object.hasOwn(values, d.name) ? values[d.name] : undefined;
    if (typeof v !== 'string') throw invalidArgument(`descriptors.${d.name}`, `must be a string (got ${describe(v)})`);
    return escapePart(v);
  });
  return validateKey(parts.join(':'), `descriptors.${policy.descriptors.map((d) => d.name).join('+')}`);
}

/** The descriptors object, every name one the policy declares. */
function descriptorValues(policy: KeyedPolicy, descriptors: unknown): Record<string, unknown> {
  if (typeof descriptors !== 'object' || descriptors === null || Array.isArray(descriptors)) {
    throw invalidArgument('descriptors', 'must be an object of descriptor name to string value');
  }
  const values = descriptors as Record<string, unknown>;
  for (const name of Object.keys(values)) {
    if (!policy.descriptors.some((d) => d.name === name)) {
      throw invalidArgument(`descriptors.${name}`, `is not a descriptor of policy "${policy.name}"`);
    }
  }
  return values;
}

export function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? v.slice(0, 40) + '…' : v);
  if (typeof v === 'number') return String(v);
  return typeof v;
}
