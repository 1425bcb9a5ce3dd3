/**
 * The rate-limit response headers read back with a real Structured Fields parser (npm `structured-headers`,
 * RFC 8941), so a header that only looks right (a 16-digit integer, a bad string escape) fails the test.
 */
import { parseItem, parseList } from 'structured-headers';

/** One List member: its String value and its parameters. */
export interface SfMember {
  name: string;
  params: Record<string, unknown>;
}

/** Parses a `RateLimit` or `RateLimit-Policy` value. @throws when it is not a List of String items. */
export function parseRateLimitList(value: string): SfMember[] {
  return parseList(value).map(([item, params]) => {
    if (typeof item !== 'string') throw new Error(`list member ${JSON.stringify(item)} is not a String (${value})`);
    return { name: item, params: Object.fromEntries(params) };
  });
}

/** Parses a `Retry-After` value: delay-seconds, an sf-integer of at least 1 here. @throws otherwise. */
export function parseRetryAfter(value: string): number {
  const [n] = parseItem(value);
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) throw new Error(`Retry-After ${JSON.stringify(value)} is not delay-seconds ≥ 1`);
  return n;
}

/**
 * Every rate-limit header of an answer, parsed (so the test fails on any that is not valid): returns the raw
 * values, null for an absent header.
 */
export function checkedRateHeaders(headers: Headers): { ratelimit: string | null; 'ratelimit-policy': string | null; 'retry-after': string | null } {
  const out = {
    ratelimit: headers.get('ratelimit'),
    'ratelimit-policy': headers.get('ratelimit-policy'),
    'retry-after': headers.get('retry-after'),
  };
  if (out.ratelimit !== null) parseRateLimitList(out.ratelimit);
  if (out['ratelimit-policy'] !== null) parseRateLimitList(out['ratelimit-policy']);
  if (out['retry-after'] !== null) parseRetryAfter(out['retry-after']);
  return out;
}
