/** `consistency: lease` and its `lease:` settings: defaults, bounds, and the algorithms refused at load. */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { DEFAULT_LEASE_TTL_MS } from '../../../src/config/policy-spec.js';
import { parseConfig } from '../../../src/config/load.js';
import { isSluiceError, type SluiceError } from '../../../src/index.js';

function refusal(spec: Record<string, unknown>): SluiceError {
  try {
    compilePolicies({ p: spec });
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a CONFIG error');
}

const TB = { algorithm: 'token_bucket', limit: 10, period: '1s', consistency: 'lease' };

describe('consistency: lease', () => {
  it('compiles with the default settings (ttlMs 2000, idleMs 1000, maxShare 0.25)', () => {
    const p = compilePolicies({ p: TB }).get('p')!;
    expect(p.consistency).toBe('lease');
    expect(p.lease).toStrictEqual({ ttlMs: 2000, idleMs: 1000, maxShare: 0.25 });
    expect(DEFAULT_LEASE_TTL_MS).toBe(2000);
    expect(compilePolicies({ p: { ...TB, consistency: 'strict' } }).get('p')!.lease).toBeNull();
  });

  it('takes durations as strings; idleMs defaults to at most ttlMs', () => {
    expect(compilePolicies({ p: { ...TB, lease: { ttlMs: '5s', idleMs: '250ms', maxShare: 1 } } }).get('p')!.lease)
      .toStrictEqual({ ttlMs: 5000, idleMs: 250, maxShare: 1 });
    expect(compilePolicies({ p: { ...TB, lease: { ttlMs: 500 } } }).get('p')!.lease).toStrictEqual({ ttlMs: 500, idleMs: 500, maxShare: 0.25 });
  });

  it('refuses bad settings, naming the field', () => {
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ ...TB, lease: { ttlMs: 5 } }, 'lease.ttlMs', 'must be from 10 ms to 600000 ms (got 5)'],
      [{ ...TB, lease: { ttlMs: 1000, idleMs: 2000 } }, 'lease.idleMs', 'must be at most lease.ttlMs (1000 ms; got 2000 ms)'],
      [{ ...TB, lease: { maxShare: 0 } }, 'lease.maxShare', 'must be a number in (0, 1] (got 0)'],
      [{ ...TB, lease: { ttl: 1 } }, 'lease.ttl', 'unknown key'],
      [{ ...TB, lease: 3 }, 'lease', 'must be an object {ttlMs, idleMs, maxShare} (got 3)'],
      [{ ...TB, consistency: 'strict', lease: {} }, 'lease', 'applies to consistency lease only (got consistency strict)'],
    ];
    for (const [spec, field, why] of cases) {
      const e = refusal(spec);
      expect(e.field, JSON.stringify(spec)).toBe(field);
      expect(e.message).toContain(why);
    }
  });

  it('refuses sliding_log and calendar windows, naming the field; leases the four others', () => {
    const log = refusal({ algorithm: 'sliding_log', limit: 5, period: '1s', consistency: 'lease' });
    expect([log.field, log.message]).toStrictEqual(['algorithm',
      'policy "p": algorithm: sliding_log cannot be leased exactly (a leased token would be logged when granted and leave the trailing period before the spend it stands for): use token_bucket, gcra, fixed_window or sliding_window, or consistency strict']);
    const cal = refusal({ limits: [{ algorithm: 'fixed_window', limit: 5, period: '1s' }, { algorithm: 'fixed_window', limit: 50, period: '1d', timeZone: 'Europe/Paris' }], consistency: 'lease' });
    expect(cal.field).toBe('limits[1].period');
    expect(cal.message).toContain('calendar period "1d" cannot be leased');
    for (const algorithm of ['token_bucket', 'gcra', 'fixed_window', 'sliding_window']) {
      expect(compilePolicies({ p: { algorithm, limit: 5, period: '1s', consistency: 'lease' } }).get('p')!.consistency).toBe('lease');
    }
  });

  it('loads from a policies file', () => {
    const c = parseConfig('policies:\n  p: { algorithm: gcra, limit: 100, period: 1m, consistency: lease, lease: { ttlMs: 3s } }\n', 'policies.yaml');
    expect(c.policies.get('p')!.lease).toStrictEqual({ ttlMs: 3000, idleMs: 1000, maxShare: 0.25 });
    expect(() => parseConfig('policies:\n  p: { algorithm: gcra, limit: 100, period: 1m, consistency: lease, lease: { ttlMs: 1 } }\n', 'policies.yaml'))
      .toThrow('policies.yaml: policies.p.lease.ttlMs: must be from 10 ms to 600000 ms (got 1)');
  });
});
