/**
 * The composition root of `sluice serve`: the one place that builds the store, the limiter, the servers
 * (HTTP with `/v1/stream`, gRPC, admin) and the reloader, and tears them down again. Parts are built in
 * dependency order (store, limiter, HTTP server, reloader, gRPC, admin) and closed in the reverse order;
 * the front doors (HTTP/WS, reloader, gRPC, admin: whatever brings checks or policies in) are one stage,
 * begun together (the HTTP listener first: a reloader closing on a frozen Redis must not hold it open) and
 * awaited together, so every listener stops accepting at once (/readyz is refused
 * as SIGTERM is logged), then the limiter drains (sync deltas merged until the deadline) and closes the
 * store last (a limiter closes the store it is given: LimiterOptions.store). A part that fails to start
 * closes the ones built before it, in the same order.
 */
import type { Logger } from 'pino';
import { createLimiter } from '../limiter.js';
import { startServer, type ServerOptions, type SluiceServer } from '../server/http.js';
import { startAdminServer, type AdminServer, type AdminServerOptions } from '../server/admin.js';
import { startGrpcServer, type SluiceGrpcServer } from '../grpc/server.js';
import { PolicyReloader, type PolicyReloaderOptions } from '../reload/reloader.js';
import type { Limiter, LimiterOptions } from '../types.js';
import type { Store } from '../store/contract.js';

/** What the composition root builds a service from (`sluice serve` reads it from flags, environment and file). */
export interface ComposeOptions {
  logger: Logger;
  /** Builds the store (Redis, Cluster, Sentinel or in-memory); null: no store (local policies only). */
  store: (() => Store | Promise<Store>) | null;
  /** The limiter's options, besides the store and logger given here. */
  limiter: Omit<LimiterOptions, 'store' | 'logger'>;
  /** The HTTP server's options (`/v1/check`, `/v1/auth`, `/v1/stream`), besides the limiter and logger. */
  server: Omit<ServerOptions, 'limiter' | 'logger'>;
  /** The reloader's options, besides the limiter, logger, metrics and pub/sub built here. */
  reloader: Omit<PolicyReloaderOptions, 'limiter' | 'logger' | 'metrics' | 'pubsub'>;
  /** gRPC (Envoy RLS) on host:port; null: none. */
  grpc: { host: string; port: number } | null;
  /** The admin API; `status`: serve the status page and `/v1/status` there. Null: none. */
  admin: (Pick<AdminServerOptions, 'host' | 'port' | 'token'> & { status: boolean }) | null;
}

/** A running service, its parts, and its teardown. */
export interface App {
  readonly store: Store | null;
  readonly limiter: Limiter;
  readonly server: SluiceServer;
  readonly reloader: PolicyReloader;
  readonly grpc: SluiceGrpcServer | null;
  readonly admin: AdminServer | null;
  /**
   * Closes every part in the reverse order of their start (see the file's comment). `drainMs`: the deadline,
   * from the call, the limiter's drain has (whatever the front doors' closing took is taken off it). Every
   * part is closed even if one fails; rejects with the first failure. Safe to call more than once.
   */
  close(options?: { drainMs?: number }): Promise<void>;
}

/** One part's close, by name (for logs and the teardown test). */
interface Part {
  name: string;
  close(): Promise<void>;
}

/**
 * Closes parts in the reverse order they were added: each {@link add} begins a stage; {@link beside} puts a
 * part in the stage of the part added before it. A stage's parts are begun in the order added (the first is
 * the one the others depend on: the HTTP server) and awaited together.
 */
export class Teardown {
  private readonly stages: Part[][] = [];
  private closing: Promise<void> | null = null;

  /** A part that closes after every part added after it. */
  add(name: string, close: () => Promise<void>): void {
    this.stages.push([{ name, close }]);
  }

  /** A part that closes together with the part added before it (in the same stage, begun after it). */
  beside(name: string, close: () => Promise<void>): void {
    const last = this.stages.at(-1);
    if (last === undefined) this.add(name, close);
    else last.push({ name, close });
  }

  /** Runs the teardown once; every part is closed even when one fails, and the first failure is rethrown. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      let first: unknown = null;
      for (let s = this.stages.length - 1; s >= 0; s--) {
        const stage = this.stages[s];
        const settled = await Promise.allSettled(stage.map((p) => p.close()));
        for (const r of settled) if (r.status === 'rejected' && first === null) first = r.reason;
      }
      if (first !== null) throw first;
    })();
    return this.closing;
  }
}

/**
 * Builds and starts the service. @throws whatever a part throws at start (the parts built before it are
 * closed first): SluiceError CONFIG for a bad policy or option, LISTEN_FAILED for a port in use, ...
 */
export async function compose(o: ComposeOptions): Promise<App> {
  const log = o.logger;
  const down = new Teardown();
  let drainMs: number | undefined;
  let closeBegun = 0;
  try {
    // The store is built here, once: the limiter decides through it (and tells other instances of key resets on
    // its channel `<prefix>resets`), and the reloader announces through it.
    const store = o.store === null ? null : await o.store();
    // A limiter closes the store it was given, last (LimiterOptions.store): this stage only closes a store
    // whose limiter failed to start.
    let owned = false;
    if (store !== null) down.add('store', () => (owned ? Promise.resolve() : store.close()));
    const limiter = await createLimiter({ ...o.limiter, logger: log, ...(store !== null ? { store } : {}) });
    owned = true;
    down.add('limiter', () => limiter.close(drainMs === undefined ? undefined : { drainMs: Math.max(0, drainMs - (Date.now() - closeBegun)) }));
    const server = await startServer({ ...o.server, limiter, logger: log });
    down.add('server', () => server.close());
    // Hot reload: watching before "sluice serving" is logged, so a change made after that line is seen.
    const reloader = new PolicyReloader({ ...o.reloader, limiter, logger: log, metrics: server.metrics, pubsub: store });
    down.beside('reloader', () => reloader.close());
    await reloader.start();
    const grpc = o.grpc === null ? null : await startGrpcServer({ limiter, ...o.grpc, metrics: server.metrics, logger: log });
    if (grpc !== null) down.beside('grpc', () => grpc.close());
    const admin = o.admin === null ? null : await startAdminServer({
      limiter, host: o.admin.host, port: o.admin.port, token: o.admin.token, logger: log,
      applyPolicies: (doc) => reloader.apply(doc as string | object, 'api'),
      ...(o.admin.status ? { status: server.status } : {}),
    });
    if (admin !== null) down.beside('admin', () => admin.close());
    return {
      store, limiter, server, reloader, grpc, admin,
      close(options?: { drainMs?: number }): Promise<void> {
        if (closeBegun === 0) {
          closeBegun = Date.now();
          drainMs = options?.drainMs;
        }
        return down.close();
      },
    };
  } catch (e) {
    await down.close().catch((err: unknown) => log.error({ err }, 'closing after a failed start'));
    throw e;
  }
}
