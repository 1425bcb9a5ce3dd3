/**
 * GET /v1/policies shows each compiled policy as a spec (src/config/spec-of.ts policySpecOf); PUT takes that
 * document back: compiling the specs again gives the same compiled policies and the same set version, so a
 * read-modify-write of the policy set changes nothing the caller did not change.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../../src/config/default.js';
import { parseConfig } from '../../../src/config/load.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { policySetVersion } from '../../../src/config/policy-version.js';
import { type CompiledPolicy, type PolicySpec } from '../../../src/config/policy-spec.js';
import { policySpecOf } from '../../../src/config/spec-of.js';
import { PROJECT_ROOT } from '../../helpers/server.js';

/** Every field a policy can set, each away from its default somewhere. */
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
  delayed: { algorithm: 'token_bucket', limit: 10, period: '1s', onLimit: 'delay', maxDelayMs: '2s', descriptors: ['tenant'], authCost: 'query' },
  routed: { algorithm: 'gcra', limit: 5, period: '1s', descriptors: [{ name: 'route', from: 'path' }, 'tenant'], authCost: 3 },
  calendar: { limits: [
    { algorithm: 'fixed_window', limit: 1000, period: '1mo', timeZone: 'Asia/Tokyo', name: 'monthly' },
    { algorithm: 'fixed_window', limit: 300, period: '1w', name: 'weekly' },
    { algorithm: 'fixed_window', limit: 100, period: '1d', timeZone: 'UTC', name: 'daily' },
  ] },
  rls: { algorithm: 'token_bucket', limit: 20, period: '1m', rls: { domain: 'edge', entries: [{ key: 'remote_address' }, { key: 'path', value: '/login' }] } },
  open: { algorithm: 'token_bucket', limit: 20, period: '1m', rls: { domain: 'edge', entries: [{ key: 'health' }], unlimited: true } },
  leased: { algorithm: 'token_bucket', limit: 600, period: '1m', consistency: 'lease', lease: { ttlMs: 5000, idleMs: 500, maxShare: 0.5 }, scope: 'global', onStoreError: 'closed' },
  synced: { algorithm: 'sliding_window', limit: 20, period: '10s', consistency: 'sync' },
  logged: { algorithm: 'sliding_log', limit: 20, period: '10s', consistency: 'strict' },
};

/** The policies compiled again from their specs, as PUT would after a GET (JSON in between). */
function roundTrip(compiled: Map<string, CompiledPolicy>): Map<string, CompiledPolicy> {
  const specs = Object.fromEntries([...compiled].map(([name, p]) => [name, policySpecOf(p)]));
  return compilePolicies(JSON.parse(JSON.stringify(specs)));
}

describe('policySpecOf', () => {
  it('round-trips every field: the same compiled policies and set version', () => {
    const compiled = compilePolicies(SET);
    const again = roundTrip(compiled);
    expect([...again.values()]).toStrictEqual([...compiled.values()]);
    expect(policySetVersion(again)).toBe(policySetVersion(compiled));
  });

  it('knows every field of a compiled policy (a new field must be written back too)', () => {
    const fields = new Set(Object.values(Object.fromEntries(compilePolicies(SET))).flatMap((p) => Object.keys(p)));
    expect([...fields].sort()).toStrictEqual([
      'allow', 'authCost', 'carryOver', 'consistency', 'deny', 'descriptors', 'guard', 'lease', 'limits', 'maxDelayMs',
      'name', 'onLimit', 'onStoreError', 'rls', 'scope', 'shadow', 'shadowOf', 'version', 'versionGiven',
    ]);
  });

  it('round-trips the built-in default and every shipped policies file', () => {
    const files = [
      ...readdirSync(path.join(PROJECT_ROOT, 'examples')).filter((f) => f.endsWith('.yaml')).map((f) => path.join('examples', f)),
      ...readdirSync(path.join(PROJECT_ROOT, 'examples/gateways')).filter((f) => f.endsWith('.yaml')).map((f) => path.join('examples/gateways', f)),
      'examples/gateways/envoy/sluice.yaml', 'examples/gateways/envoy/ratelimit-config.yaml', 'test/fixtures/config/basic.yaml',
    ];
    expect(files.length).toBeGreaterThanOrEqual(7);
    for (const compiled of [defaultConfig().policies, ...files.map((f) => parseConfig(readFileSync(path.join(PROJECT_ROOT, f), 'utf8'), f).policies)]) {
      expect([...roundTrip(compiled).values()]).toStrictEqual([...compiled.values()]);
    }
  });

  it('writes periods in ms, a calendar window as its unit and zone, the inline form for one limit, and a derived version not at all', () => {
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
    expect(policySpecOf(compiled.get('delayed')!)).toStrictEqual({
      algorithm: 'token_bucket', limit: 10, period: 1000, burst: 10, descriptors: ['tenant'], onLimit: 'delay', maxDelayMs: 2000, authCost: 'query',
    });
    expect(policySpecOf(compiled.get('routed')!)).toMatchObject({ descriptors: [{ name: 'route', from: 'path' }, 'tenant'], authCost: 3 });
    expect(policySpecOf(compiled.get('calendar')!).limits).toStrictEqual([
      { algorithm: 'fixed_window', limit: 1000, period: '1mo', timeZone: 'Asia/Tokyo', burst: 1000, name: 'monthly' },
      { algorithm: 'fixed_window', limit: 300, period: '1w', timeZone: 'UTC', burst: 300, name: 'weekly' },
      { algorithm: 'fixed_window', limit: 100, period: '1d', timeZone: 'UTC', burst: 100, name: 'daily' },
    ]);
    expect(policySpecOf(compiled.get('open')!).rls).toStrictEqual({ domain: 'edge', entries: [{ key: 'health' }], unlimited: true });
    expect(policySpecOf(compiled.get('leased')!)).toMatchObject({ consistency: 'lease', lease: { ttlMs: 5000, idleMs: 500, maxShare: 0.5 }, scope: 'global' });
  });
});
