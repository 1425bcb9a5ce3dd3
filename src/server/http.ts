import uWS from 'uWebSockets.js';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { Limiter } from '../types.js';
import { createMetrics, type ServerMetrics } from '../metrics/registry.js';
import { invalidArgument, methodNotAllowed, notFound, listenFailed } from '../util/errors.js';
import { Activity, type ActivityOptions } from '../metrics/activity.js';
import { registerStream, type StreamEndpoint, type StreamOptions } from './ws.js';
import { registerLeaseRoutes } from './leases.js';
import { refuseAmbiguousFraming } from './framing.js';
import { closeApp, listenExclusive, listenShared } from './uws.js';
import { createStatusSource, type StatusSource } from './status.js';
import { startFrontThreads, type FrontThreads } from './threads.js';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML, STATUS_PAGE_TYPE } from './status-page.js';
import { Exchanges, statusLine } from './exchange.js';
import { CheckAnswers } from './check-answer.js';
import { registerCheckRoutes } from './check-routes.js';

export interface ServerOptions {
  limiter: Limiter;
  /** Interface to bind. Default 0.0.0.0. */
  host?: string;
  /** TCP port; 0 picks a free one. Default 8080. */
  port?: number;
  /** Largest request body in bytes; larger gets 413. Default 65,536. */
  maxBodyBytes?: number;
  /** Most checks in one POST /v1/check batch; more gets 413. Default 1,000. */
  maxBatchItems?: number;
  /** What /v1/auth answers on a denial: 429, or 403 for nginx auth_request. Default 429. */
  authDenyStatus?: 429 | 403;
  logger?: Logger;
  /** `/v1/stream` (WebSocket) limits and the clock for its subscriptions; `false` leaves the route out. */
  stream?: StreamOptions | false;
  /**
   * Per-policy rates, near-limit counts and hot keys (src/metrics/activity.ts), for `/v1/status`, `/v1/hot`
   * and the metrics; `false`: none of them. Default on (100 hot keys per policy).
   */
  activity?: ActivityOptions | false;
  /** Hot keys per policy exported as `sluice_hot_key_*` metrics (the top N); 0: none. Default 10. */
  hotKeyMetrics?: number;
  /**
   * Serves the status page (`GET /`, `GET /status`) and `GET /v1/status` on this port, without a token.
   * Default false: `sluice serve` turns it on when no admin port is configured (else the admin API serves it).
   */
  statusPage?: boolean;
  /**
   * HTTP front threads, this one included: each further one is a worker thread with its own uWS app on the
   * same port (SO_REUSEPORT) whose checks go to the owning shard through shared memory (src/server/threads.ts).
   * More than 1 needs a limiter with shards and local policies; at most the machine's cores. Default 1.
   */
  threads?: number;
  /** Internal (front threads): listen with SO_REUSEPORT, beside the other front threads, not exclusively. */
  reusePort?: boolean;
  /**
   * Internal (front threads): renders `GET /metrics` elsewhere (an extra thread asks the main thread, which
   * sums every thread's counters), since a scrape lands on whichever thread the kernel hands the connection.
   */
  scrape?: () => Promise<string>;
}

export interface SluiceServer {
  /** The port listened on. */
  readonly port: number;
  /** The `/v1/stream` endpoint (stats, tick), unless `stream: false`. */
  readonly stream?: StreamEndpoint;
  /** Stops accepting, lets requests in flight finish, then closes every connection. Does not close the limiter. */
  close(): Promise<void>;
  /** This server's Prometheus metrics (served on `GET /metrics`). */
  readonly metrics: ServerMetrics;
  /** `/v1/status` and `/v1/hot`, for the admin API to serve (src/server/status.ts). */
  readonly status: StatusSource;
}

/**
 * The HTTP front on uWebSockets.js: `GET|POST /v1/check` and `/v1/auth` (src/server/check-routes.ts),
 * `/v1/acquire` and `/v1/release` (leases.ts), `/v1/stream` (ws.ts), `/healthz`, `/readyz`, `/metrics`, and the
 * status page when asked; with `threads` > 1, the extra front threads on the same port (threads.ts).
 * @throws SluiceError INVALID_ARGUMENT naming `threads`, CONFIG naming `port` when the port cannot be had;
 *   Error when uWebSockets.js's native binary is not loaded.
 */
export async function startServer(o: ServerOptions): Promise<SluiceServer> {
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const activity = o.activity === false ? null : new Activity((name) => o.limiter.policies.has(name), o.activity);
  const metrics = createMetrics(o.limiter, { activity, hotKeyMetrics: o.hotKeyMetrics });
  const status = createStatusSource(o.limiter, activity);
  const limiter = metrics.instrument(o.limiter);
  /** The limiter without the metrics wrapper: the check routes count their own checks (one promise fewer). */
  const raw = o.limiter;
  const maxBodyBytes = o.maxBodyBytes ?? 65_536;
  const log = o.logger;
  const ex = new Exchanges(metrics, log);
  const app: TemplatedApp = refuseAmbiguousFraming(uWS.App());

  registerCheckRoutes(app, {
    raw, limiter, metrics, exchanges: ex, answers: new CheckAnswers(ex, metrics),
    maxBodyBytes, maxBatchItems: o.maxBatchItems ?? 1_000, authDenyStatus: o.authDenyStatus ?? 429,
  });
  // concurrency leases: POST /v1/acquire, POST /v1/release (src/server/leases.ts)
  registerLeaseRoutes(app, {
    limiter: raw, maxBodyBytes,
    begin: (res) => ex.begin(res),
    json: (x, body) => ex.json(x, body),
    fail: (x, e, w) => ex.fail(x, e, w),
    refuseDraining: (x) => ex.refuseDraining(x.res, x),
  });

  // a GET-only route answers any other method 405 with `Allow: GET`, as /v1/check and the lease routes do
  const getOnly = (path: string, handler: (res: HttpResponse, req: HttpRequest) => void): void => {
    app.get(path, handler);
    app.any(path, (res, req) => ex.fail(ex.begin(res), methodNotAllowed(req.getMethod().toUpperCase(), path, 'GET'), { allow: 'GET' }));
  };

  getOnly('/healthz', (res) => {
    const x = ex.begin(res);
    ex.reply(x, (r) => r.writeHeader('Content-Type', 'application/json').end('{"status":"ok"}'));
  });

  getOnly('/metrics', (res) => {
    const x = ex.begin(res);
    // with front threads, every thread's counters (its decisions, its responses) summed here
    (o.scrape?.() ?? metrics.render(fronts === null ? undefined : fronts.metrics)).then((text) => ex.reply(x, (r) => r.writeHeader('Content-Type', metrics.contentType).end(text)), (e) => ex.fail(x, e));
  });

  getOnly('/readyz', (res) => {
    const x = ex.begin(res);
    ex.reply(x, (r) => {
      if (ex.draining) r.writeStatus(statusLine(503)).writeHeader('Content-Type', 'application/json').end('{"status":"draining"}');
      else {
        // A Redis outage is reported but does not take the instance out: its policies' onStoreError still answer.
        const store = limiter.storeStatus();
        // `policies`: the version of the policy set in force (hex, no escaping needed).
        const policies = `"policies":"${limiter.version}"`;
        r.writeHeader('Content-Type', 'application/json')
          .end(store === 'none' ? `{"status":"ready",${policies}}` : `{"status":"ready","store":"${store}",${policies}}`);
      }
    });
  });

  if (o.statusPage === true) {
    const page = (res: HttpResponse): void => {
      const x = ex.begin(res);
      ex.reply(x, (r) => {
        r.writeHeader('Content-Type', STATUS_PAGE_TYPE).writeHeader('Cache-Control', 'no-store');
        for (const [k, v] of Object.entries(STATUS_PAGE_HEADERS)) r.writeHeader(k, v);
        r.end(STATUS_PAGE_HTML);
      });
    };
    getOnly('/', page);
    getOnly('/status', page);
    getOnly('/v1/status', (res) => {
      const x = ex.begin(res);
      status.statusJson().then((text) => ex.reply(x, (r) => r.writeHeader('Content-Type', 'application/json').writeHeader('Cache-Control', 'no-store').end(text)), (e) => ex.fail(x, e));
    });
  }

  const stream = o.stream === false ? undefined : registerStream(app, limiter, o.stream, log, { raw, metrics });

  app.any('/*', (res, req) => {
    const x = ex.begin(res);
    ex.fail(x, notFound(req.getUrl()));
  });

  const threads = o.threads ?? 1;
  if (!Number.isInteger(threads) || threads < 1) throw invalidArgument('threads', `must be an integer >= 1 (got ${String(threads)})`);
  // Linux does not let a second SO_REUSEPORT socket join one bound to port 0: the threads get a port picked first
  const wanted = threads > 1 && o.port === 0 ? await freePort(o.host ?? '0.0.0.0') : o.port ?? 8080;
  const { token, port } = await listen(app, o.host ?? '0.0.0.0', wanted, threads > 1 || o.reusePort === true);
  let fronts: FrontThreads | null = null;
  if (threads > 1) {
    try {
      fronts = await startFrontThreads(raw, threads - 1, {
        host: o.host ?? '0.0.0.0', port, maxBodyBytes: o.maxBodyBytes, maxBatchItems: o.maxBatchItems, authDenyStatus: o.authDenyStatus,
        stream: o.stream !== false, statusPage: o.statusPage, activity: o.activity !== false, hotKeyMetrics: o.hotKeyMetrics,
      }, () => metrics.render(fronts?.metrics));
    } catch (e) {
      uWS.us_listen_socket_close(token);
      closeApp(app);
      throw e;
    }
  }
  log?.info({ port, threads }, 'listening');

  return {
    metrics,
    status,
    port,
    stream,
    async close(): Promise<void> {
      if (ex.draining) return;
      ex.draining = true;
      activity?.close();
      uWS.us_listen_socket_close(token);
      await fronts?.close();
      await stream?.close();
      await ex.settled();
      // The last answer may have been written inside uWS's own dispatch, still corked: let the loop turn
      // finish (and uWS flush it) before closing the sockets.
      await new Promise<void>((r) => setImmediate(r));
      closeApp(app);
    },
  };

}

/**
 * Listens with an exclusive port: uWS would otherwise set SO_REUSEPORT, and a second instance started on the
 * same port by mistake would silently take half the connections, each with its own counters. Front threads
 * (`threads` > 1) need SO_REUSEPORT; then that guard is gone (Linux still lets only the same user join).
 * (The (host, port, options, cb) form exists at run time; the bundled d.ts lacks it.)
 */
function listen(app: TemplatedApp, host: string, port: number, reusePort: boolean): Promise<{ token: us_listen_socket; port: number }> {
  return new Promise((resolve, reject) => {
    // front threads share the port (SO_REUSEPORT)
    (reusePort ? listenShared : listenExclusive)(app, host, port, (token) => {
      if (!token) reject(listenFailed(`cannot listen on ${host}:${port} (in use?)`));
      else resolve({ token, port: uWS.us_socket_local_port(token) });
    });
  });
}

/** A port free on `host` now (bound and released by node:net), for front threads to share. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createNetServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

export type { HttpRequest };
