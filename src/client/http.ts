import type { CheckRequest } from '../types/decision.js';
import { Backoff } from './backoff.js';
import { SluiceClientError, isRetryable, remoteError, clientClosed, clientOverloaded, notADecision } from './errors.js';
import { asError } from '../util/callback.js';
import { decisionProblem } from '../wire/decision-shape.js';
import type { CheckOptions, ClientDecision, Pending, Transport, TransportStats } from './types.js';
import { retryAfterMs } from './retry-after.js';

export interface HttpTransportOptions {
  /** `http://host:port` (no trailing slash) */
  base: string;
  timeoutMs: number;
  maxAttempts: number;
  backoff: Backoff;
  maxPending: number;
  headers: Record<string, string> | undefined;
  /** Told of every decision before it is handed over, with the time (performance.now) its check was issued. */
  observe?: (req: CheckRequest, d: ClientDecision, issuedAt: number) => void;
}

/** Most checks in one `POST /v1/check` (the server's default `maxBatchItems`). */
const BATCH_MAX = 1000;

/**
 * `POST /v1/check` over fetch (keep-alive). Checks issued in one turn share one request (`{checks: [...]}`).
 * A request that fails to connect or is cut is re-sent after a backoff while attempts and time remain; a 503
 * is re-sent after its `Retry-After`.
 */
export class HttpTransport implements Transport {
  private readonly o: HttpTransportOptions;
  private queue: Pending[] = [];
  private scheduled = false;
  private closed = false;
  private pending = 0;
  private resent = 0;
  private readonly policyHeaders = new Map<string, string>();
  private readonly live = new Set<Pending>();
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(o: HttpTransportOptions) {
    this.o = o;
  }

  readonly connected = true;

  connect(): Promise<void> {
    return this.closed ? Promise.reject(clientClosed()) : Promise.resolve();
  }

  rateLimitPolicy(policy: string): string | undefined {
    return this.policyHeaders.get(policy);
  }

  stats(): TransportStats {
    return { pending: this.pending, resent: this.resent, connects: 0, subscriptions: 0 };
  }

  check(req: CheckRequest, opts: CheckOptions | undefined): Promise<ClientDecision> {
    if (this.closed) return Promise.reject(clientClosed());
    if (opts?.onReady !== undefined) {
      return Promise.reject(new RangeError('onReady: subscriptions need the WebSocket transport (a ws:// url or transport: "ws")'));
    }
    if (this.pending >= this.o.maxPending) {
      return Promise.reject(clientOverloaded(this.o.maxPending));
    }
    this.pending++;
    return new Promise<ClientDecision>((resolve, reject) => {
      const p: Pending = {
        id: 0, req, resolve, reject, deadline: performance.now() + this.o.timeoutMs, attempts: 0, sentOn: 0, done: false,
        onReady: undefined,
      };
      this.live.add(p);
      this.queue.push(p);
      if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(this.flush);
      }
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    const err = clientClosed();
    for (const p of [...this.live]) this.settle(p, err);
    this.queue = [];
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const q = this.queue;
    this.queue = [];
    for (let i = 0; i < q.length; i += BATCH_MAX) this.send(q.slice(i, i + BATCH_MAX));
  };

  /**
   * Posts `items`; whatever throws on the way (a bug: every answer is checked before it is read) fails the
   * checks still unsettled with it, so none is left pending and nothing goes unhandled.
   */
  private send(items: Pending[]): void {
    this.post(items).catch((e: unknown) => {
      const err = asError(e);
      for (const p of items) this.settle(p, err);
    });
  }

  private async post(items: Pending[]): Promise<void> {
    items = items.filter((p) => !p.done);
    if (items.length === 0 || this.closed) return;
    const now = performance.now();
    const budget = Math.min(...items.map((p) => p.deadline)) - now;
    if (budget <= 0) {
      for (const p of items) this.settle(p, timeout(this.o.timeoutMs));
      return;
    }
    for (const p of items) p.attempts++;
    const single = items.length === 1;
    // wait: 0 (onLimit: delay): the server answers a delayed admission at once and the client waits it out
    // (src/client/index.ts), so a hold never runs into timeoutMs; a batch is always answered at once
    const body = single ? JSON.stringify({ ...items[0].req, wait: 0 }) : JSON.stringify({ checks: items.map((p) => p.req) });
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${this.o.base}/v1/check`, {
        method: 'POST',
        headers: { ...this.o.headers, 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(Math.ceil(budget)),
      });
      text = await res.text();
    } catch (e) {
      if ((e as Error).name === 'TimeoutError') {
        for (const p of items) this.settle(p, timeout(this.o.timeoutMs));
        return;
      }
      // could not connect, or the connection was cut: send again after a backoff, or give up
      return this.again(items, this.o.backoff.next(),
        new SluiceClientError('UNAVAILABLE', `POST /v1/check failed: ${(e as Error).message}${causeOf(e)}`));
    }
    if (this.closed) return;
    if (res.status === 429 || res.status === 503) return this.throttled(items, res, text);
    this.o.backoff.reset();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      const err = new SluiceClientError('PROTOCOL', `POST /v1/check answered ${res.status} with a body that is not JSON`);
      for (const p of items) this.settle(p, err);
      return;
    }
    if (res.status === 200) {
      if (single) {
        const ph = res.headers.get('ratelimit-policy');
        if (ph !== null && typeof items[0].req.policy === 'string') this.policyHeaders.set(items[0].req.policy, ph);
        const bad = decisionProblem(json);
        return this.settle(items[0], bad === null ? json as ClientDecision : notADecision('POST /v1/check answer', bad));
      }
      const results = isObject(json) ? json.results : undefined;
      if (!Array.isArray(results) || results.length !== items.length) {
        const err = new SluiceClientError('PROTOCOL', 'POST /v1/check: results do not match the checks sent');
        for (const p of items) this.settle(p, err);
        return;
      }
      const retry: Pending[] = [];
      let retryErr: Error | null = null;
      results.forEach((r: unknown, i) => {
        const e = isObject(r) ? r.error : undefined;
        if (e === undefined) {
          const bad = decisionProblem(r);
          return this.settle(items[i], bad === null ? r as ClientDecision : notADecision(`POST /v1/check results[${i}]`, bad));
        }
        if (!isObject(e)) return this.settle(items[i], notADecision(`POST /v1/check results[${i}]`, 'error: must be an object'));
        const err = remoteError(e);
        if (isRetryable(err)) {
          retry.push(items[i]);
          retryErr = err;
        } else this.settle(items[i], err);
      });
      if (retry.length > 0) this.again(retry, 1000, retryErr!);
      return;
    }
    const err = remoteError(isObject(json) ? json : {}, res.status);
    for (const p of items) this.settle(p, err);
  }

  /**
   * A 503 (sluice overloaded or closing, or a proxy's) or a 429 (never sluice's own: /v1/check answers 200
   * whatever the decision, so an intermediary's rate limit): waits the answer's Retry-After (delay-seconds or
   * an HTTP-date; without one, the next backoff step) and sends again while attempts and time remain, else
   * fails the checks with sluice's error from the body, or THROTTLED (429) / UNAVAILABLE (503) when the body
   * is not one of sluice's.
   */
  private throttled(items: Pending[], res: Response, text: string): void {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const ours = typeof body === 'object' && body !== null && typeof (body as { code?: unknown }).code === 'string';
    const what = `POST /v1/check answered ${res.status}${res.headers.get('retry-after') === null ? '' : ` (Retry-After: ${res.headers.get('retry-after')})`}`;
    const err = ours ? remoteError(body as Record<string, unknown>, res.status)
      : res.status === 429
        ? new SluiceClientError('THROTTLED', `${what} without a sluice error body: an intermediary (proxy, gateway) limited the request`)
        : new SluiceClientError('UNAVAILABLE', `${what} without a sluice error body`);
    this.again(items, retryAfterMs(res.headers.get('retry-after')) ?? this.o.backoff.next(), err);
  }

  /** Sends `items` again after `delayMs` if attempts and time remain; else fails them with `err`. */
  private again(items: Pending[], delayMs: number, err: Error): void {
    const now = performance.now();
    const retry = items.filter((p) => {
      if (p.attempts < this.o.maxAttempts && now + delayMs < p.deadline && !this.closed) return true;
      this.settle(p, err);
      return false;
    });
    if (retry.length === 0) return;
    this.resent += retry.length;
    const t = setTimeout(() => {
      this.timers.delete(t);
      this.send(retry);
    }, delayMs);
    this.timers.add(t);
  }

  private settle(p: Pending, v: ClientDecision | Error): void {
    if (p.done) return;
    p.done = true;
    this.pending--;
    this.live.delete(p);
    if (v instanceof Error) return p.reject(v);
    try {
      this.o.observe?.(p.req, v, p.deadline - this.o.timeoutMs);
    } catch (e) {
      // the check is settled either way: a failing observer fails it rather than leave it pending
      return p.reject(asError(e));
    }
    p.resolve(v);
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

function timeout(ms: number): SluiceClientError {
  return new SluiceClientError('TIMEOUT', `no answer within ${ms} ms`);
}

function causeOf(e: unknown): string {
  const c = (e as { cause?: { code?: string; message?: string } }).cause;
  return c === undefined ? '' : ` (${c.code ?? c.message ?? ''})`;
}
