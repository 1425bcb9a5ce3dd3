/**
 * gRPC test rigs: a limiter on a {@link ManualClock} behind the real gRPC front (src/grpc/server.ts) on
 * 127.0.0.1, port 0, and a @grpc/grpc-js client of Envoy's rate limit service and of grpc.health.v1 loaded
 * from the same .proto files.
 */
import * as grpc from '@grpc/grpc-js';
import { createLimiter } from '../../src/index.js';
import { grpcService, startGrpcServer, type GrpcServerOptions, type SluiceGrpcServer } from '../../src/grpc/server.js';
import type { Limiter, LimiterOptions } from '../../src/types.js';
import { ManualClock } from './clock.js';
import { TEST_MAX_KEYS } from './server.js';

/** A RateLimitRequest as the client writes it (snake_case, as the .proto files spell the fields). */
export interface RlsCall {
  domain: string;
  descriptors: Array<{ entries: Array<{ key: string; value: string }>; hits_addend?: { value: number }; limit?: { requests_per_unit: number; unit: string } }>;
  hits_addend?: number;
}

/** A RateLimitResponse as the client decodes it (longs as strings, enums as names, defaults filled). */
export interface RlsAnswer {
  overall_code: string;
  statuses: Array<{
    code: string;
    current_limit: { name: string; requests_per_unit: number; unit: string } | null;
    limit_remaining: number;
    duration_until_reset: { seconds: string; nanos: number } | null;
    /** Never set by sluice (Envoy marks it not implemented). */
    quota: null;
  }>;
  response_headers_to_add: Array<{ key: string; value: string }>;
}

export interface RlsClient {
  shouldRateLimit(req: RlsCall): Promise<RlsAnswer>;
  /** The error of a call expected to fail: its gRPC status code and details. */
  failure(req: RlsCall): Promise<{ code: grpc.status; details: string }>;
  health(service?: string): Promise<string>;
  close(): void;
}

/** Per-call deadline: a hang fails the test instead of stalling it. */
const DEADLINE_MS = 5_000;

/** A client of `127.0.0.1:port`. */
export function rlsClient(port: number): RlsClient {
  const addr = `127.0.0.1:${port}`;
  const Rls = grpcService('envoy.service.ratelimit.v3.RateLimitService');
  const Health = grpcService('grpc.health.v1.Health');
  const rls = new Rls(addr, grpc.credentials.createInsecure());
  const health = new Health(addr, grpc.credentials.createInsecure());
  const unary = <T>(client: grpc.Client, method: string, req: unknown): Promise<T> => new Promise((resolve, reject) => {
    (client as unknown as Record<string, (r: unknown, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, v: T) => void) => void>)[method](
      req, { deadline: Date.now() + DEADLINE_MS }, (e, v) => (e ? reject(e) : resolve(v)));
  });
  return {
    shouldRateLimit: (req) => unary<RlsAnswer>(rls, 'ShouldRateLimit', req),
    async failure(req) {
      try {
        await unary(rls, 'ShouldRateLimit', req);
      } catch (e) {
        const err = e as grpc.ServiceError;
        return { code: err.code, details: err.details };
      }
      throw new Error('the call succeeded');
    },
    health: async (service = '') => (await unary<{ status: string }>(health, 'Check', { service })).status,
    close() {
      rls.close();
      health.close();
    },
  };
}

export interface GrpcRig {
  clock: ManualClock;
  limiter: Limiter;
  server: SluiceGrpcServer;
  client: RlsClient;
  close(): Promise<void>;
}

/** A limiter on a manual clock, its gRPC front on 127.0.0.1:0, and a client. */
export async function startGrpcRig(o: {
  policies: LimiterOptions['policies']; clock?: ManualClock; redis?: LimiterOptions['redis']; limiter?: Limiter;
  server?: Omit<GrpcServerOptions, 'limiter' | 'host' | 'port'>;
}): Promise<GrpcRig> {
  const clock = o.clock ?? new ManualClock();
  const limiter = o.limiter ?? await createLimiter({ policies: o.policies, clock: clock.now, maxKeys: TEST_MAX_KEYS, redis: o.redis });
  const server = await startGrpcServer({ limiter, host: '127.0.0.1', port: 0, ...o.server });
  const client = rlsClient(server.port);
  let closing: Promise<void> | null = null;
  return {
    clock, limiter, server, client,
    close: () => (closing ??= (async () => {
      client.close();
      await server.close();
      await limiter.close();
    })()),
  };
}
