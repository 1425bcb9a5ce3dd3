import { ErrorCodes, SluiceError, isSluiceError } from '../util/errors.js';

const BRAND = Symbol.for('sluice.client-error');

/** Why the client could not get a decision (the server's own errors arrive as {@link SluiceError}s). */
export type ClientErrorCode =
  /** The server could not be reached, or the connection dropped and the check was not re-sent. */
  | 'UNAVAILABLE'
  /** No answer within the check's timeout. */
  | 'TIMEOUT'
  /** The client was closed. */
  | 'CLOSED'
  /** The client's own queue of checks waiting for a connection is full. */
  | 'OVERLOADED'
  /** The server closed the connection for a protocol reason (1002, 1009), or sent something unreadable. */
  | 'PROTOCOL'
  /**
   * HTTP: something between the client and sluice (a proxy, an API gateway) answered 429 without a sluice
   * error body, and the client, which waited its Retry-After and sent again while attempts and time remained,
   * got no decision. Status 429.
   */
  | 'THROTTLED'
  /** The server answered with an error code this client does not know (or an error without a code). */
  | 'REMOTE';

const STATUS: Record<ClientErrorCode, number> = {
  UNAVAILABLE: 503, TIMEOUT: 504, CLOSED: 503, OVERLOADED: 503, PROTOCOL: 502, THROTTLED: 429, REMOTE: 500,
};

/** An error of the client side: the transport failed, or the server's answer could not be used. */
export class SluiceClientError extends Error {
  readonly [BRAND] = true;
  readonly code: ClientErrorCode;
  /** The HTTP status a middleware answers with: 503, 504 (timeout), 502 (protocol) or the server's. */
  readonly status: number;
  readonly field: string | undefined;

  constructor(code: ClientErrorCode, message: string, status?: number, field?: string) {
    super(message);
    this.name = 'SluiceClientError';
    this.code = code;
    this.status = status ?? STATUS[code];
    this.field = field;
  }
}

export function isSluiceClientError(e: unknown): e is SluiceClientError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[BRAND] === true;
}

/** A call after the client's close(). */
export function clientClosed(): SluiceClientError {
  return new SluiceClientError('CLOSED', 'client is closed');
}

/** The client's own queue of `max` checks waiting for the server is full. */
export function clientOverloaded(max: number): SluiceClientError {
  return new SluiceClientError('OVERLOADED', `more than ${max} checks pending in the client`);
}

/**
 * An answer that should be a decision and is not one (`what` names it, `problem` says which field is wrong, as
 * src/wire/decision-shape.ts `decisionProblem` words it): PROTOCOL, the server sent something unreadable.
 */
export function notADecision(what: string, problem: string): SluiceClientError {
  return new SluiceClientError('PROTOCOL', `${what} is not a decision: ${problem}`);
}

/** A subscription's ready event with a field that is not as the server writes it: PROTOCOL, naming the field. */
export function notAReadyEvent(id: number, problem: string): SluiceClientError {
  return new SluiceClientError('PROTOCOL', `ready event of subscription ${id} is malformed: ${problem}`);
}

/**
 * An error the server reported (`{code, detail, field, status}`), as the SluiceError the engine threw; an
 * unknown or missing code is a REMOTE client error naming the HTTP status (`httpStatus`, when known).
 */
export function remoteError(e: { code?: unknown; detail?: unknown; field?: unknown; status?: unknown }, httpStatus?: number): Error {
  const detail = typeof e.detail === 'string' ? e.detail : 'no detail';
  const field = typeof e.field === 'string' && e.field !== '' ? e.field : undefined;
  if (typeof e.code === 'string' && Object.hasOwn(ErrorCodes, e.code)) {
    return new SluiceError(e.code as keyof typeof ErrorCodes, detail, field);
  }
  const status = typeof e.status === 'number' ? e.status : httpStatus ?? 500;
  const code = typeof e.code === 'string' ? `unknown error code ${JSON.stringify(e.code)}` : 'an error without a sluice code';
  return new SluiceClientError('REMOTE', `${httpStatus === undefined ? '' : `HTTP ${httpStatus}: `}${code}: ${detail}`, status, field);
}

/** Whether a server error says "try again later" (503: OVERLOADED, SHARD_FAILED, CLOSED). */
export function isRetryable(e: Error): boolean {
  return isSluiceError(e) && e.status === 503;
}
