/**
 * Where a policy's key comes from: its descriptors (and where `/v1/auth` reads each one), what one `/v1/auth`
 * request costs, and the Envoy rate limit service route it answers over gRPC.
 */
import { describeValue } from './duration.js';
import type { CompiledDescriptor, CompiledRlsRoute, DescriptorSource } from './policy-spec.js';
import { NAME_RULE, isPlainObject, joinPath, own, readName, rejectUnknownKeys, type Fail } from './fields.js';

const DESCRIPTOR_KEYS = ['name', 'header', 'from'];
const DESCRIPTOR_SOURCES: readonly DescriptorSource[] = ['query', 'header', 'path'];

/** An HTTP field name: an RFC 9110 token. */
const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export function compileDescriptors(v: unknown, fail: Fail): CompiledDescriptor[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) fail('descriptors', `must be an array of descriptor names or {name, header} objects (got ${describeValue(v)})`);
  const out: CompiledDescriptor[] = [];
  const seen = new Map<string, number>();
  for (let i = 0; i < v.length; i++) {
    const at = joinPath('descriptors', i);
    const entry: unknown = v[i];
    const descriptor = compileDescriptor(entry, at, fail);
    const previous = seen.get(descriptor.name);
    if (previous !== undefined) {
      const field = typeof entry === 'string' ? at : joinPath(at, 'name');
      fail(field, `duplicate descriptor "${descriptor.name}" (also descriptors[${previous}])`);
    }
    seen.set(descriptor.name, i);
    out.push(descriptor);
  }
  return out;
}

function compileDescriptor(v: unknown, at: string, fail: Fail): CompiledDescriptor {
  if (typeof v === 'string') return { name: readName(v, at, fail), header: null, from: 'query' };
  if (!isPlainObject(v)) fail(at, `must be a descriptor name or a {name, header} object (got ${describeValue(v)})`);
  rejectUnknownKeys(v, DESCRIPTOR_KEYS, at, 'a descriptor', fail);
  const name = own(v, 'name');
  if (name === undefined) fail(joinPath(at, 'name'), `is required: ${NAME_RULE.replace('must be ', '')}`);
  const header = own(v, 'header');
  if (header !== undefined && (typeof header !== 'string' || !HEADER_TOKEN.test(header))) {
    fail(joinPath(at, 'header'), `must be an HTTP header name such as "x-tenant-id" (got ${describeValue(header)})`);
  }
  const from = own(v, 'from');
  if (from !== undefined && (typeof from !== 'string' || !DESCRIPTOR_SOURCES.includes(from as DescriptorSource))) {
    fail(joinPath(at, 'from'), `must be one of ${DESCRIPTOR_SOURCES.join(', ')} (got ${describeValue(from)})`);
  }
  if (from === 'header' && header === undefined) fail(joinPath(at, 'header'), 'is required with from: header (the header to read)');
  if (from !== undefined && from !== 'header' && header !== undefined) {
    fail(joinPath(at, 'from'), `is ${from}, but header is given: a descriptor has one source`);
  }
  return {
    name: readName(name, joinPath(at, 'name'), fail), header: header === undefined ? null : header.toLowerCase(),
    from: header !== undefined ? 'header' : (from as DescriptorSource | undefined) ?? 'query',
  };
}

export function readAuthCost(v: unknown, fail: Fail): number | 'query' {
  if (v === undefined) return 1;
  if (v === 'query' || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)) return v === 'query' ? v : v + 0;
  return fail('authCost', `must be a non-negative safe integer of tokens or "query" (got ${describeValue(v)})`);
}

/** Most entries an RLS route matches (Envoy descriptors are short; each value is part of the key). */
const MAX_RLS_ENTRIES = 16;

export function readRlsRoute(v: unknown, descriptors: CompiledDescriptor[], fail: Fail): CompiledRlsRoute | null {
  if (v === undefined) return null;
  if (!isPlainObject(v)) fail('rls', `must be an object {domain, entries} (got ${describeValue(v)})`);
  rejectUnknownKeys(v, ['domain', 'entries', 'unlimited'], 'rls', 'an rls route', fail);
  const unlimited = own(v, 'unlimited') ?? false;
  if (typeof unlimited !== 'boolean') fail('rls.unlimited', `must be true or false (got ${describeValue(unlimited)})`);
  const domain = own(v, 'domain');
  if (typeof domain !== 'string' || domain === '') fail('rls.domain', `must be a non-empty string (got ${describeValue(domain)})`);
  const entries = own(v, 'entries');
  if (!Array.isArray(entries) || entries.length === 0 || entries.length > MAX_RLS_ENTRIES) {
    fail('rls.entries', `must be an array of 1 to ${MAX_RLS_ENTRIES} {key, value?} entries (got ${Array.isArray(entries) ? `${entries.length} entries` : describeValue(entries)})`);
  }
  if (descriptors.length > 0) fail('rls', 'a policy with an rls route takes its key from the request entries: remove descriptors');
  const out = entries.map((e: unknown, i: number) => {
    const at = `rls.entries[${i}]`;
    if (!isPlainObject(e)) fail(at, `must be an object {key, value?} (got ${describeValue(e)})`);
    rejectUnknownKeys(e, ['key', 'value'], at, 'an rls entry', fail);
    const key = own(e, 'key');
    const value = own(e, 'value');
    if (typeof key !== 'string' || key === '') fail(`${at}.key`, `must be a non-empty string (got ${describeValue(key)})`);
    if (value !== undefined && (typeof value !== 'string' || value === '')) fail(`${at}.value`, `must be a non-empty string when given (got ${describeValue(value)})`);
    return { key, value: value === undefined ? null : value };
  });
  return { domain, entries: out, unlimited };
}
