/** envoyproxy/ratelimit's config format → sluice policies (src/config/envoy-ratelimit.ts), through parseConfig. */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config/load.js';

const cfg = (yaml: string) => parseConfig(yaml, 'rl.yaml');
function error(yaml: string): { message: string; field: string | undefined } {
  try {
    cfg(yaml);
  } catch (e) {
    return { message: (e as Error).message, field: (e as { field?: string }).field };
  }
  throw new Error('parsed');
}

describe('translation', () => {
  it('one fixed_window policy per rule, period = the unit (a month 30 days, a year 365), routed by its path', () => {
    const units = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'];
    const seconds = [1, 60, 3600, 86_400, 604_800, 2_592_000, 31_536_000];
    const yaml = `domain: d\ndescriptors:\n${units.map((u, i) => `  - key: k${i}\n    rate_limit: { unit: ${i % 2 ? u.toUpperCase() : u}, requests_per_unit: ${i + 1} }`).join('\n')}\n`;
    const c = cfg(yaml);
    expect([...c.policies.keys()]).toStrictEqual(units.map((_, i) => `d.k${i}`));
    units.forEach((_, i) => {
      const p = c.policies.get(`d.k${i}`)!;
      expect([p.limits[0].algorithm, p.limits[0].limit, p.limits[0].periodMs, p.rls, p.shadow])
        .toStrictEqual(['fixed_window', i + 1, seconds[i] * 1000, { domain: 'd', entries: [{ key: `k${i}`, value: null }], unlimited: false }, false]);
    });
    expect(c.engine).toStrictEqual({});
    expect(c.server).toStrictEqual({});
  });

  it('nested paths, values, shadow_mode, unlimited, name and algorithm', () => {
    const c = cfg(`
domain: edge
descriptors:
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        shadow_mode: true
        detailed_metric: true
        rate_limit: { unit: hour, requests_per_unit: 2, name: login-ip, algorithm: gcra }
  - key: internal
    rate_limit: { unlimited: true }
  - key: "odd key"
    value: "a:b"
    rate_limit: { unit: second, requests_per_unit: 0 }
`);
    expect(c.policies.size).toBe(3);
    const login = [...c.policies.values()][0];
    expect(login.name).toMatch(/^edge\.path__login\.remote_address-[0-9a-f]{8}$/);
    expect([login.limits, login.shadow, login.rls]).toStrictEqual([
      [{ algorithm: 'gcra', algorithmCode: 1, limit: 2, periodMs: 3_600_000, burst: 2, name: 'login-ip' }], true,
      { domain: 'edge', entries: [{ key: 'path', value: '/login' }, { key: 'remote_address', value: null }], unlimited: false },
    ]);
    expect(c.policies.get('edge.internal')!.rls).toStrictEqual({ domain: 'edge', entries: [{ key: 'internal', value: null }], unlimited: true });
    expect([...c.policies.values()][2].name).toMatch(/^edge\.odd_key_a_b-[0-9a-f]{8}$/);
  });
});

describe('refusals name the path', () => {
  it.each([
    ['domain: ""\ndescriptors: []', 'domain', 'must be a non-empty string (got "")'],
    ['domain: d\nextra: 1', 'extra', 'unknown key (an envoyproxy/ratelimit config accepts domain, descriptors)'],
    ['domain: d\ndescriptors: []', 'descriptors', 'has no rule with a rate_limit: sluice needs at least one'],
    ['domain: d\ndescriptors:\n  - value: v', 'descriptors[0].key', 'must be a non-empty string (got undefined)'],
    ['domain: d\ndescriptors:\n  - key: k\n    replaces: []', 'descriptors[0].replaces', 'is not supported by sluice (every matched rule applies; none replaces another)'],
    ['domain: d\ndescriptors:\n  - key: k\n    quota_mode: true', 'descriptors[0].quota_mode', 'is not supported by sluice'],
    ['domain: d\ndescriptors:\n  - key: k\n    metadata: {a: 1}', 'descriptors[0].metadata', 'is not supported by sluice'],
    ['domain: d\ndescriptors:\n  - key: k\n    value_to_metric: true', 'descriptors[0].value_to_metric', 'is not supported by sluice (per-value metric series are unbounded)'],
    ['domain: d\ndescriptors:\n  - key: k\n    value: "a*"', 'descriptors[0].value', 'wildcard values (*) are not supported by sluice: list the values, or leave value out to match any value'],
    ['domain: d\ndescriptors:\n  - key: k\n  - key: k', 'descriptors[1]', 'duplicate descriptor composite key "k" (also descriptors[0])'],
    ['domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: { unit: fortnight, requests_per_unit: 1 }',
      'descriptors[0].descriptors[0].rate_limit.unit', 'must be one of second, minute, hour, day, week, month, year (got "fortnight")'],
    ['domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: -1 }', 'descriptors[0].rate_limit.requests_per_unit', 'must be an integer from 0 to 4294967295 (got -1)'],
    ['domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, unit: second }', 'descriptors[0].rate_limit.unit', 'must not be given with unlimited: true'],
    ['domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [{name: x}] }', 'descriptors[0].rate_limit.replaces', 'is not supported by sluice (every matched rule applies; none replaces another)'],
    ['domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, algorithm: leaky }', 'descriptors[0].rate_limit.algorithm', 'must be one of token_bucket, gcra, fixed_window, sliding_window, sliding_log (got "leaky")'],
    ['domain: d\ndescriptors:\n  - key: k\n    shadow_mode: "yes"', 'descriptors[0].shadow_mode', 'must be true or false (got "yes")'],
    ['domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, burst: 3 }', 'descriptors[0].rate_limit.burst', 'unknown key (a rate_limit accepts unit, requests_per_unit, unlimited, name, algorithm)'],
  ])('%j → %s', (yaml, field, why) => {
    expect(error(yaml)).toStrictEqual({ message: `rl.yaml: ${field}: ${why}`, field });
  });
});
