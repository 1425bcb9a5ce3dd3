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
  /**
   * Limiter.checkSync was given a check it cannot decide on the calling thread (a limiter with shards, a
   * policy decided in Redis): use check(). A caller's mistake, never a transport's answer. HTTP 500.
   */
  NOT_SYNCHRONOUS: { status: 500 },
  /** The clock returned something that is not a Unix-epoch ms integer in range. HTTP 500. */
  CLOCK: { status: 500 },
  /** Redis failed or timed out on an admin read or write (limiter.inspect, limiter.reset). HTTP 503. */
  STORE_FAILED: { status: 503 },
  /** A release names a lease that is not held: unknown, already released, or expired (released by its TTL). HTTP 409. */
  UNKNOWN_LEASE: { status: 409 },
  /** A compare-and-set lost: the policies changed since the caller read them (admin PUT with a stale version). HTTP 409. */
  CONFLICT: { status: 409 },
  // What the transports answer about the request itself, before any check is read.
  /** The admin API's bearer token is missing or wrong. HTTP 401. */
  UNAUTHORIZED: { status: 401 },
  /** No route for the path. HTTP 404. */
  NOT_FOUND: { status: 404 },
  /** The route exists, not for this method. HTTP 405. */
  METHOD_NOT_ALLOWED: { status: 405 },
  /** A body or batch past its bound. HTTP 413. */
  TOO_LARGE: { status: 413 },
  /** A body in a content type the route does not take. HTTP 415. */
  UNSUPPORTED_MEDIA_TYPE: { status: 415 },
  /** Anything that is not a SluiceError, reported without its message. HTTP 500. */
  INTERNAL: { status: 500 },
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

/** checkSync on a check that needs another thread or Redis; `field` is what makes it so (`shards`, `policy`). */
export function notSynchronous(field: string, why: string): SluiceError {
  return new SluiceError('NOT_SYNCHRONOUS', `${field}: ${why}: checkSync decides on the calling thread only; use check()`, field);
}

/** An invalid check argument; `field` is named in the message. */
export function invalidArgument(field: string, why: string): SluiceError {
  return new SluiceError('INVALID_ARGUMENT', `${field}: ${why}`, field);
}

/** An invalid policy; the message names the policy and the field. */
export function configError(where: string, field: string, why: string): SluiceError {
  return new SluiceError('CONFIG', `${where}: ${field}: ${why}`, field);
}

/** A check, inspect or reset naming a policy that is not in force; `note` is appended to the message. */
export function unknownPolicy(name: string, note?: string): SluiceError {
  return new SluiceError('UNKNOWN_POLICY', `policy: unknown policy ${JSON.stringify(name)}${note === undefined ? '' : ' ' + note}`, 'policy');
}

/** A release of `leaseId`, which the key does not hold (never acquired, released, or expired); it changed nothing. */
export function unknownLease(leaseId: string): SluiceError {
  return new SluiceError('UNKNOWN_LEASE', `leaseId: ${JSON.stringify(leaseId)} is not held (unknown, already released, or expired): nothing was released`, 'leaseId');
}

/** A call after close(): `what` is closed (the limiter, the policy reloader). */
export function closed(what = 'limiter'): SluiceError {
  return new SluiceError('CLOSED', `${what} is closed`);
}

/** A check a stream server refuses because it is closing its connections. */
export function shuttingDown(): SluiceError {
  return new SluiceError('CLOSED', 'server is shutting down');
}

/** A request the HTTP server refuses while it drains: another instance should take it. */
export function serverDraining(): SluiceError {
  return new SluiceError('CLOSED', 'server: draining (shutting down): retry on another instance', 'server');
}

/** A bounded queue is full; `why` says which and its bound. */
export function overloaded(why: string): SluiceError {
  return new SluiceError('OVERLOADED', why);
}

/** A shard (or the kernel behind it) failed to decide; `why` names the shard and the cause. */
export function shardFailed(why: string): SluiceError {
  return new SluiceError('SHARD_FAILED', why);
}

/** Redis failed an admin read or write; the message is the store's, prefixed `redis: ` (once: a deadline's has it). */
export function storeFailed(e: unknown): SluiceError {
  const m = (e as Error)?.message ?? String(e);
  return new SluiceError('STORE_FAILED', m.startsWith('redis: ') ? m : `redis: ${m}`);
}

/** The clock threw or returned something that is not integer Unix ms in range; `why` says which. */
export function clockError(why: string): SluiceError {
  return new SluiceError('CLOCK', why);
}

/** A compare-and-set lost on `field`; `why` says what changed and what to do. */
export function conflict(field: string, why: string): SluiceError {
  return new SluiceError('CONFLICT', `${field}: ${why}`, field);
}

/** The admin API's token is missing or wrong; `why` says which. */
export function unauthorized(why: string): SluiceError {
  return new SluiceError('UNAUTHORIZED', `authorization: ${why}`, 'authorization');
}

/** No route for `path`. */
export function notFound(path: string): SluiceError {
  return new SluiceError('NOT_FOUND', `path: no route for ${path}`, 'path');
}

/** `method` on `route`, which takes only `allowed` (e.g. `GET or POST`). */
export function methodNotAllowed(method: string, route: string, allowed: string): SluiceError {
  return new SluiceError('METHOD_NOT_ALLOWED', `method: ${method} is not allowed on ${route} (${allowed})`, 'method');
}

/**
 * A limiter's answer that is not a decision (`problem` names the field, as src/wire/decision-shape.ts words it):
 * a checker of the caller's own making broke its contract. INTERNAL, field `decision`.
 */
export function malformedDecision(problem: string): SluiceError {
  return new SluiceError('INTERNAL', `decision: ${problem}`, 'decision');
}

/** `field` (a body, a batch) past its bound; `why` gives the bound (and the size when known). */
export function tooLarge(field: string, why: string): SluiceError {
  return new SluiceError('TOO_LARGE', `${field}: ${why}`, field);
}

/** A body whose content type is `got`; the route takes `want` (e.g. `application/json`). */
export function unsupportedMediaType(got: string, want: string): SluiceError {
  return new SluiceError('UNSUPPORTED_MEDIA_TYPE', `content-type: must be ${want} (got ${JSON.stringify(got)})`, 'content-type');
}

/**
 * A command-line option or argument that is missing or malformed; `message` is shown as it is, followed by the
 * command's usage, and `sluice` exits 2.
 */
export function usage(message: string, option?: string): SluiceError {
  return new SluiceError('USAGE', message, option);
}

/** A server option or environment setting (`field`) that is malformed; `message` is shown as it is. */
export function badSetting(field: string, message: string): SluiceError {
  return new SluiceError('CONFIG', message, field);
}

/** A configuration source (a file, a document's name) that cannot be read or parsed: `<source>: <why>`. */
export function configSourceError(source: string, why: string): SluiceError {
  return new SluiceError('CONFIG', `${source}: ${why}`);
}

/** A rule about the policy set as a whole (not one policy): `policies: <why>`, field `policies`. */
export function policiesError(why: string): SluiceError {
  return new SluiceError('CONFIG', `policies: ${why}`, 'policies');
}

/** A trace file (`sluice replay`) that cannot be replayed: `<file>: <why>`, naming the column when there is one. */
export function traceError(file: string, why: string, column?: string): SluiceError {
  return new SluiceError('INVALID_ARGUMENT', `${file}: ${why}`, column);
}

/** A server that cannot listen on its configured address (in use, or not this host's): `message` as it is. */
export function listenFailed(message: string, field = 'port'): SluiceError {
  return new SluiceError('CONFIG', message, field);
}
