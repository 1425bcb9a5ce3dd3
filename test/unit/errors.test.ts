/**
 * The error catalog (src/util/errors.ts) is the one place errors are made:
 * - each constructor gives its code, HTTP status, field and exact message;
 * - no file outside the catalog builds a SluiceError by hand (the client rebuilds the server's errors from
 *   their wire form, client/errors.ts remoteError, and is the one exception);
 * - a plain `new Error` appears only at the internal invariants and environment faults listed here, each one
 *   caught and mapped before it reaches a user or a bug / broken install if it does.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as E from '../../src/util/errors.js';
import { StoreTimeoutError } from '../../src/store/deadline.js';
import { SRC, sourceFiles } from '../helpers/sources.js';

function sites(pattern: RegExp): Record<string, number> {
  const out: Record<string, number> = {};
  for (const f of sourceFiles(SRC)) {
    const n = readFileSync(f, 'utf8').match(pattern)?.length ?? 0;
    if (n > 0) out[relative(SRC, f)] = n;
  }
  return out;
}

function facts(e: E.SluiceError): [string, number, string | undefined, string] {
  return [e.code, e.status, e.field, e.message];
}

describe('error catalog', () => {
  it('constructors give code, status, field and message', () => {
    expect(facts(E.unknownPolicy('free'))).toEqual(['UNKNOWN_POLICY', 400, 'policy', 'policy: unknown policy "free"']);
    expect(facts(E.unknownPolicy('x', '(in neither config)'))).toEqual(['UNKNOWN_POLICY', 400, 'policy', 'policy: unknown policy "x" (in neither config)']);
    expect(facts(E.closed())).toEqual(['CLOSED', 503, undefined, 'limiter is closed']);
    expect(facts(E.closed('policy reloader'))).toEqual(['CLOSED', 503, undefined, 'policy reloader is closed']);
    expect(facts(E.shuttingDown())).toEqual(['CLOSED', 503, undefined, 'server is shutting down']);
    expect(facts(E.serverDraining())).toEqual(['CLOSED', 503, 'server', 'server: draining (shutting down): retry on another instance']);
    expect(facts(E.overloaded('more than 2 checks pending'))).toEqual(['OVERLOADED', 503, undefined, 'more than 2 checks pending']);
    expect(facts(E.shardFailed('shard 1 is down'))).toEqual(['SHARD_FAILED', 503, undefined, 'shard 1 is down']);
    expect(facts(E.storeFailed(new Error('timeout')))).toEqual(['STORE_FAILED', 503, undefined, 'redis: timeout']);
    expect(facts(E.storeFailed('gone'))).toEqual(['STORE_FAILED', 503, undefined, 'redis: gone']);
    // a deadline's error says `redis: ` already
    expect(facts(E.storeFailed(new StoreTimeoutError(200)))).toEqual(['STORE_FAILED', 503, undefined, 'redis: no reply on the connection for 200 ms']);
    expect(facts(E.clockError('clock threw: x'))).toEqual(['CLOCK', 500, undefined, 'clock threw: x']);
    expect(facts(E.conflict('version', 'stale'))).toEqual(['CONFLICT', 409, 'version', 'version: stale']);
    expect(facts(E.unknownLease('00000000002a'))).toEqual(['UNKNOWN_LEASE', 409, 'leaseId', 'leaseId: "00000000002a" is not held (unknown, already released, or expired): nothing was released']);
    expect(facts(E.unauthorized('missing'))).toEqual(['UNAUTHORIZED', 401, 'authorization', 'authorization: missing']);
    expect(facts(E.notFound('/v1/nope'))).toEqual(['NOT_FOUND', 404, 'path', 'path: no route for /v1/nope']);
    expect(facts(E.methodNotAllowed('PUT', '/v1/check', 'GET or POST'))).toEqual(['METHOD_NOT_ALLOWED', 405, 'method', 'method: PUT is not allowed on /v1/check (GET or POST)']);
    expect(facts(E.tooLarge('body', 'larger than 10 bytes'))).toEqual(['TOO_LARGE', 413, 'body', 'body: larger than 10 bytes']);
    expect(facts(E.unsupportedMediaType('text/plain', 'application/json'))).toEqual(['UNSUPPORTED_MEDIA_TYPE', 415, 'content-type', 'content-type: must be application/json (got "text/plain")']);
    expect(facts(E.usage('check needs --policy', '--policy'))).toEqual(['USAGE', 400, '--policy', 'check needs --policy']);
    expect(facts(E.badSetting('LOG_LEVEL', 'LOG_LEVEL must be one of ...'))).toEqual(['CONFIG', 500, 'LOG_LEVEL', 'LOG_LEVEL must be one of ...']);
    expect(facts(E.configSourceError('a.yaml', 'invalid YAML: x'))).toEqual(['CONFIG', 500, undefined, 'a.yaml: invalid YAML: x']);
    expect(facts(E.policiesError('must be an object'))).toEqual(['CONFIG', 500, 'policies', 'policies: must be an object']);
    expect(facts(E.traceError('t.csv', 'row 2: bad', 'ts_ms'))).toEqual(['INVALID_ARGUMENT', 400, 'ts_ms', 't.csv: row 2: bad']);
    expect(facts(E.listenFailed('cannot listen on h:1 (in use?)'))).toEqual(['CONFIG', 500, 'port', 'cannot listen on h:1 (in use?)']);
    expect(facts(E.invalidArgument('cost', 'must be an integer'))).toEqual(['INVALID_ARGUMENT', 400, 'cost', 'cost: must be an integer']);
    expect(facts(E.configError('policy "a"', 'period', 'must be > 0'))).toEqual(['CONFIG', 500, 'period', 'policy "a": period: must be > 0']);
  });

  it('no SluiceError is built outside the catalog (but the client\'s rebuild of a server error)', () => {
    const { 'util/errors.ts': inCatalog, ...elsewhere } = sites(/new SluiceError\(/g);
    expect(inCatalog).toBeGreaterThan(0);
    expect(elsewhere).toEqual({ 'client/errors.ts': 1 });
  });

  it('plain Errors only at internal invariants and environment faults', () => {
    expect(sites(/new Error\(/g)).toEqual({
      // uWebSockets.js's native binary missing: a broken install
      'server/admin.ts': 1, 'server/http.ts': 1,
      // the package root not found: a broken install
      'util/paths.ts': 1,
      // a duration's rule without the field: policies.ts adds the field and throws a CONFIG error
      'config/duration.ts': 4,
      // a non-Error thrown by the application's own code, or in the client's handling of an answer, wrapped to be
      // passed on (util/callback.ts asError)
      'util/callback.ts': 1,
      // the stats read timing out inside render(), caught there
      'metrics/registry.ts': 1,
      // engine invariants: a stale plan, a list entry or group size the compiler already refused
      'engine/limits.ts': 1, 'engine/lists.ts': 1, 'engine/runtime.ts': 1,
      // a Redis reply that cannot be decoded, mapped to STORE_FAILED by inspect's storeFailed
      'engine/inspect.ts': 1,
      // `sluice check` failing to reach the server: the CLI prints it (a client-side transport fault)
      'cli/check.ts': 1,
      // kernel misuse (batch past its size, init twice, a bad limit id) and its abort
      'shard/kernel.ts': 5,
      // a shard not answering within its start timeout, mapped to SHARD_FAILED by the pool
      'shard/pool.ts': 1,
      // the breaker open for a lease call, or a cluster client not ready, mapped by the store's failure rule
      'store/redis.ts': 1, 'store/cluster-calls.ts': 1,
      // hasher misuse
      'keys/hasher.ts': 1,
    });
  });
});
