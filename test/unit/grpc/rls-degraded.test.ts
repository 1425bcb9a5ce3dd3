/**
 * A RateLimitResponse for descriptors Redis did not decide (a strict policy whose store failed: onStoreError)
 * says so, as /v1/check and /v1/auth say it with `Sluice-Degraded`: Envoy's protocol has no field for it, so
 * the mark is a response header it adds (`response_headers_to_add`), naming each rule that decided a
 * descriptor, in descriptor order; a response Redis decided whole has none.
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { buildResponse, planRequest, routeTable, type RlsRequest } from '../../../src/grpc/rls.js';
import type { Decision } from '../../../src/types/decision.js';

const policies = compilePolicies({
  a: { algorithm: 'fixed_window', limit: 3, period: '1m', descriptors: ['tenant'] },
  b: { algorithm: 'fixed_window', limit: 5, period: '1m', descriptors: ['tenant'] },
});
const table = routeTable(policies);

function request(domains: string[]): RlsRequest {
  return { domain: 'x', hits_addend: 0, descriptors: domains.map(() => ({ entries: [{ key: 'tenant', value: 't' }], limit: null, hits_addend: null })) };
}

const plans = (n: number) => planRequest({ ...request(Array(n).fill('a')), domain: 'a' }, table, 16);

const redis: Decision = { allowed: true, limit: 3, remaining: 2, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'a' };
const open: Decision = { allowed: true, limit: 3, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, policy: 'a', degraded: true, degradedBy: 'open' };
const closed: Decision = { allowed: false, limit: 3, remaining: 0, resetAfterMs: 1000, retryAfterMs: 1000, policy: 'a', degraded: true, degradedBy: 'closed' };
const local: Decision = { allowed: true, limit: 3, remaining: 1, resetAfterMs: 40_000, retryAfterMs: 0, policy: 'a', degraded: true, degradedBy: 'local' };

const header = (ds: Decision[]): string | undefined =>
  buildResponse(plans(ds.length), ds, table).response_headers_to_add.find((h) => h.key === 'Sluice-Degraded')?.value;

describe('gRPC (Envoy RLS): a decision Redis did not make says so', () => {
  it('one descriptor: Sluice-Degraded names its rule', () => {
    expect(header([open])).toBe('open');
    expect(header([closed])).toBe('closed');
    expect(header([local])).toBe('local');
  });
  it('decided by Redis: no Sluice-Degraded', () => {
    expect(header([redis])).toBeUndefined();
    expect(header([redis, redis])).toBeUndefined();
  });
  it('several descriptors: each rule once, in descriptor order; those Redis decided add none', () => {
    expect(header([redis, local, closed, local])).toBe('local, closed');
    expect(header([closed, redis, open])).toBe('closed, open');
  });
  it('the other headers are as before', () => {
    expect(buildResponse(plans(1), [closed], table).response_headers_to_add).toStrictEqual([
      { key: 'RateLimit-Policy', value: '"a";q=3;w=60' },
      { key: 'RateLimit', value: '"a";r=0;t=1' },
      { key: 'Retry-After', value: '1' },
      { key: 'Sluice-Degraded', value: 'closed' },
    ]);
  });
});
