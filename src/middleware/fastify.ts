/**
 * Fastify (4 and 5): an `onRequest` hook, `app.addHook('onRequest', sluiceFastify({ limiter, policy }))`, or
 * the same as a plugin that applies to the whole app, `app.register(sluiceFastifyPlugin, { limiter, policy })`.
 * Typed structurally, so this module needs no fastify import.
 */
import type { IncomingMessage } from 'node:http';
import { createDecider, type RateLimitOptions } from './core.js';

export { sluiceFastifyConcurrency, type ConcurrencyLimitOptions, type Leaser } from './concurrency.js';
export type { Checker, RateLimitOptions } from './core.js';

/** The parts of a Fastify request the hook reads. */
export interface FastifyLikeRequest {
  ip?: string;
  headers: IncomingMessage['headers'];
  raw: IncomingMessage;
}

/** The parts of a Fastify reply the hook uses. */
export interface FastifyLikeReply {
  header(name: string, value: string): unknown;
  code(status: number): unknown;
  type(contentType: string): unknown;
  send(body: string): unknown;
}

/**
 * Returns an async `onRequest` hook: sets the RateLimit headers on the reply, or answers 429 with
 * `Retry-After` (and returns the reply, which ends the request in Fastify). The default key is `request.ip`.
 */
export function sluiceFastify<Req extends FastifyLikeRequest = FastifyLikeRequest, Reply extends FastifyLikeReply = FastifyLikeReply>(
  o: RateLimitOptions<Req>,
): (request: Req, reply: Reply) => Promise<Reply | undefined> {
  const decide = createDecider<Req>(o, (req) => req.ip ?? req.raw.socket?.remoteAddress ?? undefined);
  return async (request, reply) => {
    const out = await decide(request);
    for (const [k, v] of out.headers) reply.header(k, v);
    if (out.action === 'next') return undefined;
    reply.code(out.status);
    reply.type('application/problem+json');
    reply.send(out.body);
    return reply;
  };
}

/**
 * The hook as a Fastify plugin. It is marked to skip encapsulation (as `fastify-plugin` does), so the hook
 * applies to every route of the instance it is registered on.
 */
export const sluiceFastifyPlugin = Object.assign(
  async function sluiceFastifyPlugin(
    app: { addHook(name: 'onRequest', hook: (request: any, reply: any) => Promise<unknown>): unknown },
    o: RateLimitOptions<FastifyLikeRequest>,
  ): Promise<void> {
    app.addHook('onRequest', sluiceFastify(o));
  },
  { [Symbol.for('skip-override')]: true, [Symbol.for('fastify.display-name')]: 'sluice-rate-limit' },
);
