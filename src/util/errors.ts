/**
 * One catalog of coded errors. Every error sluice throws or returns is a {@link SluiceError} with a stable
 * `code`, a message that names the offending field where there is one, and the HTTP status a front end maps
 * it to. A `Symbol.for` brand keeps {@link isSluiceError} working across duplicate copies of the package.
 */
const BRAND = Symbol.for('sluice.error');

export const ErrorCodes = {
  /** A check's input is malformed (cost, key, policy, descriptors...). HTTP 400. */
  INVALID_ARGUMENT: { status: 400 },
  /** A policy or configuration file is invalid. Thrown at load time. */
  CONFIG: { status: 500 },
  /** The named policy does not exist. HTTP 400. */
  UNKNOWN_POLICY: { status: 400 },
  /** A bounded queue is full: the caller should retry later. HTTP 503. */
  OVERLOADED: { status: 503 },
  /** A shard worker died or failed while holding the check. HTTP 503. */
  SHARD_FAILED: { status: 503 },
  /** The limiter was closed. HTTP 503. */
  CLOSED: { status: 503 },
  /** The clock returned something that is not a Unix-epoch ms integer in range. HTTP 500. */
  CLOCK: { status: 500 },
  /** Redis failed or timed out on an admin read or write (limiter.inspect, limiter.reset). HTTP 503. */
  STORE_FAILED: { status: 503 },
  /** A compare-and-set lost: the policies changed since the caller read them (admin PUT with a stale version). HTTP 409. */
  CONFLICT: { status: 409 },
  /** The command line is wrong (an unknown flag, a missing or malformed argument). `sluice` exits 2. */
  USAGE: { status: 400 },
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export class SluiceError extends Error {
  readonly [BRAND] = true;
  /** Stable machine-readable code. */
  readonly code: ErrorCode;
  /** The input field at fault (`cost`, `key`, `policy`, `policies.free.period`...), when there is one. */
  readonly field: string | undefined;
  /** HTTP status a front end answers with. */
  readonly status: number;

  constructor(code: ErrorCode, message: string, field?: string) {
    super(message);
    this.name = 'SluiceError';
    this.code = code;
    this.field = field;
    this.status = ErrorCodes[code].status;
  }
}

export function isSluiceError(e: unknown): e is SluiceError {
  return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[BRAND] === true;
}

/** An invalid check argument; `field` is named in the message. */
export function invalidArgument(field: string, why: string): SluiceError {
  return new SluiceError('INVALID_ARGUMENT', `${field}: ${why}`, field);
}

/** An invalid policy; the message names the policy and the field. */
export function configError(where: string, field: string, why: string): SluiceError {
  return new SluiceError('CONFIG', `${where}: ${field}: ${why}`, field);
}

/** A wrong command line: `sluice` prints the message and the command's usage and exits 2. */
export function usageError(why: string, field?: string): SluiceError {
  return new SluiceError('USAGE', why, field);
}
