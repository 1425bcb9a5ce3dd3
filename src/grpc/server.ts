/**
 * The gRPC transport: Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
 * what Envoy's ratelimit filter, Istio, Contour and Gloo call) and the standard health service
 * (`grpc.health.v1.Health`), on @grpc/grpc-js. The messages are the .proto files in src/grpc/proto/ (Envoy's
 * package names and field numbers); the mapping is src/grpc/rls.ts. Checks go through the same limiter as
 * the HTTP front, counted by the same metrics: consistency modes, onStoreError, shadow policies, allow/deny
 * lists and OVERLOADED behave exactly as over HTTP.
 *
 * Status codes: a malformed request gets INVALID_ARGUMENT with the field named (`descriptors[0].entries[1].value:
 * must not be empty`); a check the engine cannot decide (queues full, shard down, closed) UNAVAILABLE, which
 * Envoy then treats by its `failure_mode_deny`; anything else INTERNAL.
 */
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Counter } from 'prom-client';
import type { Logger } from 'pino';
import type { Decision } from '../types/decision.js';
import type { Limiter } from '../types.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import { createMetrics, type ServerMetrics } from '../metrics/registry.js';
import { isSluiceError, listenFailed } from '../util/errors.js';
import { packageRoot } from '../util/paths.js';
import { buildResponse, planRequest, routeTable, type RlsRequest, type RouteTable } from './rls.js';

export interface GrpcServerOptions {
  limiter: Limiter;
  /** Interface to bind. Default 0.0.0.0. */
  host?: string;
  /** TCP port; 0 picks a free one. Default 8081. */
  port?: number;
  /**
   * The metrics to count checks in: the HTTP server's (`server.metrics`), so that /metrics shows both fronts.
   * Default: a registry of this server's own.
   */
  metrics?: ServerMetrics;
  logger?: Logger;
  /** Largest request message, in bytes; larger gets RESOURCE_EXHAUSTED. Default 65,536. */
  maxMessageBytes?: number;
  /** Most descriptors in one ShouldRateLimit request; more gets INVALID_ARGUMENT. Default 1,000. */
  maxDescriptors?: number;
  /** Longest close() waits for calls in flight before cutting them off, in ms. Default 5,000. */
  drainTimeoutMs?: number;
  /** Most calls in flight on one connection (HTTP/2 streams); more wait in the client. Default 1,000. */
  maxConcurrentStreams?: number;
}

export interface SluiceGrpcServer {
  /** The port listened on. */
  readonly port: number;
  /** Health turns NOT_SERVING, new calls get UNAVAILABLE, calls in flight finish (up to drainTimeoutMs). */
  close(): Promise<void>;
}

/** The service name health checks may ask about (or '' for the server as a whole). */
export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';

let definitions: grpc.GrpcObject | undefined;

/** The loaded protos (once per process). @internal shared with the tests' client. */
export function grpcDefinitions(): grpc.GrpcObject {
  if (definitions !== undefined) return definitions;
  const dir = path.join(packageRoot(), 'src', 'grpc', 'proto');
  const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], {
    includeDirs: [dir], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  definitions = grpc.loadPackageDefinition(def);
  return definitions;
}

/** Reaches `a.b.c` in a loaded package. */
export function grpcService(dotted: string): grpc.ServiceClientConstructor {
  let v: unknown = grpcDefinitions();
  for (const part of dotted.split('.')) v = (v as Record<string, unknown>)[part];
  return v as grpc.ServiceClientConstructor;
}

type Code = 'OK' | 'OVER_LIMIT' | 'INVALID_ARGUMENT' | 'UNAVAILABLE' | 'INTERNAL';

/**
 * Starts the gRPC server.
 * @throws SluiceError (listenFailed) when the port cannot be bound.
 */
export async function startGrpcServer(o: GrpcServerOptions): Promise<SluiceGrpcServer> {
  const metrics = o.metrics ?? createMetrics(o.limiter);
  const limiter = metrics.instrument(o.limiter);
  const log = o.logger;
  const maxDescriptors = o.maxDescriptors ?? 1_000;
  const maxMessageBytes = o.maxMessageBytes ?? 65_536;
  const calls = new Map<Code, number>();
  new Counter({
    name: 'sluice_grpc_requests_total',
    help: 'ShouldRateLimit calls answered, by outcome: OK, OVER_LIMIT, or the gRPC status of an error.',
    labelNames: ['code'],
    registers: [metrics.registry],
    collect() {
      this.reset();
      for (const [code, n] of calls) this.inc({ code }, n);
    },
  });
  const count = (code: Code): void => void calls.set(code, (calls.get(code) ?? 0) + 1);

  let tableOf: ReadonlyMap<string, CompiledPolicy> | null = null;
  let table: RouteTable | null = null;
  const tableNow = (): RouteTable => {
    const set = limiter.policies;
    if (set !== tableOf) {
      table = routeTable(set);
      tableOf = set;
    }
    return table!;
  };

  let draining = false;
  const watchers = new Set<grpc.ServerWritableStream<{ service: string }, unknown>>();
  const fail = (cb: grpc.sendUnaryData<unknown>, code: grpc.status, name: Code, message: string): void => {
    count(name);
    cb({ code, details: message, message } as grpc.ServiceError, null);
  };

  const shouldRateLimit: grpc.handleUnaryCall<RlsRequest, unknown> = (call, cb) => {
    if (draining) return fail(cb, grpc.status.UNAVAILABLE, 'UNAVAILABLE', 'server: draining (shutting down): retry on another instance');
    const t = tableNow();
    let plans;
    try {
      plans = planRequest(call.request, t, maxDescriptors);
    } catch (e) {
      return failWith(cb, e);
    }
    const pending: Array<Promise<Decision | undefined>> = plans.map((p) => (p.kind === 'check' ? limiter.check(p.check) : Promise.resolve(undefined)));
    Promise.all(pending).then((decisions) => {
      const res = buildResponse(plans, decisions, t);
      count(res.overall_code);
      cb(null, res);
    }, (e: unknown) => failWith(cb, e));
  };

  const failWith = (cb: grpc.sendUnaryData<unknown>, e: unknown): void => {
    if (isSluiceError(e)) {
      if (e.status === 400) return fail(cb, grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT', e.message);
      if (e.status === 503) return fail(cb, grpc.status.UNAVAILABLE, 'UNAVAILABLE', e.message);
    }
    log?.warn({ err: e }, 'ShouldRateLimit failed');
    fail(cb, grpc.status.INTERNAL, 'INTERNAL', 'internal error');
  };

  const health = (service: string): string | null => {
    if (service !== '' && service !== RLS_SERVICE) return null;
    return draining ? 'NOT_SERVING' : 'SERVING';
  };

  const server = new grpc.Server({
    'grpc.max_receive_message_length': maxMessageBytes,
    'grpc.max_concurrent_streams': o.maxConcurrentStreams ?? 1_000,
  });
  server.addService(grpcService('envoy.service.ratelimit.v3.RateLimitService').service, { ShouldRateLimit: shouldRateLimit });
  server.addService(grpcService('grpc.health.v1.Health').service, {
    Check: (call: grpc.ServerUnaryCall<{ service: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      const status = health(call.request.service);
      if (status === null) cb({ code: grpc.status.NOT_FOUND, details: `service: unknown service ${JSON.stringify(call.request.service)}` } as grpc.ServiceError, null);
      else cb(null, { status });
    },
    Watch: (call: grpc.ServerWritableStream<{ service: string }, unknown>) => {
      call.write({ status: health(call.request.service) ?? 'SERVICE_UNKNOWN' });
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
    },
  });

  const host = o.host ?? '0.0.0.0';
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${o.port ?? 8081}`, grpc.ServerCredentials.createInsecure(), (err, p) => {
      if (err) reject(listenFailed(`gRPC: cannot listen on ${host}:${o.port ?? 8081} (${err.message})`));
      else resolve(p);
    });
  });
  log?.info({ port }, 'gRPC listening');

  let closing: Promise<void> | null = null;
  return {
    port,
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        draining = true;
        for (const w of watchers) {
          w.write({ status: 'NOT_SERVING' });
          w.end();
        }
        watchers.clear();
        const timer = setTimeout(() => server.forceShutdown(), o.drainTimeoutMs ?? 5_000);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      return closing;
    },
  };
}
