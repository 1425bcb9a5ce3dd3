/**
 * The check routes of the HTTP front: `GET|POST /v1/check` (one check, or a `{checks: [...]}` batch) and
 * `/v1/auth` (any method, and `/v1/auth/*` for Envoy ext_authz). A check the limiter decides synchronously
 * (shards 0, a policy not in Redis) is answered inside uWS's callback. Otherwise the request is read fully
 * before the first await, an exchange watches for the client leaving, and the answer is written after the
 * decision inside `cork`.
 */
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import type { CheckRequest, Decision } from '../types/decision.js';
import type { Limiter } from '../types.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import { checkFromJson, checkFromQuery, decisionJson } from '../wire/codec.js';
import { takeWait } from '../wire/delay.js';
import type { ServerMetrics } from '../metrics/registry.js';
import { invalidArgument, methodNotAllowed, tooLarge } from '../util/errors.js';
import { engineOf } from '../engine/handle.js';
import type { DelayPlaces } from '../engine/delay.js';
import { errorItem } from './problem.js';
import { authCheck } from './auth.js';
import { jsonBody, readJsonRequest } from './body.js';
import type { CheckAnswers } from './check-answer.js';
import type { Exchange, Exchanges } from './exchange.js';

/** What the check routes work with: the server's limiter, metrics, exchanges and answer writer, and its bounds. */
export interface CheckRouteOptions {
  /** The limiter without the metrics wrapper: a single check counts itself (one promise fewer). */
  raw: Limiter;
  /** The limiter through the metrics wrapper: each item of a batch is counted by it. */
  limiter: Limiter;
  metrics: ServerMetrics;
  exchanges: Exchanges;
  answers: CheckAnswers;
  /** Largest request body in bytes; larger gets 413. */
  maxBodyBytes: number;
  /** Most checks in one POST /v1/check batch; more gets 413. */
  maxBatchItems: number;
  /** What /v1/auth answers on a denial: 429, or 403 for nginx auth_request. */
  authDenyStatus: number;
}

/** Registers `/v1/check` (GET, POST, and 405 for any other method) and `/v1/auth` on `app`. */
export function registerCheckRoutes(app: TemplatedApp, o: CheckRouteOptions): void {
  const { raw, limiter, metrics, exchanges: ex, answers } = o;
  const maxBody = o.maxBodyBytes;
  const maxItems = o.maxBatchItems;

  /**
   * The limiter's synchronous path, when it has one (shards 0: see Front.checkNow): a check decided there is
   * answered inside uWS's callback, with no promise, microtask, abort handler or exchange.
   */
  const checkNow = engineOf(raw)?.checkNow ?? null;
  const places: DelayPlaces | null = engineOf(raw)?.delays ?? null;

  /**
   * Holds a delayed answer (onLimit: delay) until its delay has passed, then writes it. A client that leaves
   * first frees the wait place (src/engine/delay.ts), never the tokens: they were spent at decision time.
   */
  const hold = (res: HttpResponse, x: Exchange | null, d: Decision, req: CheckRequest, status: number, set: ReadonlyMap<string, CompiledPolicy>): void => {
    const held = x ?? ex.begin(res);
    const timer = setTimeout(() => {
      held.cancel = undefined;
      places?.release(d);
      answers.answer(held, d, req, status, set);
    }, d.delayMs);
    held.cancel = (): void => {
      clearTimeout(timer);
      places?.release(d);
    };
  };

  /**
   * Decides `req` and answers it (`auth`: 0 for /v1/check, else /v1/auth's deny status), counting the check in
   * the metrics. `x` null: called inside uWS's callback for the request with no exchange begun; one is begun on
   * `res` only if the check has to be awaited.
   */
  const runCheck = (res: HttpResponse, x: Exchange | null, req: CheckRequest, auth = 0): void => {
    if (x === null ? ex.draining : x.late) return ex.refuseDraining(res, x);
    let held: boolean;
    try {
      held = takeWait(req, raw.policies);
    } catch (e) {
      return x === null ? ex.failNow(res, e) : ex.fail(x, e);
    }
    const set = raw.policies; // the set this check is decided under (a reload after this line does not apply to it)
    if (checkNow !== null) {
      const begun = metrics.now();
      let d: Decision | undefined;
      try {
        d = checkNow(req);
      } catch (e) {
        metrics.failed(req.policy, e, begun, metrics.now());
        return x === null ? ex.failNow(res, e) : ex.fail(x, e);
      }
      if (d !== undefined) {
        metrics.decided(req.policy, d, begun, metrics.now(), req);
        const status = auth === 0 ? 0 : d.allowed ? 200 : auth;
        if (held && d.delayMs !== undefined) return hold(res, x, d, req, status, set);
        return x === null ? answers.answerNow(res, d, req, status, set, true) : answers.answer(x, d, req, status, set);
      }
    }
    const exchange = x ?? ex.begin(res);
    const started = metrics.started();
    raw.check(req).then((d) => {
      metrics.decided(req.policy, d, started, undefined, req);
      if (held && d.delayMs !== undefined) return hold(exchange.res, exchange, d, req, auth === 0 ? 0 : 200, set);
      answers.answer(exchange, d, req, auth === 0 ? 0 : d.allowed ? 200 : auth, set);
    }, (e: unknown) => {
      metrics.failed(req?.policy, e, started);
      ex.fail(exchange, e);
    });
  };

  app.get('/v1/check', (res, req) => {
    let check: CheckRequest;
    try {
      check = checkFromQuery(req.getQuery() ?? '');
    } catch (e) {
      return ex.failNow(res, e);
    }
    runCheck(res, null, check);
  });

  app.post('/v1/check', (res, req) => {
    const x = ex.begin(res);
    readJsonRequest(x.res, req, maxBody, (e, o) => ex.fail(x, e, o), (body) => {
      let parsed: unknown;
      try {
        parsed = jsonBody(body);
      } catch (e) {
        return ex.fail(x, e);
      }
      const checks = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
        ? (parsed as { checks?: unknown }).checks : undefined;
      if (checks === undefined) {
        let check: CheckRequest;
        try {
          check = checkFromJson(parsed);
        } catch (e) {
          return ex.fail(x, e);
        }
        return runCheck(x.res, x, check);
      }
      batch(x, parsed as Record<string, unknown>);
    });
  });

  /** `{checks: [...]}`: one result per item, a bad item gets its own error and the rest go on. */
  const batch = (x: Exchange, body: Record<string, unknown>): void => {
    if (x.late) return ex.refuseDraining(x.res, x);
    const checks = body.checks;
    const extra = Object.keys(body).find((k) => k !== 'checks');
    if (extra !== undefined) return ex.fail(x, invalidArgument(extra, 'is not allowed beside checks'));
    if (!Array.isArray(checks) || checks.length === 0) return ex.fail(x, invalidArgument('checks', 'must be a non-empty array'));
    if (checks.length > maxItems) return ex.fail(x, tooLarge('checks', `at most ${maxItems} items per batch (got ${checks.length})`));
    const results = checks.map((item, i) => {
      const at = `checks[${i}]`;
      try {
        return limiter.check(checkFromJson(item, at)).catch((e) => itemError(e, at));
      } catch (e) {
        return Promise.resolve(itemError(e, at));
      }
    });
    Promise.all(results).then(
      (rs) => ex.json(x, `{"results":[${rs.map((r) => ('error' in r ? JSON.stringify(r) : decisionJson(r))).join(',')}]}`),
      (e) => ex.fail(x, e),
    );
  };

  app.any('/v1/check', (res, req) => {
    const x = ex.begin(res);
    const method = req.getMethod().toUpperCase();
    ex.fail(x, methodNotAllowed(method, '/v1/check', 'GET or POST'), { allow: 'GET, POST' });
  });

  const auth = (res: HttpResponse, req: HttpRequest): void => {
    let check: CheckRequest;
    try {
      check = authCheck(req, limiter.policies);
    } catch (e) {
      return ex.failNow(res, e);
    }
    runCheck(res, null, check, o.authDenyStatus);
  };
  app.any('/v1/auth', auth);
  // Envoy ext_authz (HTTP) appends the original path to the auth URL: /v1/auth/<policy>/<path> (see auth.ts).
  app.any('/v1/auth/*', auth);
}

/** A batch item's error, its field named by its path in the batch (`checks[3].cost`). */
function itemError(e: unknown, at: string): ReturnType<typeof errorItem> {
  const item = errorItem(e);
  if (item.error.field !== undefined && !item.error.field.startsWith(at)) {
    item.error.detail = `${at}.${item.error.detail}`;
    item.error.field = `${at}.${item.error.field}`;
  }
  return item;
}
