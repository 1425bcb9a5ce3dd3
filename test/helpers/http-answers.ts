/**
 * What the HTTP front's tests (test/integration/http*.test.ts) check of an answer: a problem+json body naming
 * its field, the rate-limit headers parsed and checked, a /v1/check URL.
 */
import { expect } from 'vitest';
import { query, type Answer, type TestServer } from './server.js';
import { checkedRateHeaders } from './ratelimit.js';

const TITLES: Record<number, string> = {
  400: 'Bad Request', 404: 'Not Found', 405: 'Method Not Allowed', 413: 'Content Too Large', 415: 'Unsupported Media Type',
};

/** The facts of a problem answer, for one exact comparison. */
export function problemFacts(a: Answer): Record<string, unknown> {
  const p = (a.json ?? {}) as Record<string, unknown>;
  return {
    status: a.status,
    contentType: a.contentType,
    bodyStatus: p.status,
    type: p.type,
    title: p.title,
    field: p.field,
    detailNamesField: typeof p.detail === 'string' && typeof p.field === 'string' && p.detail.startsWith(`${p.field}: `),
  };
}

/** Expects `a` to be a problem+json answer of `status` whose detail names `field`. */
export function expectProblem(a: Answer, status: number, field: string, where = ''): void {
  expect(problemFacts(a), `${where} ${a.text}`).toStrictEqual({
    status, contentType: 'application/problem+json', bodyStatus: status, type: 'about:blank', title: TITLES[status],
    field, detailNamesField: true,
  });
}

/** The RateLimit, RateLimit-Policy and Retry-After headers of `a`, each checked well formed. */
export function rateHeaders(a: Answer): Record<string, string | null> {
  return checkedRateHeaders(a.headers);
}

/** String#isWellFormed (ES2024; the project's lib is ES2023). */
export function isWellFormed(s: string): boolean {
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/** `s`'s /v1/check URL with `params` as its query. */
export function checkUrl(s: TestServer, params: Record<string, string | number>): string {
  return `${s.url}/v1/check?${query(params)}`;
}
