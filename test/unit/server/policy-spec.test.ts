/**
 * GET /v1/policies shows each compiled policy as a spec (src/server/admin.ts policySpecOf); PUT takes that
 * document back: compiling the specs again gives the same compiled policies and the same set version.
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { policySetVersion } from '../../../src/config/policy-version.js';
import { type PolicySpec } from '../../../src/config/policy-spec.js';
import { policySpecOf } from '../../../src/server/admin.js';

const SET: Record<string, PolicySpec> = {
  free: { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 50, descriptors: ['tenant', { name: 'ip', header: 'x-forwarded-for' }], guard: 'global' },
  global: { algorithm: 'gcra', limit: 200_000, period: '1m', burst: 20_000 },
  api: { limits: [
    { algorithm: 'token_bucket', limit: 100, period: '1m' },
    { algorithm: 'fixed_window', limit: 5000, period: '1d', name: 'api-daily' },
  ], version: 7, carryOver: true },
  candidate: { algorithm: 'token_bucket', limit: 50, period: '1m', shadow: true, shadowOf: 'free', descriptors: ['tenant'] },
  window: { algorithm: 'sliding_window', limit: 100, period: '1h', onStoreError: 'open' },
  listed: { algorithm: 'fixed_window', limit: 10, period: 1000, allow: ['10.0.0.0/8'], deny: ['bad-key'] },
  jobs: { algorithm: 'concurrency', limit: 3, leaseTtl: '30s', consistency: 'strict', descriptors: ['tenant'] },
};

describe('policySpecOf', () => {
  it('round-trips every field: the same compiled policies and set version', () => {
    const compiled = compilePolicies(SET);
    const specs = Object.fromEntries([...compiled].map(([name, p]) => [name, policySpecOf(p)]));
    const again = compilePolicies(JSON.parse(JSON.stringify(specs)));
    expect([...again.values()]).toStrictEqual([...compiled.values()]);
    expect(policySetVersion(again)).toBe(policySetVersion(compiled));
  });

  it('writes periods in ms, the inline form for one limit, and a derived version not at all', () => {
    const compiled = compilePolicies(SET);
    expect(policySpecOf(compiled.get('global')!)).toStrictEqual({ algorithm: 'gcra', limit: 200_000, period: 60_000, burst: 20_000 });
    expect(policySpecOf(compiled.get('jobs')!)).toStrictEqual({
      algorithm: 'concurrency', limit: 3, leaseTtl: 30_000, descriptors: ['tenant'], consistency: 'strict', onStoreError: 'closed',
    });
    expect(policySpecOf(compiled.get('api')!)).toStrictEqual({
      limits: [
        { algorithm: 'token_bucket', limit: 100, period: 60_000, burst: 100 },
        { algorithm: 'fixed_window', limit: 5000, period: 86_400_000, burst: 5000, name: 'api-daily' },
      ],
      version: '7', carryOver: true,
    });
  });
});
