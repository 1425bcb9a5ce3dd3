/**
 * The framework-free part of the middleware: which check a request stands for, the decision, and the answer
 * to give (headers to set, or a 429 / 503 to send). `node-http.ts`, `express.ts` and `fastify.ts` only move
 * these onto their request and response objects.
 */
import type { CheckRequest, Decision } from '../types/decision.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import { bindingLimit, rateLimitHeader, rateLimitPolicyHeader, retryAfterSeconds } from '../wire/headers.js';
import { isSluiceError, malformedDecision } from '../util/errors.js';
import { decisionProblem } from '../wire/decision-shape.js';
import { asError, callSafely } from '../util/callback.js';

/**
 * Calls the application's `onLimiterError` with `e` (as an Error). A callback that throws must not take the
 * failure rule's answer with it (nor, where nothing awaits it, become an unhandled rejection): its error is
 * emitted as a process warning instead.
 */
export function tellLimiterError<Req>(cb: ((err: Error, req: Req) => void) | undefined, e: unknown, req: Req): void {
  if (cb !== undefined) callSafely('sluice middleware: onLimiterError', () => cb(asError(e), req));
}

/** Anything that decides checks: an embedded limiter (`createLimiter`) or a remote one (`createClient`). */
export interface Checker {
  /** `wait: true` (onLimit: delay): resolve once a delayed admission's delay has passed (both kinds take it). */
  check(req: CheckRequest, options?: { wait?: boolean }): Promise<Decision>;
  /** An embedded limiter's policies: the `RateLimit-Policy` header is computed from them. */
  readonly policies?: ReadonlyMap<string, CompiledPolicy>;
  /** A client's memory of the server's `RateLimit-Policy` headers. */
  rateLimitPolicy?(policy: string): string | undefined;
}

/** Options shared by every middleware; `Req` is the framework's request type. */
export interface RateLimitOptions<Req> {
  /** Decides the checks: `await createLimiter(...)` (in-process) or `createClient({url})` (a remote sluice). */
  limiter: Checker;
  /** The policy to check, or a function of the request choosing one. */
  policy: string | ((req: Req) => string);
  /**
   * The key of the request (1 to 1,024 bytes of UTF-8). Default: the client's address (the framework's
   * notion of it: Express `req.ip`, Fastify `request.ip`, else the socket's remote address). Return
   * `undefined` to let the request through unchecked.
   */
  key?: (req: Req) => string | undefined | Promise<string | undefined>;
  /** Descriptor values instead of a key, for a policy that declares descriptors. Wins over `key` when given. */
  descriptors?: (req: Req) => Record<string, string> | undefined | Promise<Record<string, string> | undefined>;
  /** Tokens the request spends (a non-negative integer), or a function of the request. Default 1. */
  cost?: number | ((req: Req) => number);
  /**
   * When the limiter fails (unreachable, timed out, overloaded, a policy or cost it refuses, an answer that is not
   * a decision, or anything that throws while the answer is turned into headers): `allow` lets the
   * request through without headers (fail open, the default), `deny` answers 503 with `Retry-After: 1`. A key
   * or descriptor value the limiter refuses (empty, over 1,024 bytes: the request's own) is not a failure:
   * the request gets 400, whatever this says, so a client cannot skip the limit by sending a bad key.
   */
  onError?: 'allow' | 'deny';
  /** Told about every limiter failure (to log it). */
  onLimiterError?: (err: Error, req: Req) => void;
  /**
   * Set `RateLimit-Policy`, `RateLimit` and, on a 429, `Retry-After`. `false` sends none of them (as
   * express-rate-limit sends no `Retry-After` with `standardHeaders` and `legacyHeaders` both off); the 429's
   * problem body still says the wait. The 503 of `onError: 'deny'` has `Retry-After: 1` either way. Default true.
   */
  headers?: boolean;
  /** The `RateLimit-Policy` value to send; default computed from an embedded limiter's policies or remembered by a client. */
  policyHeader?: string;
}

/** What to do with a request. */
export interface Outcome {
  /** `next`: let it through (with `headers` set); `reply`: answer now with `status`, `headers` and `body`. */
  action: 'next' | 'reply';
  status: number;
  headers: Array<[string, string]>;
  /** problem+json text when replying. */
  body: string;
  /** The decision, when there is one. */
  decision: Decision | null;
}

export const QUOTA_EXCEEDED_TYPE = 'https://iana.org/assignments/http-problem-types#quota-exceeded';

/**
 * The body of a 400 when the limiter refused the request's key or descriptor values (INVALID_ARGUMENT on
 * `key` or `descriptors…`: empty, over 1,024 bytes), which are the request's own input, not a limiter
 * failure: such a request is answered 400 whatever `onError` says, or a client could skip the limit by
 * sending a bad key. Null for any other error.
 */
export function keyRefused(e: unknown): string | null {
  if (!isSluiceError(e) || e.code !== 'INVALID_ARGUMENT' || e.field === undefined) return null;
  if (e.field !== 'key' && e.field !== 'descriptors' && !e.field.startsWith('descriptors.')) return null;
  return JSON.stringify({ type: 'about:blank', title: 'Bad Request', status: 400, detail: `the request's rate-limit ${e.message}` });
}

/**
 * Builds the per-request decision function of a middleware.
 * @throws TypeError when `limiter` or `policy` is missing.
 */
export function createDecider<Req>(o: RateLimitOptions<Req>, defaultKey: (req: Req) => string | undefined): (req: Req) => Promise<Outcome> {
  if (typeof o !== 'object' || o === null || typeof o.limiter?.check !== 'function') {
    throw new TypeError('limiter: must be a limiter (createLimiter) or a client (createClient)');
  }
  if (typeof o.policy !== 'string' && typeof o.policy !== 'function') throw new TypeError('policy: must be a policy name or a function');
  const limiter = o.limiter;
  const headers = o.headers ?? true;
  const onError = o.onError ?? 'allow';
  // by compiled policy: a reload compiles new ones (and a changed guard is a new guard object), so the header
  // always comes from the set the decision came from; nothing is kept for names the limiter does not have
  const policyHeaders = new WeakMap<CompiledPolicy, { guard: CompiledPolicy | undefined; header: string }>();

  const policyHeaderOf = (policy: string): string | undefined => {
    if (o.policyHeader !== undefined) return o.policyHeader;
    const ps = limiter.policies;
    if (ps !== undefined) {
      const p = ps.get(policy);
      if (p === undefined) return undefined;
      const guard = p.guard === null ? undefined : ps.get(p.guard);
      let h = policyHeaders.get(p);
      if (h === undefined || h.guard !== guard) {
        h = { guard, header: rateLimitPolicyHeader(p, guard) };
        policyHeaders.set(p, h);
      }
      return h.header;
    }
    return limiter.rateLimitPolicy?.(policy);
  };

  const badKey = (e: unknown): Outcome | null => {
    const body = keyRefused(e);
    return body === null ? null : { action: 'reply', status: 400, headers: [], body, decision: null };
  };

  const failed = (e: unknown, req: Req): Outcome => {
    tellLimiterError(o.onLimiterError, e, req);
    if (onError === 'allow') return { action: 'next', status: 200, headers: [], body: '', decision: null };
    return {
      action: 'reply', status: 503, headers: [['Retry-After', '1']], decision: null,
      body: JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'rate limiter unavailable' }),
    };
  };

  /** The outcome of a decision: the request goes on with its headers, or a 429. */
  const answer = (check: CheckRequest, d: Decision): Outcome => {
    const h: Array<[string, string]> = [];
    if (headers) {
      const ph = policyHeaderOf(check.policy);
      if (ph !== undefined) h.push(['RateLimit-Policy', ph]);
      const ps = limiter.policies;
      h.push(['RateLimit', rateLimitHeader(d, ps === undefined ? undefined : bindingLimit(ps, check.policy, d.policy))]);
    }
    if (d.allowed) return { action: 'next', status: 200, headers: h, body: '', decision: d };
    if (headers && d.retryAfterMs !== null) h.push(['Retry-After', String(retryAfterSeconds(d.retryAfterMs))]);
    const detail = d.retryAfterMs === null
      ? `quota exceeded for "${d.policy}": this request can never be admitted (${d.reason ?? 'cost above capacity'})`
      : `quota exceeded for "${d.policy}": retry in ${retryAfterSeconds(d.retryAfterMs)} s`;
    return {
      action: 'reply', status: 429, headers: h, decision: d,
      body: JSON.stringify({ type: QUOTA_EXCEEDED_TYPE, title: 'Too Many Requests', status: 429, detail, 'violated-policies': [d.policy] }),
    };
  };

  return async (req: Req): Promise<Outcome> => {
    let check: CheckRequest;
    try {
      const policy = typeof o.policy === 'function' ? o.policy(req) : o.policy;
      const cost = o.cost === undefined ? 1 : typeof o.cost === 'function' ? o.cost(req) : o.cost;
      const descriptors = o.descriptors === undefined ? undefined : await o.descriptors(req);
      if (descriptors !== undefined) check = { policy, descriptors, cost };
      else {
        const key = o.key === undefined ? defaultKey(req) : await o.key(req);
        if (key === undefined) return { action: 'next', status: 200, headers: [], body: '', decision: null };
        check = { policy, key, cost };
      }
    } catch (e) {
      return failed(e, req);
    }
    let d: Decision;
    try {
      d = await limiter.check(check, { wait: true }); // onLimit: delay: the request proceeds when its delay has passed
    } catch (e) {
      return badKey(e) ?? failed(e, req);
    }
    try {
      // a Checker of the caller's own can answer anything: what is not a decision is a limiter failure, and so
      // is anything that throws while the answer is written
      const bad = decisionProblem(d);
      if (bad !== null) throw malformedDecision(bad);
      return answer(check, d);
    } catch (e) {
      return failed(e, req);
    }
  };
}
