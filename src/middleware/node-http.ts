/**
 * Rate limiting for Node's `http` server: `const limit = rateLimit({...}); if (!(await limit(req, res))) return;`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createDecider, type Outcome, type RateLimitOptions } from './core.js';

export { concurrencyLimit, type ConcurrencyLimitOptions, type Leaser } from './concurrency.js';
export type { Checker, Outcome, RateLimitOptions } from './core.js';
export { QUOTA_EXCEEDED_TYPE } from './core.js';

/**
 * Returns `limit(req, res)`: it decides the request's check, sets `RateLimit-Policy` and `RateLimit`, and
 * resolves `true` to go on, or answers 429 (with `Retry-After` when the wait is finite) and resolves `false`.
 * The default key is the socket's remote address.
 */
export function rateLimit(o: RateLimitOptions<IncomingMessage>): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  const decide = createDecider(o, remoteAddress);
  return async (req, res) => {
    const out = await decide(req);
    return apply(out, res);
  };
}

/** Applies an outcome to a Node response: sets the headers, and answers when it says reply. Returns whether to go on. */
export function apply(out: Outcome, res: ServerResponse): boolean {
  if (res.headersSent) return out.action === 'next';
  for (const [k, v] of out.headers) res.setHeader(k, v);
  if (out.action === 'next') return true;
  res.statusCode = out.status;
  res.setHeader('Content-Type', 'application/problem+json');
  res.end(out.body);
  return false;
}

/** The socket's remote address, or undefined when the socket is gone. */
export function remoteAddress(req: IncomingMessage): string | undefined {
  return req.socket?.remoteAddress ?? undefined;
}
