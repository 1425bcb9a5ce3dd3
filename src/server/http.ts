import uWS from 'uWebSockets.js';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { CheckRequest, Decision } from '../types/decision.js';
import type { Limiter } from '../types.js';
import type { CompiledLimit, CompiledPolicy } from '../config/policy-spec.js';
import { bodyText, checkFromJson, checkFromQuery, decisionJson } from '../wire/codec.js';
import { bindingLimit, rateLimitHeader, rateLimitPolicyHeader, retryAfterSeconds } from '../wire/headers.js';
import { AnswerBytes, answerTable, type PolicyAnswers } from '../wire/answer.js';
import { errorItem, problemOf, type Problem } from './problem.js';
import { authCheck } from './auth.js';
import { createMetrics, type ServerMetrics } from '../metrics/registry.js';
import { invalidArgument, serverDraining, methodNotAllowed, notFound, tooLarge, unsupportedMediaType, listenFailed } from '../util/errors.js';
import { engineOf } from '../engine/handle.js';
import type { DelayPlaces } from '../engine/delay.js';
import { takeWait } from '../wire/delay.js';
import { registerStream, type StreamEndpoint, type StreamOptions } from './ws.js';
import { readBody } from './body.js';
import { registerLeaseRoutes } from './leases.js';
import { refuseAmbiguousFraming } from './framing.js';
import { closeApp, listenExclusive, listenShared } from './uws.js';
import { Activity, type ActivityOptions } from '../metrics/activity.js';
import { createStatusSource, type StatusSource } from './status.js';
import { startFrontThreads, type FrontThreads } from './threads.js';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML, STATUS_PAGE_TYPE } from './status-page.js';

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

const STATUS_LINE: Record<number, string> = {
  200: '200 OK', 400: '400 Bad Request', 403: '403 Forbidden', 404: '404 Not Found', 405: '405 Method Not Allowed',
  409: '409 Conflict', 413: '413 Content Too Large', 415: '415 Unsupported Media Type', 429: '429 Too Many Requests',
  500: '500 Internal Server Error', 503: '503 Service Unavailable',
};

/** The status of the answer being written (uWS sends 200 unless told otherwise), counted by `reply`. */
let written = 200;
function statusLine(status: number): string {
  written = status;
  return STATUS_LINE[status] ?? `${status} Error`;
}

/** Per policy name of one policy set: `RateLimit-Policy` values, and the answers' fixed bytes. */
interface AnswerTables {
  headers: Map<string, string>;
  answers: Map<string, PolicyAnswers>;
}

/** One request's life: whether the client went away, so nothing is written to a dead response. */
interface Exchange {
  res: HttpResponse;
  aborted: boolean;
  /** Begun after close() started draining: not in flight when it did, so close() does not wait for it. */
  late: boolean;
  /** A delayed answer being held (onLimit: delay): stops its timer and frees its wait place if the client leaves. */
  cancel?: () => void;
}

/**
 * The HTTP front on uWebSockets.js: `GET|POST /v1/check`, `/v1/auth` (any method), `/healthz`, `/readyz`, `/metrics`.
 * A check the limiter decides synchronously (shards 0, a policy not in Redis) is answered inside uWS's
 * callback. Otherwise: reads every request fully before the first await, registers `onAborted`, and writes
 * the answer after async work inside `cork`.
 */
export async function startServer(o: ServerOptions): Promise<SluiceServer> {
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const activity = o.activity === false ? null : new Activity((name) => o.limiter.policies.has(name), o.activity);
  const metrics = createMetrics(o.limiter, { activity, hotKeyMetrics: o.hotKeyMetrics });
  const status = createStatusSource(o.limiter, activity);
  const limiter = metrics.instrument(o.limiter);
  /** The limiter without the metrics wrapper: the check routes count their own checks (one promise fewer). */
  const raw = o.limiter;
  const maxBody = o.maxBodyBytes ?? 65_536;
  const maxItems = o.maxBatchItems ?? 1_000;
  const denyStatus = o.authDenyStatus ?? 429;
  const log = o.logger;
  /**
   * Per policy set, per policy name: the `RateLimit-Policy` value and the answers' fixed bytes
   * (src/wire/answer.ts). A check's come from the set it was issued (and decided) under, so an answer written
   * after a reload never pairs the old decision with new headers.
   */
  const answerTables = new WeakMap<ReadonlyMap<string, CompiledPolicy>, AnswerTables>();
  let tables: AnswerTables = { headers: new Map(), answers: new Map() };
  let tablesOf: ReadonlyMap<string, CompiledPolicy> | null = null;
  const tablesFor = (set: ReadonlyMap<string, CompiledPolicy>): AnswerTables => {
    if (set !== tablesOf) {
      let t = answerTables.get(set);
      if (t === undefined) answerTables.set(set, (t = { headers: policyHeaderTable(set), answers: answerTable(set) }));
      tables = t;
      tablesOf = set;
    }
    return tables;
  };
  /** The bytes of the common answer (one at a time: cork runs its callback at once). */
  const answerBytes = new AnswerBytes();
  let inFlight = 0;
  let draining = false;
  let drained: (() => void) | null = null;

  const begin = (res: HttpResponse): Exchange => {
    const x: Exchange = { res, aborted: false, late: draining };
    inFlight++;
    res.onAborted(() => {
      x.aborted = true;
      x.cancel?.();
      finish();
    });
    return x;
  };
  const finish = (): void => {
    inFlight--;
    if (inFlight === 0 && drained) drained();
  };
  /** Writes an answer unless the client left; cork batches the writes into one syscall. */
  const reply = (x: Exchange, write: (res: HttpResponse) => void): void => {
    if (x.aborted) return;
    x.aborted = true; // answered: a later abort must not count twice
    replyNow(x.res, write);
    finish();
  };
  /** Writes an answer inside uWS's callback for the request (no exchange: nothing was awaited). */
  const replyNow = (res: HttpResponse, write: (res: HttpResponse) => void): void => {
    written = 200;
    res.cork(() => write(res));
    metrics.response(written);
  };
  const fail = (x: Exchange, e: unknown): void => reply(x, problemWriter(e));
  const failNow = (res: HttpResponse, e: unknown): void => replyNow(res, problemWriter(e));
  const problemWriter = (e: unknown): ((res: HttpResponse) => void) => {
    const p = problemOf(e);
    if (p.status >= 500) log?.warn({ err: e }, 'check failed');
    return (res) => writeProblem(res, p);
  };

  // The answer to a check is written by one shared function through these, so that an answer allocates no
  // closure for cork: cork runs its callback at once, and nothing in it writes another answer.
  let wRes: HttpResponse | null = null;
  let wDecision: Decision | null = null;
  let wCheck: CheckRequest | null = null;
  let wSet: ReadonlyMap<string, CompiledPolicy> | null = null;
  let wStatus = 0;
  const writeDecisionNow = (): void => {
    const d = wDecision!;
    const res = wRes!;
    const set = tablesFor(wSet!);
    const policy = wCheck!.policy;
    // uWS copies what it is given before it returns, so the reused buffers behind these views are free again
    const head = answerBytes.header(d, set.answers.get(policy), wStatus !== 0, wStatus === 0);
    if (head !== null) {
      if (wStatus === 0) {
        res.writeHeader('RateLimit-Policy', head);
        res.end(answerBytes.json(d)!);
      } else {
        if (wStatus !== 200) res.writeStatus(statusLine(wStatus));
        res.writeHeader('RateLimit-Policy', head);
        res.end();
      }
      return;
    }
    // the rare decisions (reason, degraded, delay, shadow, staleness, an unknown limit): the same bytes as strings
    const rateLimit = rateLimitFields(d, set.headers.get(policy), bindingLimit(wSet!, policy, d.policy), wStatus !== 0);
    if (wStatus === 0) {
      res.writeHeader(rateLimit.name, `${rateLimit.value}\r\nContent-Type: application/json`);
      res.end(decisionJson(d));
    } else {
      if (wStatus !== 200) res.writeStatus(statusLine(wStatus));
      res.writeHeader(rateLimit.name, rateLimit.value);
      res.end();
    }
  };
  /**
   * Answers a check with its decision: `auth` 0 writes the decision as JSON (/v1/check, always 200), else the
   * status to send (/v1/auth: 200, or the deny status) with the headers only. `set`: the policies in force
   * when the check was issued.
   */
  const answer = (x: Exchange, d: Decision, req: CheckRequest, auth: number, set: ReadonlyMap<string, CompiledPolicy>): void => {
    if (x.aborted) return;
    x.aborted = true; // answered: a later abort must not count twice
    answerNow(x.res, d, req, auth, set);
    finish();
  };
  /**
   * {@link answer} with no exchange. `inHandler`: called from the route's handler itself, where uWS has the
   * socket corked already (as bare uWS servers answer), so the writes need no cork() call of their own.
   */
  const answerNow = (res: HttpResponse, d: Decision, req: CheckRequest, auth: number, set: ReadonlyMap<string, CompiledPolicy>, inHandler = false): void => {
    wRes = res;
    wDecision = d;
    wCheck = req;
    wSet = set;
    wStatus = auth;
    try {
      if (inHandler) writeDecisionNow();
      else res.cork(writeDecisionNow);
    } finally {
      wRes = wDecision = wCheck = wSet = null;
    }
    metrics.response(auth === 0 ? 200 : auth);
  };

  /**
   * The limiter's synchronous path, when it has one (shards 0: see Front.checkNow): a check decided there is
   * answered inside uWS's callback, with no promise, microtask, abort handler or exchange.
   */
  const checkNow = engineOf(raw)?.checkNow ?? null;

  /**
   * Decides `req` and answers it (`auth`: see {@link answer}), counting the check in the metrics. `x` null:
   * called inside uWS's callback for the request with no exchange begun; one is begun on `res` only if the
   * check has to be awaited.
   */
  /**
   * Once draining, a check whose request arrives after (on a kept-alive connection) is refused and its
   * connection closed, not decided: close() waits only for the requests in flight when it began, so a later
   * one could be decided (its tokens spent) and its answer cut off by the socket closing.
   */
  const refuseDraining = (res: HttpResponse, x: Exchange | null): void => {
    const w = (r: HttpResponse): void => writeProblem(r, problemOf(serverDraining()), undefined, true);
    if (x === null) replyNow(res, w);
    else reply(x, w);
  };

  /**
   * Holds a delayed answer (onLimit: delay) until its delay has passed, then writes it. A client that leaves
   * first frees the wait place (src/engine/delay.ts), never the tokens: they were spent at decision time.
   */
  const hold = (res: HttpResponse, x: Exchange | null, d: Decision, req: CheckRequest, status: number, set: ReadonlyMap<string, CompiledPolicy>): void => {
    const ex = x ?? begin(res);
    const timer = setTimeout(() => {
      ex.cancel = undefined;
      places?.release(d);
      answer(ex, d, req, status, set);
    }, d.delayMs);
    ex.cancel = (): void => {
      clearTimeout(timer);
      places?.release(d);
    };
  };
  const places: DelayPlaces | null = engineOf(raw)?.delays ?? null;

  const runCheck = (res: HttpResponse, x: Exchange | null, req: CheckRequest, auth = 0): void => {
    if (x === null ? draining : x.late) return refuseDraining(res, x);
    let held: boolean;
    try {
      held = takeWait(req, raw.policies);
    } catch (e) {
      return x === null ? failNow(res, e) : fail(x, e);
    }
    const set = raw.policies; // the set this check is decided under (a reload after this line does not apply to it)
    if (checkNow !== null) {
      const begun = metrics.now();
      let d: Decision | undefined;
      try {
        d = checkNow(req);
      } catch (e) {
        metrics.failed(req.policy, e, begun, metrics.now());
        return x === null ? failNow(res, e) : fail(x, e);
      }
      if (d !== undefined) {
        metrics.decided(req.policy, d, begun, metrics.now(), req);
        const status = auth === 0 ? 0 : d.allowed ? 200 : auth;
        if (held && d.delayMs !== undefined) return hold(res, x, d, req, status, set);
        return x === null ? answerNow(res, d, req, status, set, true) : answer(x, d, req, status, set);
      }
    }
    const ex = x ?? begin(res);
    const started = metrics.started();
    raw.check(req).then((d) => {
      metrics.decided(req.policy, d, started, undefined, req);
      if (held && d.delayMs !== undefined) return hold(ex.res, ex, d, req, auth === 0 ? 0 : 200, set);
      answer(ex, d, req, auth === 0 ? 0 : d.allowed ? 200 : auth, set);
    }, (e: unknown) => {
      metrics.failed(req?.policy, e, started);
      fail(ex, e);
    });
  };

  const app: TemplatedApp = refuseAmbiguousFraming(uWS.App());

  app.get('/v1/check', (res, req) => {
    let check: CheckRequest;
    try {
      check = checkFromQuery(req.getQuery() ?? '');
    } catch (e) {
      return failNow(res, e);
    }
    runCheck(res, null, check);
  });

  app.post('/v1/check', (res, req) => {
    const x = begin(res);
    const type = req.getHeader('content-type');
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      return reply(x, (r) => writeProblem(r, problemOf(unsupportedMediaType(type, 'application/json'))));
    }
    readBody(x.res, maxBody, (body) => {
      if (body === null) {
        // answer now and drop the connection rather than read the rest of an oversize body
        return reply(x, (r) => writeProblem(r, problemOf(tooLarge('body', `larger than ${maxBody} bytes`)), undefined, true));
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(bodyText(body));
      } catch (e) {
        return fail(x, e instanceof SyntaxError ? invalidArgument('body', `is not valid JSON (${e.message})`) : e);
      }
      const checks = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
        ? (parsed as { checks?: unknown }).checks : undefined;
      if (checks === undefined) {
        let check: CheckRequest;
        try {
          check = checkFromJson(parsed);
        } catch (e) {
          return fail(x, e);
        }
        return runCheck(x.res, x, check);
      }
      batch(x, parsed as Record<string, unknown>);
    });
  });

  /** `{checks: [...]}`: one result per item, a bad item gets its own error and the rest go on. */
  const batch = (x: Exchange, body: Record<string, unknown>): void => {
    if (x.late) return refuseDraining(x.res, x);
    const checks = body.checks;
    const extra = Object.keys(body).find((k) => k !== 'checks');
    if (extra !== undefined) return fail(x, invalidArgument(extra, 'is not allowed beside checks'));
    if (!Array.isArray(checks) || checks.length === 0) return fail(x, invalidArgument('checks', 'must be a non-empty array'));
    if (checks.length > maxItems) {
      return reply(x, (r) => writeProblem(r, problemOf(tooLarge('checks', `at most ${maxItems} items per batch (got ${checks.length})`))));
    }
    const results = checks.map((item, i) => {
      const at = `checks[${i}]`;
      try {
        return limiter.check(checkFromJson(item, at)).catch((e) => itemError(e, at));
      } catch (e) {
        return Promise.resolve(itemError(e, at));
      }
    });
    Promise.all(results).then((rs) => reply(x, (res) => {
      res.writeStatus(statusLine(200));
      res.writeHeader('Content-Type', 'application/json');
      res.end(`{"results":[${rs.map((r) => ('error' in r ? JSON.stringify(r) : decisionJson(r))).join(',')}]}`);
    }), (e) => fail(x, e));
  };

  app.any('/v1/check', (res, req) => {
    const x = begin(res);
    const method = req.getMethod().toUpperCase();
    reply(x, (r) => {
      writeProblem(r, problemOf(methodNotAllowed(method, '/v1/check', 'GET or POST')), 'GET, POST');
    });
  });

  const auth = (res: HttpResponse, req: HttpRequest): void => {
    let check: CheckRequest;
    try {
      check = authCheck(req, limiter.policies);
    } catch (e) {
      return failNow(res, e);
    }
    runCheck(res, null, check, denyStatus);
  };
  app.any('/v1/auth', auth);
  // Envoy ext_authz (HTTP) appends the original path to the auth URL: /v1/auth/<policy>/<path> (see auth.ts).
  app.any('/v1/auth/*', auth);
  // concurrency leases: POST /v1/acquire, POST /v1/release (src/server/leases.ts)
  registerLeaseRoutes(app, {
    limiter: raw, maxBodyBytes: maxBody, begin,
    json: (x, body) => reply(x, (r) => {
      r.writeStatus(statusLine(200));
      r.writeHeader('Content-Type', 'application/json');
      r.end(body);
    }),
    fail: (x, e, w) => (w === undefined ? fail(x, e) : reply(x, (r) => writeProblem(r, problemOf(e), w.allow, w.close))),
    refuseDraining: (x) => refuseDraining(x.res, x),
  });

  app.get('/healthz', (res) => {
    const x = begin(res);
    reply(x, (r) => r.writeHeader('Content-Type', 'application/json').end('{"status":"ok"}'));
  });

  app.get('/metrics', (res) => {
    const x = begin(res);
    // with front threads, every thread's counters (its decisions, its responses) summed here
    (o.scrape?.() ?? metrics.render(fronts === null ? undefined : fronts.metrics)).then((text) => reply(x, (r) => r.writeHeader('Content-Type', metrics.contentType).end(text)), (e) => fail(x, e));
  });

  app.get('/readyz', (res) => {
    const x = begin(res);
    reply(x, (r) => {
      if (draining) r.writeStatus(statusLine(503)).writeHeader('Content-Type', 'application/json').end('{"status":"draining"}');
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
      const x = begin(res);
      reply(x, (r) => {
        r.writeHeader('Content-Type', STATUS_PAGE_TYPE).writeHeader('Cache-Control', 'no-store');
        for (const [k, v] of Object.entries(STATUS_PAGE_HEADERS)) r.writeHeader(k, v);
        r.end(STATUS_PAGE_HTML);
      });
    };
    app.get('/', page);
    app.get('/status', page);
    app.get('/v1/status', (res) => {
      const x = begin(res);
      status.statusJson().then((text) => reply(x, (r) => r.writeHeader('Content-Type', 'application/json').writeHeader('Cache-Control', 'no-store').end(text)), (e) => fail(x, e));
    });
  }

  const stream = o.stream === false ? undefined : registerStream(app, limiter, o.stream, log, { raw, metrics });

  app.any('/*', (res, req) => {
    const x = begin(res);
    const url = req.getUrl();
    reply(x, (r) => writeProblem(r, problemOf(notFound(url))));
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
      if (draining) return;
      draining = true;
      activity?.close();
      uWS.us_listen_socket_close(token);
      await fronts?.close();
      await stream?.close();
      if (inFlight > 0) await new Promise<void>((r) => (drained = r));
      // The last answer may have been written inside uWS's own dispatch, still corked: let the loop turn
      // finish (and uWS flush it) before closing the sockets.
      await new Promise<void>((r) => setImmediate(r));
      closeApp(app);
    },
  };

  /** A batch item's error, its field named by its path in the batch (`checks[3].cost`). */
  function itemError(e: unknown, at: string): ReturnType<typeof errorItem> {
    const item = errorItem(e);
    if (item.error.field !== undefined && !item.error.field.startsWith(at)) {
      item.error.detail = `${at}.${item.error.detail}`;
      item.error.field = `${at}.${item.error.field}`;
    }
    return item;
  }
}


/**
 * A decision's rate-limit headers as one header for one `writeHeader` call: `RateLimit-Policy` (when the
 * policy is known), `RateLimit`, `Retry-After` on a denied answer (`deniedStatus`: /v1/auth's 429 or 403)
 * with a finite wait, and `Sluice-Degraded: open | closed | local` on a strict decision Redis did not make,
 * joined by CRLF. /v1/check answers 200 whatever the decision, and Retry-After on a 200 means nothing (RFC 9110
 * §10.2.3): there the wait is RateLimit's t and the body's retryAfterMs. uWS writes `name: value\r\n` as given,
 * so the bytes are those of separate calls, at one crossing into native code instead of three (names and
 * numbers here are plain ASCII: policy names are `A-Z a-z 0-9 _ . - #`).
 */
function rateLimitFields(d: Decision, policyHeader: string | undefined, limit: CompiledLimit | undefined, deniedStatus: boolean): { name: string; value: string } {
  let retry = deniedStatus && !d.allowed && d.retryAfterMs !== null ? `\r\nRetry-After: ${retryAfterSeconds(d.retryAfterMs)}` : '';
  // a strict decision Redis did not make says so, and by which rule (README "Failure behaviour")
  if (d.degraded === true) retry += `\r\nSluice-Degraded: ${d.degradedBy ?? 'local'}`;
  // onLimit: delay: admitted with a wait (a held answer comes when it is over; with wait=0 the caller waits it)
  if (d.delayMs !== undefined) retry += `\r\nSluice-Delay-Ms: ${d.delayMs}`;
  const rateLimit = rateLimitHeader(d, limit);
  FIELDS.name = policyHeader === undefined ? 'RateLimit' : 'RateLimit-Policy';
  FIELDS.value = policyHeader === undefined ? `${rateLimit}${retry}` : `${policyHeader}\r\nRateLimit: ${rateLimit}${retry}`;
  return FIELDS;
}
/** {@link rateLimitFields}'s result, reused: it is read at once. */
const FIELDS = { name: '', value: '' };

function writeProblem(res: HttpResponse, p: Problem, allow?: string, closeConnection = false): void {
  res.writeStatus(statusLine(p.status));
  res.writeHeader('Content-Type', 'application/problem+json');
  if (allow !== undefined) res.writeHeader('Allow', allow);
  if (p.status === 503) res.writeHeader('Retry-After', '1');
  res.end(JSON.stringify(p), closeConnection);
}

function policyHeaderTable(policies: ReadonlyMap<string, CompiledPolicy>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, p] of policies) out.set(name, rateLimitPolicyHeader(p, p.guard === null ? undefined : policies.get(p.guard)));
  return out;
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
