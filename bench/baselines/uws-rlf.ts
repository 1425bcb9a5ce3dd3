/**
 * Baseline: the server a Node team would hand-build for speed: uWebSockets.js plus rate-limiter-flexible's
 * in-memory limiters, the same two fixed windows as node-http-rlf.ts (100 per 60 s per key, then a global
 * guard of 20,000 per 6 s) and the same JSON decision and RateLimit headers. `GET /v1/check?policy=free&key=K`.
 * rlf's `consume()` returns a promise, so the answer is written in a microtask after the handler returns
 * (inside `cork`, with `onAborted` registered first), as any async uWS handler must.
 *
 * As a bench child (`--bench-child '{}'`) it listens on 127.0.0.1, any free port. By hand:
 * `node dist/bench/baselines/uws-rlf.js --bench-child '{"port":8083}'`.
 */
import uWS from 'uWebSockets.js';
import type { HttpResponse } from 'uWebSockets.js';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { isChildEntry, serverMain, type Listening } from '../lib/harness.js';

const POLICY_HEADER = '"free";q=100;w=60, "global";q=200000;w=60';

interface Pending {
  res: HttpResponse;
  aborted: boolean;
}

export function startUwsRlf(host = '127.0.0.1', port = 0): Promise<Listening> {
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const perKey = new RateLimiterMemory({ points: 100, duration: 60, keyPrefix: 'free' });
  const global = new RateLimiterMemory({ points: 20_000, duration: 6, keyPrefix: 'global' });

  const answer = (p: Pending, allowed: boolean, policy: string, limit: number, r: RateLimiterRes): void => {
    if (p.aborted) return;
    const remaining = Math.max(0, r.remainingPoints);
    const resetMs = Math.max(0, r.msBeforeNext);
    p.res.cork(() => {
      p.res.writeStatus('200 OK');
      p.res.writeHeader('RateLimit-Policy', POLICY_HEADER);
      p.res.writeHeader('RateLimit', `"${policy}";r=${remaining};t=${Math.ceil(resetMs / 1000)}`);
      if (!allowed) p.res.writeHeader('Retry-After', String(Math.max(1, Math.ceil(resetMs / 1000))));
      p.res.writeHeader('Content-Type', 'application/json');
      p.res.end(`{"allowed":${allowed},"limit":${limit},"remaining":${remaining},"resetAfterMs":${resetMs},` +
        `"retryAfterMs":${allowed ? 0 : resetMs},"policy":"${policy}"}`);
    });
  };
  const problem = (p: Pending, status: string, detail: string): void => {
    if (p.aborted) return;
    p.res.cork(() => {
      p.res.writeStatus(status).writeHeader('Content-Type', 'application/problem+json').end(JSON.stringify({ detail }));
    });
  };

  const app = uWS.App();
  app.get('/v1/check', (res, req) => {
    // Read the request before anything async: uWS's req lives on the stack of this call.
    const policy = req.getQuery('policy');
    const key = req.getQuery('key');
    const p: Pending = { res, aborted: false };
    res.onAborted(() => {
      p.aborted = true;
    });
    if (policy !== 'free') return problem(p, '400 Bad Request', 'policy: unknown policy');
    if (!key) return problem(p, '400 Bad Request', 'key: is required');
    perKey.consume(key).then(
      () => global.consume('*').then(
        (g) => answer(p, true, 'free', 100, g),
        (g: unknown) => (g instanceof RateLimiterRes ? answer(p, false, 'global', 200_000, g) : problem(p, '500 Internal Server Error', String(g))),
      ),
      (r: unknown) => (r instanceof RateLimiterRes ? answer(p, false, 'free', 100, r) : problem(p, '500 Internal Server Error', String(r))),
    );
  });
  app.any('/*', (res) => {
    res.cork(() => res.writeStatus('404 Not Found').end());
  });
  return new Promise((resolve, reject) => {
    app.listen(host, port, (token) => {
      if (!token) return reject(new Error(`uWS + rlf: cannot listen on ${host}:${port}`));
      resolve({
        port: uWS.us_socket_local_port(token),
        close: () => {
          uWS.us_listen_socket_close(token);
          (app as unknown as { close(): void }).close();
        },
      });
    });
  });
}

if (isChildEntry(import.meta.url)) serverMain<{ port?: number }>((spec) => startUwsRlf('127.0.0.1', spec.port ?? 0));
