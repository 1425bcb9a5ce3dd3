/**
 * `sluice/client`: decisions from a remote sluice, over HTTP (`POST /v1/check`) or one multiplexed WebSocket
 * (`/v1/stream`).
 *
 * @example
 * import { createClient } from 'sluice/client';
 * const client = createClient({ url: 'ws://127.0.0.1:8080' });
 * const d = await client.check({ policy: 'free', key: 'tenant-42', cost: 1 });
 * await client.close();
 */
import type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from '../types/leases.js';
import type { CheckRequest } from '../types/decision.js';
import { LeaseClient } from './leases.js';
import { Backoff, type BackoffOptions } from './backoff.js';
import { HttpTransport } from './http.js';
import { WsTransport } from './ws.js';
import { SluiceClientError } from './errors.js';
import type { CheckOptions, ClientDecision, Transport, TransportStats } from './types.js';

export { SluiceClientError, isSluiceClientError, type ClientErrorCode } from './errors.js';
export { SluiceError, isSluiceError } from '../util/errors.js';
export type { CheckOptions, ClientDecision, ReadyCallback, ReadyEvent } from './types.js';
export type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from '../types/leases.js';
export type { CheckRequest, Decision } from '../types/decision.js';
export { Backoff, type BackoffOptions } from './backoff.js';

export interface ClientOptions {
  /**
   * Where sluice listens. `http://host:port` uses HTTP unless `transport: 'ws'`; `ws://host:port` (with or
   * without `/v1/stream`) uses the WebSocket. https/wss work the same way.
   */
  url: string;
  /** Default: from the url's scheme. */
  transport?: 'http' | 'ws';
  /** WebSocket frames for checks with a `key` (descriptor checks always go as JSON). Default 'binary'. */
  encoding?: 'binary' | 'json';
  /** Ms a check may take, re-sends and waits included, before it fails with TIMEOUT. Default 5,000. */
  timeoutMs?: number;
  /**
   * WebSocket: what happens to checks sent on a connection that drops before they are answered. `resend` (the
   * default) sends them again on the next connection (a check may then be counted twice by the server, never
   * zero times); `fail` rejects them with UNAVAILABLE. Either way none is lost silently.
   */
  onDisconnect?: 'resend' | 'fail';
  /** Most times one check is sent (the first included). Default 3. */
  maxAttempts?: number;
  /** Reconnect (WebSocket) and re-send (HTTP) delays. Default 50 ms doubling to 5 s, with full jitter. */
  reconnect?: BackoffOptions;
  /**
   * WebSocket: ms the server may stay silent (no answer, no ping) before the client pings it. Only a quiet
   * connection is pinged. Default 2,000.
   */
  pingIntervalMs?: number;
  /**
   * WebSocket: ms a ping may go unanswered (no pong, nor anything else from the server) before the client takes
   * the connection for dead (a proxy or NAT that stopped forwarding without closing it) and drops it: its checks
   * are re-sent on the next connection or failed, per `onDisconnect`, and the client reconnects. With the
   * defaults a dead connection is dropped within 4 s of silence, before a check's default 5 s timeout. Default 2,000.
   */
  pongTimeoutMs?: number;
  /**
   * WebSocket: ms an attempt to connect (TCP, TLS and the upgrade) may take before it is abandoned and the
   * client tries again after the reconnect backoff. Default 5,000.
   */
  connectTimeoutMs?: number;
  /** Most checks held by the client (waiting for a connection or an answer); more reject with OVERLOADED. Default 100,000. */
  maxPending?: number;
  /** WebSocket: most checks sent and not yet answered. Default 16,384 (under the server's per-connection queue). */
  maxInFlight?: number;
  /**
   * Answer a check locally, denied, while an earlier denial's Retry-After (`retryAfterMs`) for the same policy, key
   * and cost has not passed, measured from when that check was issued, for at most `maxLocalDenialMs`: checks
   * alone cannot make it admissible sooner (only admitted checks spend), but an admin reset of the key or a
   * reload that raises its limit can, and the server is asked again after that bound. The local answer has
   * `local: true` and the server's remaining wait. Default true.
   */
  honourRetryAfter?: boolean;
  /**
   * Ms (a positive integer) a remembered denial answers repeats of its check locally, from when the denied check
   * was issued; then the next repeat goes to the server (and a denial is remembered afresh), so a reset or a
   * reload that made the key admissible is seen within this bound. Default 1,000.
   */
  maxLocalDenialMs?: number;
  /** Most denials remembered for `honourRetryAfter`. Default 10,000. */
  maxRememberedDenials?: number;
  /** Extra headers on every HTTP request and on the WebSocket upgrade (e.g. authorization). */
  headers?: Record<string, string>;
}

export interface ClientStats extends TransportStats {
  /** Checks answered locally from a remembered Retry-After. */
  localDenials: number;
}

export interface SluiceClient {
  /**
   * Decides one check remotely. Rejects with a SluiceError for what the server refused (INVALID_ARGUMENT,
   * UNKNOWN_POLICY, OVERLOADED...) or a SluiceClientError (UNAVAILABLE, TIMEOUT, CLOSED, OVERLOADED, PROTOCOL).
   */
  check(req: CheckRequest, opts?: CheckOptions): Promise<ClientDecision>;
  /**
   * Takes a lease under a concurrency policy (`POST /v1/acquire` on the server's HTTP port, whatever the
   * transport; never re-sent: see src/client/leases.ts). Resolves with the server's answer, allowed or not.
   */
  acquire(req: AcquireRequest): Promise<LeaseDecision>;
  /** Gives back a lease (`POST /v1/release`). Rejects with UNKNOWN_LEASE (field `leaseId`) when the key does not hold it. */
  release(req: ReleaseRequest): Promise<ReleaseResult>;
  /** Resolves when the client can send (WebSocket open); checks issued before then wait for it. */
  connect(): Promise<void>;
  /** Whether the WebSocket is open (always true over HTTP). */
  readonly connected: boolean;
  /** The `RateLimit-Policy` header value the server last sent for a policy (HTTP transport), for middleware. */
  rateLimitPolicy(policy: string): string | undefined;
  stats(): ClientStats;
  /** Fails what is pending with CLOSED and closes the connection. */
  close(): Promise<void>;
}

/**
 * Creates a client. The WebSocket transport connects at once and reconnects with exponential backoff and
 * full jitter whenever the connection drops.
 * @throws TypeError on a url that is not http(s) or ws(s); RangeError on a bad option.
 */
export function createClient(o: ClientOptions): SluiceClient {
  const url = new URL(o.url);
  const scheme = url.protocol.replace(/:$/, '');
  if (!['http', 'https', 'ws', 'wss'].includes(scheme)) throw new TypeError(`url: must be http(s) or ws(s) (got ${o.url})`);
  const transportKind = o.transport ?? (scheme.startsWith('ws') ? 'ws' : 'http');
  const timeoutMs = positiveInt(o.timeoutMs ?? 5000, 'timeoutMs');
  const maxAttempts = positiveInt(o.maxAttempts ?? 3, 'maxAttempts');
  const maxPending = positiveInt(o.maxPending ?? 100_000, 'maxPending');
  const backoff = new Backoff(o.reconnect);
  const secure = scheme === 'https' || scheme === 'wss';
  const honour = o.honourRetryAfter ?? true;
  const denials = new DenialMemory(positiveInt(o.maxRememberedDenials ?? 10_000, 'maxRememberedDenials'),
    positiveInt(o.maxLocalDenialMs ?? 1000, 'maxLocalDenialMs'));
  let localDenials = 0;
  // Denials are remembered as they arrive, with the time their check was issued.
  const observe = honour
    ? (req: CheckRequest, d: ClientDecision, issuedAt: number): void => {
      if (!d.allowed && d.retryAfterMs !== null && d.retryAfterMs > 0) {
        const k = memoryKey(req);
        if (k !== null) denials.remember(k, req.cost, d, issuedAt);
      }
    }
    : undefined;
  let t: Transport;
  let closed = false;
  const leases = new LeaseClient({ base: `${secure ? 'https' : 'http'}://${url.host}`, timeoutMs, headers: o.headers, closed: () => closed });
  if (transportKind === 'ws') {
    const path = url.pathname === '/' || url.pathname === '' ? '/v1/stream' : url.pathname;
    t = new WsTransport({
      url: `${secure ? 'wss' : 'ws'}://${url.host}${path}`,
      encoding: o.encoding ?? 'binary',
      timeoutMs, maxAttempts, backoff, maxPending, observe,
      onDisconnect: o.onDisconnect ?? 'resend',
      maxInFlight: positiveInt(o.maxInFlight ?? 16_384, 'maxInFlight'),
      headers: o.headers,
      pingIntervalMs: positiveInt(o.pingIntervalMs ?? 2000, 'pingIntervalMs'),
      pongTimeoutMs: positiveInt(o.pongTimeoutMs ?? 2000, 'pongTimeoutMs'),
      connectTimeoutMs: positiveInt(o.connectTimeoutMs ?? 5000, 'connectTimeoutMs'),
    });
  } else {
    t = new HttpTransport({
      base: `${secure ? 'https' : 'http'}://${url.host}`, timeoutMs, maxAttempts, backoff, maxPending, headers: o.headers, observe,
    });
  }

  return {
    get connected() {
      return t.connected;
    },
    connect: () => t.connect(),
    rateLimitPolicy: (policy) => t.rateLimitPolicy(policy),
    stats: () => ({ ...t.stats(), localDenials }),
    close: () => {
      closed = true;
      return t.close();
    },
    acquire: (req) => leases.acquire(req),
    release: (req) => leases.release(req),
    check(req: CheckRequest, opts?: CheckOptions): Promise<ClientDecision> {
      if (honour && denials.size > 0 && typeof req === 'object' && req !== null && opts?.onReady === undefined) {
        const k = memoryKey(req);
        const local = k === null ? null : denials.answer(k, req.cost, performance.now());
        if (local !== null) {
          localDenials++;
          return Promise.resolve(local);
        }
      }
      const d = t.check(req, opts);
      return opts?.wait === false ? d : d.then(waitOut);
    },
  };
}

/** onLimit: delay: resolves with `d` once its delayMs has passed (at once without one). */
function waitOut(d: ClientDecision): ClientDecision | Promise<ClientDecision> {
  const ms = d.delayMs;
  if (ms === undefined || !(ms > 0)) return d;
  return new Promise((resolve) => setTimeout(() => resolve(d), ms));
}

/**
 * Denials with a finite wait, by policy and key. A later check at the same cost issued before the wait has
 * passed (measured from when the denied check was issued, which is no later than when the server decided it)
 * would be denied by the server too as far as checks go (only admitted checks spend), but not after an admin
 * reset of the key or a reload that raised its limit: so a denial answers locally for at most `reuseMs` from
 * its check's issue, then the server is asked again.
 */
class DenialMemory {
  /** `until`: when the wait has passed; `stale`: when the server is asked again (no later than `until`). */
  private readonly m = new Map<string, { until: number; stale: number; cost: number; d: ClientDecision; at: number }>();

  constructor(private readonly max: number, private readonly reuseMs: number) {}

  get size(): number {
    return this.m.size;
  }

  answer(k: string, cost: number, now: number): ClientDecision | null {
    const e = this.m.get(k);
    if (e === undefined) return null;
    if (now >= e.stale) {
      this.m.delete(k);
      return null;
    }
    // only the same cost: a higher one waits longer (or never passes), and the server says how long
    if (cost !== e.cost) return null;
    const elapsed = now - e.at;
    const d: ClientDecision = {
      ...e.d, resetAfterMs: Math.max(0, Math.ceil(e.d.resetAfterMs - elapsed)), retryAfterMs: Math.ceil(e.until - now), local: true,
    };
    // the remembered answer's subscription belongs to the check that made it, not to this one
    delete d.subscribed;
    return d;
  }

  remember(k: string, cost: number, d: ClientDecision, issued: number): void {
    if (this.m.size >= this.max && !this.m.has(k)) this.m.delete(this.m.keys().next().value!);
    this.m.delete(k);
    const until = issued + d.retryAfterMs!;
    this.m.set(k, { until, stale: Math.min(until, issued + this.reuseMs), cost, d, at: issued });
  }
}

function memoryKey(req: CheckRequest): string | null {
  if (typeof req.policy !== 'string' || typeof req.cost !== 'number' || req.cost <= 0) return null;
  if (typeof req.key === 'string' && req.descriptors === undefined) return `${req.policy}\u0000k${req.key}`;
  if (req.key === undefined && typeof req.descriptors === 'object' && req.descriptors !== null) {
    const names = Object.keys(req.descriptors).sort();
    return `${req.policy}\u0000d${JSON.stringify(names.map((n) => [n, req.descriptors![n]]))}`;
  }
  return null;
}

function positiveInt(v: number, name: string): number {
  if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`${name}: must be a positive integer (got ${v})`);
  return v;
}

export type { TransportStats };
