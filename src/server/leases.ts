/**
 * `POST /v1/acquire` and `POST /v1/release` (concurrency policies, src/engine/leases.ts): a JSON body in, the
 * answer as JSON. An acquire answers 200 whether or not a lease was taken (the caller acts on `allowed`, as
 * with /v1/check); a release answers 200 `{released: true, remaining, policy}`, or 409 naming `leaseId` when
 * the key does not hold that lease. Bad input is a 400 problem naming the field.
 */
import type { HttpResponse, TemplatedApp } from 'uWebSockets.js';
import type { Limiter } from '../types.js';
import { acquireFromJson, releaseFromJson } from '../wire/leases.js';
import { methodNotAllowed } from '../util/errors.js';
import { jsonBody, readJsonRequest } from './body.js';

/** What the routes borrow from the HTTP front: its exchange bookkeeping and writers (src/server/exchange.ts). */
export interface LeaseRouteHost<X extends { res: HttpResponse; late: boolean }> {
  limiter: Limiter;
  maxBodyBytes: number;
  begin(res: HttpResponse): X;
  /** Writes a 200 JSON answer (unless the client left). */
  json(x: X, body: string): void;
  /** Writes the problem of `e`, with an `Allow` header (405), closing the connection (after an oversize body). */
  fail(x: X, e: unknown, o?: { allow?: string; close?: boolean }): void;
  /** Refuses a request that arrived while draining. */
  refuseDraining(x: X): void;
}

export function registerLeaseRoutes<X extends { res: HttpResponse; late: boolean }>(app: TemplatedApp, h: LeaseRouteHost<X>): void {
  const route = (path: string, parse: (v: unknown) => unknown, run: (req: never) => Promise<unknown>): void => {
    app.post(path, (res, req) => {
      const x = h.begin(res);
      readJsonRequest(res, req, h.maxBodyBytes, (e, o) => h.fail(x, e, o), (body) => {
        if (x.late) return h.refuseDraining(x);
        let input: unknown;
        try {
          input = parse(jsonBody(body));
        } catch (e) {
          return h.fail(x, e);
        }
        run(input as never).then((r) => h.json(x, JSON.stringify(r)), (e: unknown) => h.fail(x, e));
      });
    });
    app.any(path, (res, req) => h.fail(h.begin(res), methodNotAllowed(req.getMethod().toUpperCase(), path, 'POST'), { allow: 'POST' }));
  };
  route('/v1/acquire', acquireFromJson, (r) => h.limiter.acquire(r));
  route('/v1/release', releaseFromJson, (r) => h.limiter.release(r));
}
