/**
 * Baseline: the usual way to build this service in Node: node:http plus rate-limiter-flexible's in-memory
 * limiters. `GET /v1/check?policy=free&key=K` answers 200 with a JSON decision and the same RateLimit headers
 * as sluice. It approximates sluice's built-in `free` policy with fixed windows (rlf has no token bucket):
 * 100 per 60 s per key, then a global guard of 20,000 per 6 s (200,000/min with bursts of 20,000, as the
 * default config's `global`). Keep-alive and pipelining are node:http's own.
 *
 * As a bench child (`--bench-child '{}'`) it listens on 127.0.0.1, any free port. By hand:
 * `node dist/bench/baselines/node-http-rlf.js --bench-child '{"port":8082}'`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { isChildEntry, serverMain, type Listening } from '../lib/harness.js';

const POLICY_HEADER = '"free";q=100;w=60, "global";q=200000;w=60';

export function startNodeHttpRlf(host = '127.0.0.1', port = 0): Promise<Listening> {
  const perKey = new RateLimiterMemory({ points: 100, duration: 60, keyPrefix: 'free' });
  const global = new RateLimiterMemory({ points: 20_000, duration: 6, keyPrefix: 'global' });

  const answer = (res: ServerResponse, allowed: boolean, policy: string, limit: number, r: RateLimiterRes): void => {
    const remaining = Math.max(0, r.remainingPoints);
    const resetMs = Math.max(0, r.msBeforeNext);
    res.statusCode = 200;
    res.setHeader('RateLimit-Policy', POLICY_HEADER);
    res.setHeader('RateLimit', `"${policy}";r=${remaining};t=${Math.ceil(resetMs / 1000)}`);
    if (!allowed) res.setHeader('Retry-After', String(Math.max(1, Math.ceil(resetMs / 1000))));
    res.setHeader('Content-Type', 'application/json');
    res.end(`{"allowed":${allowed},"limit":${limit},"remaining":${remaining},"resetAfterMs":${resetMs},` +
      `"retryAfterMs":${allowed ? 0 : resetMs},"policy":"${policy}"}`);
  };
  const problem = (res: ServerResponse, status: number, detail: string): void => {
    res.statusCode = status;
    res.setHeader('Content-Type', 'application/problem+json');
    res.end(JSON.stringify({ status, detail }));
  };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path !== '/v1/check' || req.method !== 'GET') return problem(res, 404, `no route for ${req.method} ${path}`);
    const params = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    const policy = params.get('policy');
    const key = params.get('key');
    if (policy !== 'free') return problem(res, 400, 'policy: unknown policy');
    if (key === null || key === '') return problem(res, 400, 'key: is required');
    perKey.consume(key).then(
      () => global.consume('*').then(
        (g) => answer(res, true, 'free', 100, g),
        (g: unknown) => (g instanceof RateLimiterRes ? answer(res, false, 'global', 200_000, g) : problem(res, 500, String(g))),
      ),
      (r: unknown) => (r instanceof RateLimiterRes ? answer(res, false, 'free', 100, r) : problem(res, 500, String(r))),
    );
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => new Promise<void>((r) => {
          server.close(() => r());
          server.closeAllConnections();
        }),
      });
    });
  });
}

if (isChildEntry(import.meta.url)) serverMain<{ port?: number }>((spec) => startNodeHttpRlf('127.0.0.1', spec.port ?? 0));
