/**
 * The admin API: a separate uWebSockets.js app on its own port (off unless asked for; `sluice serve
 * --admin-port N --admin-token T`), bound to 127.0.0.1 by default. The public check port never serves these
 * routes. Every request needs `Authorization: Bearer <token>`; without it, or with another token, the answer is
 * 401 with `WWW-Authenticate: Bearer`, whatever the path.
 *
 * | route | answer |
 * |---|---|
 * | `GET /v1/policies` | `{version, policies: {<name>: <spec>}}`: the set in force, as a policies document's `policies:` |
 * | `PUT /v1/policies` | body `{"policies": {...}}` (JSON) or a YAML policies document; validated like the file, then applied: 200 + `{version, added, removed, changed}`, or 400 naming the field (the rules in force stay) |
 * | `GET /v1/keys/{policy}/{key}` | one key's state (limiter.inspect); descriptor policies: the joined key, or `/v1/keys/{policy}?tenant=..&action=..` |
 * | `DELETE /v1/keys/{policy}/{key}` | forgets the key (limiter.reset): `{removed}` |
 * | `GET /v1/status` | what the instance is doing (src/server/status.ts), with `status` given |
 * | `GET /v1/hot?policy=P[&limit=N]` | a policy's hot keys: `{policy, checks, errorBound, keys: [{key, checks, denied, error, share}]}`, with `status` given |
 * | `GET /`, `GET /status` | the status page (src/server/status-page.ts), with `status` given: static HTML holding no data, so served without the token; it asks for the token and sends it to `/v1/status` |
 */
import { timingSafeEqual } from 'node:crypto';
import uWS from 'uWebSockets.js';
import type { HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { KeyRequest } from '../types/keys.js';
import type { Limiter } from '../types.js';
import type { ReloadResult } from '../types/reload.js';
import type { PolicySpec } from '../config/policy-spec.js';
import { policySpecOf } from '../config/spec-of.js';
import { parseConfig } from '../config/load.js';
import { configFromDocument } from '../config/schema.js';
import { problemOf, type Problem } from './problem.js';
import { invalidArgument, isSluiceError, SluiceError, conflict, methodNotAllowed, notFound, tooLarge, unauthorized, unsupportedMediaType, badSetting, listenFailed } from '../util/errors.js';
import { readBody } from './body.js';
import { refuseAmbiguousFraming } from './framing.js';
import { closeApp, listenExclusive } from './uws.js';
import type { StatusSource } from './status.js';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML, STATUS_PAGE_TYPE } from './status-page.js';

export interface AdminServerOptions {
  limiter: Limiter;
  /** The bearer token every request must carry: at least 16 visible ASCII characters (no spaces). */
  token: string;
  /** Interface to bind. Default 127.0.0.1. */
  host?: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** Largest `PUT /v1/policies` body, in bytes; larger gets 413. Default 1 MiB. */
  maxBodyBytes?: number;
  /**
   * Validates and applies a policies document from `PUT /v1/policies`: the parsed JSON document, or the YAML
   * text as a string. `sluice serve` passes its reloader's (which also announces the reload to other instances).
   * Default: the config loader's validation, then `limiter.reload`. A CONFIG error is answered 400 with its field.
   */
  applyPolicies?: (doc: unknown, source: 'api') => Promise<ReloadResult>;
  /** The instance's status (the public server's `status`): adds `/v1/status`, `/v1/hot` and the status page. Default none. */
  status?: StatusSource;
  logger?: Logger;
}

export interface AdminServer {
  /** The port listened on. */
  readonly port: number;
  /** Stops listening, lets requests in flight finish, then closes every connection. Does not close the limiter. */
  close(): Promise<void>;
}

const STATUS_LINE: Record<number, string> = {
  200: '200 OK', 400: '400 Bad Request', 401: '401 Unauthorized', 404: '404 Not Found', 405: '405 Method Not Allowed',
  413: '413 Content Too Large', 415: '415 Unsupported Media Type', 500: '500 Internal Server Error', 503: '503 Service Unavailable',
};

const TOKEN_PATTERN = /^[\x21-\x7e]+$/;
/** Shortest admin token accepted: 16 characters (about 100 bits from a random base64 or hex generator). */
export const MIN_TOKEN_LENGTH = 16;

/**
 * Why `token` cannot be the admin API's bearer token, or null when it can: it must be at least
 * {@link MIN_TOKEN_LENGTH} visible ASCII characters (a short token can be guessed online).
 */
export function adminTokenProblem(token: unknown): string | null {
  if (typeof token !== 'string' || !TOKEN_PATTERN.test(token)) return 'must be a non-empty string of visible ASCII characters (no spaces)';
  if (token.length < MIN_TOKEN_LENGTH) {
    return `must be at least ${MIN_TOKEN_LENGTH} characters (got ${token.length}); generate one with \`openssl rand -hex 32\``;
  }
  return null;
}

interface Exchange {
  res: HttpResponse;
  done: boolean;
}

/**
 * Starts the admin API.
 * @throws SluiceError CONFIG naming `token` for a token {@link adminTokenProblem} refuses; Error for a port that
 * cannot be listened on.
 */
export async function startAdminServer(o: AdminServerOptions): Promise<AdminServer> {
  const bad = adminTokenProblem(o.token);
  if (bad !== null) throw badSetting('token', `admin token: ${bad}`);
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const { limiter, logger: log } = o;
  const expected = Buffer.from(o.token);
  const maxBody = o.maxBodyBytes ?? 1 << 20;
  const apply = o.applyPolicies ?? ((doc: unknown) => {
    const config = typeof doc === 'string' ? parseConfig(doc, '<api>') : configFromDocument(doc, '<api>');
    return limiter.reload(config.policies);
  });
  let inFlight = 0;
  let closing = false;
  let drained: (() => void) | null = null;

  const begin = (res: HttpResponse): Exchange => {
    const x: Exchange = { res, done: false };
    inFlight++;
    res.onAborted(() => end(x));
    return x;
  };
  const end = (x: Exchange): void => {
    if (x.done) return;
    x.done = true;
    inFlight--;
    if (inFlight === 0 && drained) drained();
  };
  const send = (x: Exchange, status: number, body: string, headers: Record<string, string> = {}, type = 'application/json'): void => {
    if (x.done) return;
    x.res.cork(() => {
      x.res.writeStatus(STATUS_LINE[status] ?? `${status} Error`);
      x.res.writeHeader('Content-Type', type);
      x.res.writeHeader('Cache-Control', 'no-store');
      for (const [k, v] of Object.entries(headers)) x.res.writeHeader(k, v);
      x.res.end(body);
    });
    end(x);
  };
  const sendProblem = (x: Exchange, p: Problem, headers: Record<string, string> = {}): void => {
    if (p.status === 503) headers = { ...headers, 'Retry-After': '1' };
    send(x, p.status, JSON.stringify(p), headers, 'application/problem+json');
  };
  const fail = (x: Exchange, e: unknown): void => {
    const p = problemOf(e);
    // a rejected document is the client's error here (CONFIG is a start-up failure, 500, elsewhere)
    if (isSluiceError(e) && e.code === 'CONFIG') Object.assign(p, { status: 400, title: 'Bad Request' });
    if (p.status >= 500) log?.warn({ err: e }, 'admin request failed');
    sendProblem(x, p);
  };

  /** Checks the bearer token in constant time; answers 401 and returns false when it is missing or wrong. */
  const authorized = (x: Exchange, header: string): boolean => {
    const m = /^bearer +(\S+) *$/i.exec(header);
    const given = Buffer.from(m === null ? '' : m[1]);
    // timingSafeEqual needs equal lengths; a token of another length is compared with itself, then refused
    const ok = given.length === expected.length ? timingSafeEqual(given, expected) : (timingSafeEqual(expected, expected), false);
    if (ok) return true;
    const why = header === '' ? 'a bearer token is required' : m === null ? 'must be "Bearer <token>"' : 'the bearer token is not valid';
    sendProblem(x, problemOf(unauthorized(why)),
      { 'WWW-Authenticate': 'Bearer realm="sluice-admin"' });
    return false;
  };

  /** The key a `/v1/keys/...` request names: path `{policy}/{key}` (percent-decoded), or descriptors from the query. */
  const keyRequest = (url: string, query: string): KeyRequest => {
    const rest = url.slice('/v1/keys/'.length);
    const slash = rest.indexOf('/');
    const policy = decode(slash < 0 ? rest : rest.slice(0, slash), 'policy');
    const req: KeyRequest = { policy };
    if (slash >= 0) req.key = decode(rest.slice(slash + 1), 'key');
    if (query !== '') {
      const descriptors: Record<string, string> = Object.create(null) as Record<string, string>;
      for (const [name, value] of new URLSearchParams(query)) {
        if (Object.hasOwn(descriptors, name)) throw invalidArgument(`descriptors.${name}`, 'is given more than once');
        descriptors[name] = value;
      }
      req.descriptors = descriptors;
    }
    return req;
  };

  const app: TemplatedApp = refuseAmbiguousFraming(uWS.App());

  app.get('/v1/policies', (res, req) => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    // own properties whatever the names (an assignment of "__proto__" would set the object's prototype, and
    // that policy would be left out of the document, then dropped by a PUT of it)
    const policies: Record<string, PolicySpec> = Object.fromEntries([...limiter.policies].map(([name, p]) => [name, policySpecOf(p)]));
    send(x, 200, JSON.stringify({ version: limiter.version, policies }));
  });

  app.put('/v1/policies', (res, req) => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    const type = req.getHeader('content-type');
    const json = /^application\/json\s*(;|$)/i.test(type);
    if (!json && !/^(application|text)\/(x-)?yaml\s*(;|$)/i.test(type)) {
      return sendProblem(x, problemOf(unsupportedMediaType(type, 'application/json or application/yaml')));
    }
    readBody(res, maxBody, (body) => {
      if (body === null) return sendProblem(x, problemOf(tooLarge('body', `larger than ${maxBody} bytes`)));
      let doc: unknown;
      try {
        const text = new TextDecoder('utf-8', { fatal: true }).decode(body);
        doc = json ? JSON.parse(text) : text;
      } catch (e) {
        return fail(x, invalidArgument('body', e instanceof SyntaxError ? `is not valid JSON (${e.message})` : 'is not UTF-8'));
      }
      let applied: Promise<ReloadResult>;
      try {
        applied = apply(expectVersion(doc, limiter.version), 'api');
      } catch (e) {
        return fail(x, e);
      }
      applied.then((r) => {
        log?.info({ version: r.version, added: r.added, removed: r.removed, changed: r.changed }, 'admin: policies applied');
        send(x, 200, JSON.stringify(r));
      }, (e) => fail(x, e));
    });
  });

  app.any('/v1/policies', (res, req) => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    sendProblem(x, problemOf(methodNotAllowed(req.getMethod().toUpperCase(), '/v1/policies', 'GET or PUT')), { Allow: 'GET, PUT' });
  });

  const keyRoute = (op: 'inspect' | 'reset') => (res: HttpResponse, req: uWS.HttpRequest): void => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    let target: KeyRequest;
    try {
      target = keyRequest(req.getUrl(), req.getQuery() ?? '');
    } catch (e) {
      return fail(x, e);
    }
    const done = op === 'inspect' ? limiter.inspect(target) : limiter.reset(target);
    done.then((r) => {
      if (op === 'reset') log?.info({ policy: target.policy, key: target.key, descriptors: target.descriptors, removed: (r as { removed: number }).removed }, 'admin: key reset');
      send(x, 200, JSON.stringify(r));
    }, (e) => fail(x, e));
  };
  app.get('/v1/keys/*', keyRoute('inspect'));
  app.del('/v1/keys/*', keyRoute('reset'));
  app.any('/v1/keys/*', (res, req) => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    sendProblem(x, problemOf(methodNotAllowed(req.getMethod().toUpperCase(), '/v1/keys/{policy}/{key}', 'GET or DELETE')), { Allow: 'GET, DELETE' });
  });

  const status = o.status;
  if (status !== undefined) {
    const page = (res: HttpResponse): void => send(begin(res), 200, STATUS_PAGE_HTML, STATUS_PAGE_HEADERS, STATUS_PAGE_TYPE);
    // GET-only routes answer any other method 405 with `Allow: GET` (the API's after the token, as above)
    const getOnly = (path: string, authed: boolean, handler: (res: HttpResponse, req: uWS.HttpRequest) => void): void => {
      app.get(path, handler);
      app.any(path, (res, req) => {
        const x = begin(res);
        if (authed && !authorized(x, req.getHeader('authorization'))) return;
        sendProblem(x, problemOf(methodNotAllowed(req.getMethod().toUpperCase(), path, 'GET')), { Allow: 'GET' });
      });
    };
    getOnly('/', false, page);
    getOnly('/status', false, page);
    getOnly('/v1/status', true, (res, req) => {
      const x = begin(res);
      if (!authorized(x, req.getHeader('authorization'))) return;
      status.statusJson().then((text) => send(x, 200, text), (e) => fail(x, e));
    });
    getOnly('/v1/hot', true, (res, req) => {
      const x = begin(res);
      if (!authorized(x, req.getHeader('authorization'))) return;
      let text: string;
      try {
        text = status.hotJson(req.getQuery() ?? '');
      } catch (e) {
        return fail(x, e);
      }
      send(x, 200, text);
    });
  }

  app.any('/*', (res, req) => {
    const x = begin(res);
    if (!authorized(x, req.getHeader('authorization'))) return;
    sendProblem(x, problemOf(notFound(req.getUrl())));
  });

  const host = o.host ?? '127.0.0.1';
  const { token, port } = await listen(app, host, o.port);
  log?.info({ host, port }, 'admin API listening');
  return {
    port,
    async close(): Promise<void> {
      if (closing) return;
      closing = true;
      uWS.us_listen_socket_close(token);
      if (inFlight > 0) await new Promise<void>((r) => (drained = r));
      await new Promise<void>((r) => setImmediate(r));
      closeApp(app);
    },
  };
}

/**
 * The document `GET /v1/policies` returned, edited, comes back with its `version`: a compare-and-set. A
 * version other than the one in force means someone changed the policies since it was read (409, nothing
 * applied); the same version is dropped and the rest applied. A document without `version` applies as is.
 * @throws SluiceError CONFLICT (409) or INVALID_ARGUMENT naming `version`.
 */
function expectVersion(doc: unknown, inForce: string): unknown {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc) || !Object.hasOwn(doc, 'version')) return doc;
  const { version, ...rest } = doc as Record<string, unknown>;
  if (typeof version !== 'string') throw invalidArgument('version', `must be the version string GET /v1/policies returned (got ${JSON.stringify(version) ?? typeof version})`);
  if (version !== inForce) {
    throw conflict('version', `the policies in force are version ${inForce}, not ${version}: someone changed them since you read them; GET them again and reapply your change`);
  }
  return rest;
}

function decode(part: string, field: 'policy' | 'key'): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw invalidArgument(field, `is not valid percent-encoding (got ${JSON.stringify(part.slice(0, 40))})`);
  }
}


/** Listens with an exclusive port (as the public server does: no silent SO_REUSEPORT sharing). */
function listen(app: TemplatedApp, host: string, port: number): Promise<{ token: us_listen_socket; port: number }> {
  return new Promise((resolve, reject) => {
    listenExclusive(app, host, port, (token) => {
      if (!token) reject(listenFailed(`admin API: cannot listen on ${host}:${port} (in use?)`));
      else resolve({ token, port: uWS.us_socket_local_port(token) });
    });
  });
}
