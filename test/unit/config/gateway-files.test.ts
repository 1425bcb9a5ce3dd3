/**
 * The gateway files that cannot be run here (Envoy, Traefik: not Debian packages) checked against the sluice
 * configs they pair with: the Envoy ratelimit filter's descriptors reach rules of the ratelimit config, the
 * ext_authz path_prefix and Traefik's address name policies whose descriptors come from what the gateway
 * sends. (nginx and Caddy are run for real: test/integration/gateways.test.ts.)
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfigFile } from '../../../src/config/load.js';
import { planRequest, routeTable } from '../../../src/grpc/rls.js';
import { PROJECT_ROOT } from '../../helpers/server.js';

const dir = path.join(PROJECT_ROOT, 'examples', 'gateways');
const yaml = (f: string): any => parse(readFileSync(path.join(dir, f), 'utf8'));

/** Every value under `key`, anywhere in a parsed document. */
function all(doc: unknown, key: string): any[] {
  if (Array.isArray(doc)) return doc.flatMap((d) => all(d, key));
  if (typeof doc !== 'object' || doc === null) return [];
  return Object.entries(doc).flatMap(([k, v]) => [...(k === key ? [v] : []), ...all(v, key)]);
}

describe('envoy/ratelimit.yaml against envoy/ratelimit-config.yaml', () => {
  it('its domain is the config\'s, and every rate_limits action list reaches a rule', async () => {
    const config = await loadConfigFile(path.join(dir, 'envoy', 'ratelimit-config.yaml'));
    const envoy = yaml('envoy/ratelimit.yaml');
    const [filter] = all(envoy, 'typed_config').filter((t) => t['@type']?.endsWith('ratelimit.v3.RateLimit'));
    expect(filter.domain).toBe('edge');
    const table = routeTable(config.policies);
    const lists = all(envoy, 'rate_limits').flat().map((r: { actions: any[] }) => r.actions);
    expect(lists.length).toBe(2);
    for (const actions of lists) {
      const entries = actions.map((a: any) => (a.remote_address ? { key: 'remote_address', value: '192.0.2.1' }
        : { key: a.generic_key.descriptor_key, value: a.generic_key.descriptor_value }));
      const [plan] = planRequest({ domain: filter.domain, descriptors: [{ entries, limit: null, hits_addend: null }], hits_addend: 0 }, table, 10);
      expect(plan.kind, JSON.stringify(entries)).toBe('check');
    }
  });
});

describe('envoy/ext-authz.yaml against envoy/sluice.yaml', () => {
  it('path_prefix names a policy whose descriptors come from an allowed header or the path', async () => {
    const config = await loadConfigFile(path.join(dir, 'envoy', 'sluice.yaml'));
    const services = all(yaml('envoy/ext-authz.yaml'), 'http_service');
    expect(services.length).toBe(2);
    for (const s of services) {
      const policy = config.policies.get(/^\/v1\/auth\/([^/]+)$/.exec(s.path_prefix)![1])!;
      const allowed = s.authorization_request.allowed_headers.patterns.map((p: { exact: string }) => p.exact);
      for (const d of policy.descriptors) expect(d.from === 'path' || (d.from === 'header' && allowed.includes(d.header)), d.name).toBe(true);
      expect(s.authorization_response.allowed_client_headers.patterns.map((p: { exact: string }) => p.exact))
        .toStrictEqual(['ratelimit', 'ratelimit-policy', 'retry-after']);
    }
  });
});

describe('traefik/dynamic.yml against sluice.yaml', () => {
  it('the address names a policy keyed by X-Forwarded-For, which Traefik sets itself', async () => {
    const config = await loadConfigFile(path.join(dir, 'sluice.yaml'));
    const fa = yaml('traefik/dynamic.yml').http.middlewares.sluice.forwardAuth;
    expect(fa.trustForwardHeader).toBe(false);
    const policy = config.policies.get(new URL(fa.address).searchParams.get('policy')!)!;
    expect(policy.descriptors).toStrictEqual([{ name: 'client', header: 'x-forwarded-for', from: 'header' }]);
  });
});
