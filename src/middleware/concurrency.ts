/**
 * Concurrency middleware: at most `limit` requests in flight per key (an `algorithm: concurrency` policy). A
 * lease is acquired before the request goes on and released once, when its response has finished or its
 * connection closed first (a client gone mid-request, an error that destroyed the socket): Node's `finish`
 * and `close` events of the response, which every framework here writes through. A request that gets no
 * lease is answered 429 with `Retry-After` (the time until the earliest lease expires; sooner if a holder
 * finishes). A lease whose release fails (the limiter unreachable) expires by its `leaseTtl`.
 *
 * `concurrencyLimit` (node:http), `sluiceExpressConcurrency` and `sluiceFastifyConcurrency` only move
 * {@link createLeaser}'s outcome onto their request and response objects.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from '../types/leases.js';
import { retryAfterSeconds } from '../wire/headers.js';
import { QUOTA_EXCEEDED_TYPE, keyRefused, tellLimiterError } from './core.js';

/** Anything that hands out leases: an embedded limiter (`createLimiter`) or a remote one (`createClient`). */
export interface Leaser {
  acquire(req: AcquireRequest): Promise<LeaseDecision>;
  release(req: ReleaseRequest): Promise<ReleaseResult>;
}

/** Options of the concurrency middleware; `Req` is the framework's request type. */
export interface ConcurrencyLimitOptions<Req> {
  limiter: Leaser;
  /** The concurrency policy, or a function of the request choosing one. */
  policy: string | ((req: Req) => string);
  /** The key of the request. Default: the client's address. Return `undefined` to let the request through without a lease. */
  key?: (req: Req) => string | undefined | Promise<string | undefined>;
  /** Descriptor values instead of a key, for a policy that declares descriptors. Wins over `key` when given. */
  descriptors?: (req: Req) => Record<string, string> | undefined | Promise<Record<string, string> | undefined>;
  /** When the limiter fails to acquire: `allow` lets the request through without a lease (the default), `deny` answers 503. */
  onError?: 'allow' | 'deny';
  /** Told about every limiter failure, an acquire's or a release's (to log it). */
  onLimiterError?: (err: Error, req: Req) => void;
}

/** What to do with a request: go on (and call `release` once it is over), or answer now. */
export interface LeaseOutcome {
  action: 'next' | 'reply';
  status: number;
  headers: Array<[string, string]>;
  /** problem+json text when replying. */
  body: string;
  decision: LeaseDecision | null;
  /** Gives the lease back (once; later calls do nothing). A no-op when there is no lease. */
  release: () => void;
}

const NOTHING = (): void => undefined;

/**
 * Builds the per-request acquire function of a concurrency middleware.
 * @throws TypeError when `limiter` or `policy` is missing.
 */
export function createLeaser<Req>(o: ConcurrencyLimitOptions<Req>, defaultKey: (req: Req) => string | undefined): (req: Req) => Promise<LeaseOutcome> {
  if (typeof o !== 'object' || o === null || typeof o.limiter?.acquire !== 'function' || typeof o.limiter?.release !== 'function') {
    throw new TypeError('limiter: must be a limiter (createLimiter) or a client (createClient) with acquire and release');
  }
  if (typeof o.policy !== 'string' && typeof o.policy !== 'function') throw new TypeError('policy: must be a policy name or a function');
  const limiter = o.limiter;
  const pass: Omit<LeaseOutcome, 'decision'> = { action: 'next', status: 200, headers: [], body: '', release: NOTHING };
  const failed = (e: unknown, req: Req): LeaseOutcome => {
    tellLimiterError(o.onLimiterError, e, req);
    if ((o.onError ?? 'allow') === 'allow') return { ...pass, decision: null };
    return {
      action: 'reply', status: 503, headers: [['Retry-After', '1']], decision: null, release: NOTHING,
      body: JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'rate limiter unavailable' }),
    };
  };
  return async (req: Req): Promise<LeaseOutcome> => {
    let target: AcquireRequest;
    try {
      const policy = typeof o.policy === 'function' ? o.policy(req) : o.policy;
      const descriptors = o.descriptors === undefined ? undefined : await o.descriptors(req);
      if (descriptors !== undefined) target = { policy, descriptors };
      else {
        const key = o.key === undefined ? defaultKey(req) : await o.key(req);
        if (key === undefined) return { ...pass, decision: null };
        target = { policy, key };
      }
    } catch (e) {
      return failed(e, req);
    }
    let d: LeaseDecision;
    try {
      d = await limiter.acquire(target);
    } catch (e) {
      const body = keyRefused(e);
      if (body !== null) return { action: 'reply', status: 400, headers: [], body, decision: null, release: NOTHING };
      return failed(e, req);
    }
    if (d.allowed) {
      const leaseId = d.leaseId;
      let done = leaseId === null; // admitted without a lease (degraded open): nothing to give back
      const release = (): void => {
        if (done) return;
        done = true;
        limiter.release({ ...target, leaseId: leaseId! }).catch((e: unknown) => tellLimiterError(o.onLimiterError, e, req));
      };
      return { ...pass, decision: d, release };
    }
    const h: Array<[string, string]> = [];
    if (d.retryAfterMs !== null) h.push(['Retry-After', String(retryAfterSeconds(d.retryAfterMs))]);
    const detail = d.retryAfterMs === null
      ? `too many in flight for "${d.policy}": this request can never be admitted (${d.reason ?? 'limit is 0'})`
      : `too many in flight for "${d.policy}" (at most ${d.limit}): retry in ${retryAfterSeconds(d.retryAfterMs)} s`;
    return {
      action: 'reply', status: 429, headers: h, decision: d, release: NOTHING,
      body: JSON.stringify({ type: QUOTA_EXCEEDED_TYPE, title: 'Too Many Requests', status: 429, detail, 'violated-policies': [d.policy] }),
    };
  };
}

/**
 * Applies an outcome to a Node response: on `next`, releases the lease when the response finishes or its
 * connection closes (whichever comes first), and returns true; on `reply`, answers and returns false.
 */
export function applyLease(out: LeaseOutcome, res: ServerResponse): boolean {
  if (out.action === 'next') {
    if (out.release !== NOTHING) {
      if (res.writableFinished || res.destroyed) out.release();
      else {
        res.once('finish', out.release);
        res.once('close', out.release);
      }
    }
    return true;
  }
  if (res.headersSent) return false;
  for (const [k, v] of out.headers) res.setHeader(k, v);
  res.statusCode = out.status;
  res.setHeader('Content-Type', 'application/problem+json');
  res.end(out.body);
  return false;
}

/**
 * node:http: `const limit = concurrencyLimit({...}); if (!(await limit(req, res))) return;`. Resolves true to
 * go on (the lease is released when `res` finishes or closes), or answers 429 and resolves false.
 */
export function concurrencyLimit(o: ConcurrencyLimitOptions<IncomingMessage>): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  const acquire = createLeaser(o, (req) => req.socket?.remoteAddress ?? undefined);
  return async (req, res) => applyLease(await acquire(req), res);
}

/** Express (4 and 5): `app.use(sluiceExpressConcurrency({ limiter, policy: 'exports' }))`. Default key `req.ip`. */
export function sluiceExpressConcurrency<Req extends IncomingMessage & { ip?: string } = IncomingMessage & { ip?: string }>(
  o: ConcurrencyLimitOptions<Req>,
): (req: Req, res: ServerResponse, next: (err?: unknown) => void) => void {
  const acquire = createLeaser<Req>(o, (req) => req.ip ?? req.socket?.remoteAddress ?? undefined);
  return (req, res, next) => {
    acquire(req).then((out) => {
      if (applyLease(out, res)) next();
    }, next);
  };
}

/**
 * Fastify (4 and 5): an `onRequest` hook, `app.addHook('onRequest', sluiceFastifyConcurrency({...}))`; the lease
 * is released on the raw response's `finish` or `close`. Default key `request.ip`.
 */
export function sluiceFastifyConcurrency<Req extends { ip?: string; raw: IncomingMessage }, Reply extends {
  raw: ServerResponse; header(name: string, value: string): unknown; code(status: number): unknown; type(t: string): unknown; send(body: string): unknown;
}>(o: ConcurrencyLimitOptions<Req>): (request: Req, reply: Reply) => Promise<Reply | undefined> {
  const acquire = createLeaser<Req>(o, (req) => req.ip ?? req.raw.socket?.remoteAddress ?? undefined);
  return async (request, reply) => {
    const out = await acquire(request);
    if (out.action === 'next') {
      applyLease(out, reply.raw);
      return undefined;
    }
    for (const [k, v] of out.headers) reply.header(k, v);
    reply.code(out.status);
    reply.type('application/problem+json');
    reply.send(out.body);
    return reply;
  };
}
