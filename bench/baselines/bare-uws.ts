/**
 * Baseline: a bare uWebSockets.js server that answers every request with a fixed JSON decision, the same
 * shape and headers sluice sends: the ceiling for any uWS-based service on this machine (no parsing of the
 * query, no limiter, no promise).
 *
 * As a bench child (`--bench-child '{}'`) it listens on 127.0.0.1, any free port, and reports the port to the
 * runner. By hand: `node dist/bench/baselines/bare-uws.js --bench-child '{"port":8081}'`.
 */
import uWS from 'uWebSockets.js';
import { isChildEntry, serverMain, type Listening } from '../lib/harness.js';

const BODY = '{"allowed":true,"limit":100,"remaining":99,"resetAfterMs":600,"retryAfterMs":0,"policy":"free"}';

export function startBareUws(host = '127.0.0.1', port = 0): Promise<Listening> {
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const app = uWS.App();
  app.any('/*', (res) => {
    res.cork(() => {
      res.writeStatus('200 OK');
      res.writeHeader('RateLimit-Policy', '"free";q=100;w=60');
      res.writeHeader('RateLimit', '"free";r=99;t=1');
      res.writeHeader('Content-Type', 'application/json');
      res.end(BODY);
    });
  });
  return new Promise((resolve, reject) => {
    app.listen(host, port, (token) => {
      if (!token) return reject(new Error(`bare uWS: cannot listen on ${host}:${port}`));
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

if (isChildEntry(import.meta.url)) serverMain<{ port?: number }>((spec) => startBareUws('127.0.0.1', spec.port ?? 0));
