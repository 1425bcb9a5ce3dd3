/**
 * The HTTP front's requests in flight on uWebSockets.js: each one's exchange (whether the client went away,
 * so that nothing is written to a dead response), the status line and problem answers, and draining: a
 * request that arrives once the server is closing is refused, and close() waits for the ones in flight.
 */
import type { HttpResponse } from 'uWebSockets.js';
import type { Logger } from 'pino';
import { serverDraining } from '../util/errors.js';
import { problemOf, type Problem } from './problem.js';

/** One request's life: whether the client went away, so nothing is written to a dead response. */
export interface Exchange {
  res: HttpResponse;
  /** The client went away, or the request was answered: nothing more is written. */
  aborted: boolean;
  /** Begun after close() started draining: not in flight when it did, so close() does not wait for it. */
  late: boolean;
  /** A delayed answer being held (onLimit: delay): stops its timer and frees its wait place if the client leaves. */
  cancel?: () => void;
}

/** Writes an answer on a response (inside `cork`). */
export type Writer = (res: HttpResponse) => void;

/** Where the answers are counted, by status (the server's metrics). */
export interface ResponseCounter {
  response(status: number): void;
}

const STATUS_LINE: Record<number, string> = {
  200: '200 OK', 400: '400 Bad Request', 403: '403 Forbidden', 404: '404 Not Found', 405: '405 Method Not Allowed',
  409: '409 Conflict', 413: '413 Content Too Large', 415: '415 Unsupported Media Type', 429: '429 Too Many Requests',
  500: '500 Internal Server Error', 503: '503 Service Unavailable',
};

/** The status of the answer being written (uWS sends 200 unless told otherwise), counted by `replyNow`. */
let written = 200;

/** The status line for `status` (`429 Too Many Requests`), noted as the status of the answer being written. */
export function statusLine(status: number): string {
  written = status;
  return STATUS_LINE[status] ?? `${status} Error`;
}

/**
 * Writes problem `p` as `application/problem+json` with its status (a 503 with `Retry-After: 1`), an `Allow`
 * header when given (405), and closes the connection after it when `closeConnection` (an oversize body left
 * unread, a request refused while draining).
 */
export function writeProblem(res: HttpResponse, p: Problem, allow?: string, closeConnection = false): void {
  res.writeStatus(statusLine(p.status));
  res.writeHeader('Content-Type', 'application/problem+json');
  if (allow !== undefined) res.writeHeader('Allow', allow);
  if (p.status === 503) res.writeHeader('Retry-After', '1');
  res.end(JSON.stringify(p), closeConnection);
}

/**
 * The exchanges of one server: begun per request that is not answered inside uWS's callback, ended by its
 * answer or by the client going away. Every answer is counted by status in `metrics`.
 */
export class Exchanges {
  /** Set when close() begins: later requests are refused (see {@link refuseDraining}). */
  draining = false;
  private inFlight = 0;
  private drained: (() => void) | null = null;

  constructor(private readonly metrics: ResponseCounter, private readonly log?: Logger) {}

  /** Begins an exchange on `res`, watching for the client to go away. */
  begin(res: HttpResponse): Exchange {
    const x: Exchange = { res, aborted: false, late: this.draining };
    this.inFlight++;
    res.onAborted(() => {
      x.aborted = true;
      x.cancel?.();
      this.finish();
    });
    return x;
  }

  /** Ends an exchange that was answered or abandoned. */
  finish(): void {
    this.inFlight--;
    if (this.inFlight === 0 && this.drained) this.drained();
  }

  /** Resolves once no exchange is in flight (close(), after {@link draining} is set). */
  async settled(): Promise<void> {
    if (this.inFlight > 0) await new Promise<void>((r) => (this.drained = r));
  }

  /** Writes an answer unless the client left; cork batches the writes into one syscall. */
  reply(x: Exchange, write: Writer): void {
    if (x.aborted) return;
    x.aborted = true; // answered: a later abort must not count twice
    this.replyNow(x.res, write);
    this.finish();
  }

  /** Writes an answer inside uWS's callback for the request (no exchange: nothing was awaited). */
  replyNow(res: HttpResponse, write: Writer): void {
    written = 200;
    res.cork(() => write(res));
    this.metrics.response(written);
  }

  /** Answers 200 with a JSON `body` (unless the client left). */
  json(x: Exchange, body: string): void {
    this.reply(x, (r) => {
      r.writeStatus(statusLine(200));
      r.writeHeader('Content-Type', 'application/json');
      r.end(body);
    });
  }

  /**
   * Answers the problem of `e` (a 5xx is logged). With `o`: an `Allow` header (405) or closing the connection
   * (after an oversize body), and nothing logged.
   */
  fail(x: Exchange, e: unknown, o?: { allow?: string; close?: boolean }): void {
    if (o === undefined) this.reply(x, this.problemWriter(e));
    else this.reply(x, (r) => writeProblem(r, problemOf(e), o.allow, o.close));
  }

  /** {@link fail} inside uWS's callback for the request, with no exchange. */
  failNow(res: HttpResponse, e: unknown): void {
    this.replyNow(res, this.problemWriter(e));
  }

  /**
   * Once draining, a check whose request arrives after (on a kept-alive connection) is refused and its
   * connection closed, not decided: close() waits only for the requests in flight when it began, so a later
   * one could be decided (its tokens spent) and its answer cut off by the socket closing. `x` null: inside
   * uWS's callback, with no exchange.
   */
  refuseDraining(res: HttpResponse, x: Exchange | null): void {
    const w = (r: HttpResponse): void => writeProblem(r, problemOf(serverDraining()), undefined, true);
    if (x === null) this.replyNow(res, w);
    else this.reply(x, w);
  }

  private problemWriter(e: unknown): Writer {
    const p = problemOf(e);
    if (p.status >= 500) this.log?.warn({ err: e }, 'check failed');
    return (res) => writeProblem(res, p);
  }
}
