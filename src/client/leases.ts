/**
 * The client's concurrency leases: `POST /v1/acquire` and `POST /v1/release` on the server's HTTP port (for
 * a `ws://` client too: a lease is one request and one answer, so it needs none of the stream's batching).
 * Neither is re-sent: an acquire whose answer was lost may have taken a lease (it is then held until its TTL),
 * and a release sent twice would answer UNKNOWN_LEASE. The server's errors come back as the SluiceErrors it
 * threw (UNKNOWN_LEASE naming `leaseId`, INVALID_ARGUMENT naming the field...); a transport failure is a
 * SluiceClientError (UNAVAILABLE, TIMEOUT, PROTOCOL).
 */
import type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from '../types/leases.js';
import { SluiceClientError, clientClosed, remoteError } from './errors.js';

export interface LeaseClientOptions {
  /** `http(s)://host:port`, no trailing slash. */
  base: string;
  timeoutMs: number;
  headers: Record<string, string> | undefined;
  closed: () => boolean;
}

export class LeaseClient {
  constructor(private readonly o: LeaseClientOptions) {}

  acquire(req: AcquireRequest): Promise<LeaseDecision> {
    return this.post('/v1/acquire', req) as Promise<LeaseDecision>;
  }

  release(req: ReleaseRequest): Promise<ReleaseResult> {
    return this.post('/v1/release', req) as Promise<ReleaseResult>;
  }

  private async post(path: string, body: unknown): Promise<unknown> {
    if (this.o.closed()) throw clientClosed();
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${this.o.base}${path}`, {
        method: 'POST',
        headers: { ...this.o.headers, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
      text = await res.text();
    } catch (e) {
      if ((e as Error).name === 'TimeoutError') throw new SluiceClientError('TIMEOUT', `POST ${path}: no answer within ${this.o.timeoutMs} ms`);
      throw new SluiceClientError('UNAVAILABLE', `POST ${path} failed: ${(e as Error).message}`);
    }
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      throw new SluiceClientError('PROTOCOL', `POST ${path} answered ${res.status} with a body that is not JSON`);
    }
    if (res.status !== 200) throw remoteError(json ?? {}, res.status);
    return json;
  }
}
