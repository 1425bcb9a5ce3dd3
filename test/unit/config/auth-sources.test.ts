/** Policy fields for forward auth and Envoy RLS routing: descriptor `from`, `authCost`, `rls`. */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { policySetVersion } from '../../../src/config/policy-version.js';

const base = { algorithm: 'fixed_window', limit: 1, period: 1000 } as const;

function errorOf(spec: Record<string, unknown>): { message: string; field: string | undefined } {
  try {
    compilePolicies({ p: { ...base, ...spec } });
  } catch (e) {
    return { message: (e as Error).message, field: (e as { field?: string }).field };
  }
  throw new Error('compiled');
}

describe('descriptor sources', () => {
  it('compiles each source; header implies from: header', () => {
    const p = compilePolicies({
      p: { ...base, descriptors: ['a', { name: 'b', from: 'query' }, { name: 'c', header: 'X-C' }, { name: 'd', header: 'x-d', from: 'header' }, { name: 'e', from: 'path' }] },
    }).get('p')!;
    expect(p.descriptors).toStrictEqual([
      { name: 'a', header: null, from: 'query' }, { name: 'b', header: null, from: 'query' },
      { name: 'c', header: 'x-c', from: 'header' }, { name: 'd', header: 'x-d', from: 'header' },
      { name: 'e', header: null, from: 'path' },
    ]);
  });

  it.each([
    [{ name: 'a', from: 'cookie' }, 'descriptors[0].from', 'must be one of query, header, path (got "cookie")'],
    [{ name: 'a', from: 'header' }, 'descriptors[0].header', 'is required with from: header (the header to read)'],
    [{ name: 'a', from: 'path', header: 'x-a' }, 'descriptors[0].from', 'is path, but header is given: a descriptor has one source'],
  ])('refuses %j at %s', (d, field, why) => {
    expect(errorOf({ descriptors: [d] })).toStrictEqual({ message: `policy "p": ${field}: ${why}`, field });
  });
});

describe('authCost', () => {
  it('defaults to 1; takes a count or "query"', () => {
    expect(compilePolicies({ p: base }).get('p')!.authCost).toBe(1);
    expect(compilePolicies({ p: { ...base, authCost: 0 } }).get('p')!.authCost).toBe(0);
    expect(compilePolicies({ p: { ...base, authCost: 'query' } }).get('p')!.authCost).toBe('query');
  });

  it.each([[-1], [1.5], ['1'], [null]])('refuses %j', (v) => {
    expect(errorOf({ authCost: v }).field).toBe('authCost');
  });

  it('leaves the version of a set without the new fields unchanged, and changes it when they are set', () => {
    const plain = compilePolicies({ p: { ...base, descriptors: ['a', { name: 'b', header: 'x-b' }] } });
    const explicit = compilePolicies({ p: { ...base, descriptors: [{ name: 'a', from: 'query' }, { name: 'b', header: 'x-b', from: 'header' }], authCost: 1 } });
    expect(policySetVersion(explicit)).toBe(policySetVersion(plain));
    expect(policySetVersion(compilePolicies({ p: { ...base, authCost: 2 } }))).not.toBe(policySetVersion(compilePolicies({ p: base })));
  });
});

describe('rls route', () => {
  it('compiles entries, value null for a key-only entry', () => {
    const p = compilePolicies({ p: { ...base, rls: { domain: 'edge', entries: [{ key: 'remote_address' }, { key: 'path', value: '/x' }] } } }).get('p')!;
    expect(p.rls).toStrictEqual({ domain: 'edge', entries: [{ key: 'remote_address', value: null }, { key: 'path', value: '/x' }], unlimited: false });
    expect(Object.isFrozen(p.rls)).toBe(true);
  });

  it.each([
    [{ domain: '', entries: [{ key: 'a' }] }, 'rls.domain'],
    [{ domain: 'd', entries: [] }, 'rls.entries'],
    [{ domain: 'd', entries: [{ value: 'v' }] }, 'rls.entries[0].key'],
    [{ domain: 'd', entries: [{ key: 'a', value: '' }] }, 'rls.entries[0].value'],
    [{ domain: 'd', entries: [{ key: 'a', extra: 1 }] }, 'rls.entries[0].extra'],
    [{ domain: 'd', entries: [{ key: 'a' }], x: 1 }, 'rls.x'],
  ])('refuses %j at %s', (rls, field) => {
    expect(errorOf({ rls }).field).toBe(field);
  });

  it('refuses descriptors beside an rls route (the entries make the key)', () => {
    expect(errorOf({ rls: { domain: 'd', entries: [{ key: 'a' }] }, descriptors: ['a'] })).toStrictEqual({
      message: 'policy "p": rls: a policy with an rls route takes its key from the request entries: remove descriptors', field: 'rls',
    });
  });
});
