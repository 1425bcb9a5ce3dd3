/**
 * Express (4 and 5) middleware: `app.use(sluiceExpress({ limiter, policy: 'free' }))`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createDecider, type RateLimitOptions } from './core.js';
import { apply, remoteAddress } from './node-http.js';

export { sluiceExpressConcurrency, type ConcurrencyLimitOptions, type Leaser } from './concurrency.js';
export type { Checker, RateLimitOptions } from './core.js';

/** The parts of an Express request the middleware reads (`req.ip` honours Express's "trust proxy"). */
export type ExpressLikeRequest = IncomingMessage & { ip?: string };

/**
 * Returns `(req, res, next)`: sets the RateLimit headers and calls `next()`, or answers 429 with
 * `Retry-After`. A limiter failure follows `onError` (default: let the request through). The default key is
 * `req.ip`, else the socket's remote address.
 */
export function sluiceExpress<Req extends ExpressLikeRequest = ExpressLikeRequest>(
  o: RateLimitOptions<Req>,
): (req: Req, res: ServerResponse, next: (err?: unknown) => void) => void {
  const decide = createDecider<Req>(o, (req) => req.ip ?? remoteAddress(req));
  return (req, res, next) => {
    decide(req).then((out) => {
      if (apply(out, res)) next();
    }, next);
  };
}
