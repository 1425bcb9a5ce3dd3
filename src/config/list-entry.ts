/**
 * Allow and deny list entries (a policy's `allow: [...]` and `deny: [...]`), parsed at config load (each
 * entry, and the list fields: {@link readList}); the matching is engine/lists.ts.
 *
 * An entry is one of:
 * - an IP range in CIDR notation, `10.0.0.0/8` or `2001:db8::/32` (hex digits, `.` and `:`, then `/` and a
 *   prefix length: 0 to 32 for IPv4, 0 to 128 for IPv6; host bits past the prefix are ignored);
 * - a bare IP address, `192.0.2.7` or `2001:db8::1`: the range of that one address (/32, /128);
 * - anything else: an exact key, compared byte for byte (1 to 1,024 bytes of well-formed UTF-8).
 */
import { isIP } from 'node:net';
import { isWellFormed } from '../util/text.js';
import { MAX_KEY_BYTES } from '../keys/bounds.js';
import { describeValue } from './duration.js';
import { joinPath, type Fail } from './fields.js';

/** Most entries one list may hold. */
export const MAX_LIST_ENTRIES = 100_000;

/** One parsed list entry. */
export type ListEntry =
  | { kind: 'exact'; key: string }
  | { kind: 'range'; address: string; prefix: number; family: 'ipv4' | 'ipv6' };

/** Looks like `address/prefix`: then it must be a valid range (a key of this shape is refused, not guessed). */
const CIDR_SHAPE = /^[0-9A-Fa-f:.]+\/[0-9]+$/;
/** Looks like a dotted-quad IPv4 address: then it must be one. */
const DOTTED_QUAD = /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/;

/**
 * Parses one list entry.
 * @returns the entry, or a reason (without the field) when it is invalid.
 */
export function parseListEntry(v: unknown): ListEntry | string {
  if (typeof v !== 'string') return 'must be a key, an IP address or a CIDR range such as "10.0.0.0/8"';
  if (v.length === 0) return 'must not be empty';
  if (Buffer.byteLength(v, 'utf8') > MAX_KEY_BYTES) return `must be at most ${MAX_KEY_BYTES} bytes of UTF-8`;
  if (!isWellFormed(v)) return 'must be well-formed Unicode (no lone surrogates)';
  if (CIDR_SHAPE.test(v)) {
    const slash = v.indexOf('/');
    const address = v.slice(0, slash);
    const family = isIP(address);
    if (family === 0) return 'is not a valid CIDR range: the address before "/" is not an IPv4 or IPv6 address';
    const max = family === 4 ? 32 : 128;
    const prefix = Number(v.slice(slash + 1));
    if (!Number.isSafeInteger(prefix) || prefix > max) return `is not a valid CIDR range: the prefix length must be 0 to ${max} for IPv${family}`;
    return { kind: 'range', address, prefix, family: family === 4 ? 'ipv4' : 'ipv6' };
  }
  const family = isIP(v);
  if (family !== 0) return { kind: 'range', address: v, prefix: family === 4 ? 32 : 128, family: family === 4 ? 'ipv4' : 'ipv6' };
  if (DOTTED_QUAD.test(v)) return 'is not a valid IPv4 address: each of the four parts must be 0 to 255';
  return { kind: 'exact', key: v };
}

/** An allow or deny list: an array of keys, IP addresses and CIDR ranges (see src/engine/lists.ts). */
export function readList(v: unknown, field: 'allow' | 'deny', fail: Fail): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) fail(field, `must be an array of keys, IP addresses or CIDR ranges (got ${describeValue(v)})`);
  if (v.length > MAX_LIST_ENTRIES) fail(field, `must hold at most ${MAX_LIST_ENTRIES} entries (got ${v.length})`);
  for (let i = 0; i < v.length; i++) {
    const e = parseListEntry(v[i]);
    if (typeof e === 'string') fail(joinPath(field, i), `${e} (got ${describeValue(v[i])})`);
  }
  return [...(v as string[])];
}
