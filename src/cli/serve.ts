import { readFile } from 'node:fs/promises';
import { usage } from '../util/errors.js';
import { availableParallelism } from 'node:os';
import { parseCommand } from './usage.js';
import { checkSecret } from '../reload/announce.js';
import { createLogger } from '../util/log.js';
import { configFrom, intArg } from './args.js';
import { compose } from './compose.js';
import { refuseStorePolicies } from '../server/threads.js';
import { adminTokenProblem } from '../server/admin.js';
import { regionFromSources, regionSpec } from '../config/regions.js';

/**
 * `sluice serve`: the decision service on the config file (or the built-in default). Flags win over the
 * environment (each flag's variable is in its row of src/cli/usage.ts, which the parser and the help read),
 * which wins over the file. `--redis URL`, `--redis-cluster host:port,...` (a Redis Cluster's seed nodes) and `--redis-sentinel
 * host:port,...` with `--redis-master NAME` (Redis Sentinel; also `redis.sentinels` and `redis.master` in the
 * file) exclude each other. The status page and `/v1/status` are served on the admin port when there is one,
 * else on the public port; `server.statusPage: false` turns them off.
 * SIGTERM or SIGINT drains within a deadline (`--drain-timeout` ms, SLUICE_DRAIN_TIMEOUT_MS, default 10 s): stop
 * listening (/readyz 503), finish requests in flight, keep merging sync-mode deltas into Redis until the
 * deadline (what is left is logged, `sync: deltas not merged ...`), stop the shards, exit 0; exit 1 if the
 * shutdown is still not done 2 s past the deadline. The policies file is watched and SIGHUP reloads it; with Redis, reloads are
 * announced to (and heard from) other instances when they share an announce secret (`--announce-secret-file`,
 * `--announce-secret`, SLUICE_ANNOUNCE_SECRET_FILE, SLUICE_ANNOUNCE_SECRET: see src/reload/reloader.ts). `--admin-port N` (or
 * SLUICE_ADMIN_PORT, or `server.admin.port`) serves the admin API on its own port (src/server/admin.ts), bound to
 * `--admin-host` / SLUICE_ADMIN_HOST / `server.admin.host` (default 127.0.0.1); it needs `--admin-token` or
 * SLUICE_ADMIN_TOKEN, and refuses to start without one. `--grpc-port N` (or SLUICE_GRPC_PORT, or
 * `server.grpcPort`) serves Envoy's rate limit service over gRPC on `host` (src/grpc/server.ts).
 * `--region NAME` (SLUICE_REGION, `region:`) names this instance's region, one of the file's `regions.names`;
 * `--global-redis URL` (SLUICE_GLOBAL_REDIS, `globalRedis:`) is the Redis its region's reconciler reports to
 * (src/engine/regions/), never used on a check; `--redis` stays the region's own Redis.
 */
export async function serve(argv: string[]): Promise<number> {
  const { values } = parseCommand('serve', argv);
  const log = createLogger();
  const config = await configFrom(values.config);
  const env = process.env;
  const port = intArg(values.port, '--port', 0, 65535) ?? intArg(env.SLUICE_PORT, 'SLUICE_PORT', 0, 65535)
    ?? config.server.port ?? 8080;
  const shards = intArg(values.shards, '--shards', 0, 64) ?? intArg(env.SLUICE_SHARDS, 'SLUICE_SHARDS', 0, 64)
    ?? config.engine.shards ?? 0;
  const host = values.host ?? env.SLUICE_HOST ?? config.server.host ?? '0.0.0.0';
  const threadsGiven = intArg(values.threads, '--threads', 1, 256) ?? intArg(env.SLUICE_THREADS, 'SLUICE_THREADS', 1, 256)
    ?? config.server.threads;
  if (threadsGiven !== undefined && threadsGiven > 1) {
    // checked here, before anything starts, to name where the threads were asked for
    const source = values.threads !== undefined ? '--threads' : env.SLUICE_THREADS ? 'SLUICE_THREADS' : 'server.threads';
    refuseStorePolicies(config.policies, 'sluice serve', `${source} ${threadsGiven}`);
  }
  const redis = sentinelTarget(values['redis-sentinel'], values['redis-master'], env, config.redis, values.redis !== undefined || values['redis-cluster'] !== undefined)
    ?? redisTarget(values.redis, values['redis-cluster'], env);
  const timeoutMs = intArg(values['redis-timeout'], '--redis-timeout', 1, 60_000)
    ?? intArg(env.REDIS_TIMEOUT_MS, 'REDIS_TIMEOUT_MS', 1, 60_000);
  const syncIntervalMs = intArg(values['sync-interval'], '--sync-interval', 1, 3_600_000)
    ?? intArg(env.SLUICE_SYNC_INTERVAL_MS, 'SLUICE_SYNC_INTERVAL_MS', 1, 3_600_000);
  const prefix = redisPrefix(values['redis-prefix'] ?? (env.SLUICE_REDIS_PREFIX || undefined));
  const admin = adminTarget(values, env, config.server.admin ?? undefined);
  const announceSecret = await secretFrom(values['announce-secret'], values['announce-secret-file'], env);
  const drainMs = intArg(values['drain-timeout'], '--drain-timeout', 0, 3_600_000)
    ?? intArg(env.SLUICE_DRAIN_TIMEOUT_MS, 'SLUICE_DRAIN_TIMEOUT_MS', 0, 3_600_000) ?? DRAIN_MS;
  const grpcPort = intArg(values['grpc-port'], '--grpc-port', 0, 65535) ?? intArg(env.SLUICE_GRPC_PORT, 'SLUICE_GRPC_PORT', 0, 65535)
    ?? config.server.grpcPort;
  const region = regionFromSources({ region: values.region, globalRedis: values['global-redis'] }, env, config.regions, 'sluice serve');
  // Built in one place (src/cli/compose.ts), torn down there in the reverse order.
  // (ioredis is loaded only with Redis: alone it adds ~20 MB to a process's RSS.)
  const redisOptions = redis ? { ...redis, timeoutMs, syncIntervalMs, prefix } : null;
  const app = await compose({
    logger: log,
    store: redisOptions === null ? null : async () => (await import('../store/redis.js')).RedisStore.create(redisOptions),
    limiter: {
      policies: config.policies, shards, maxKeys: config.engine.maxKeys, maxLogEntries: config.engine.maxLogEntries,
      maxDelayed: config.engine.maxDelayed,
      ...(redisOptions !== null ? { redis: redisOptions } : {}),
      ...(region ? { region: regionSpec(region) } : {}),
    },
    server: {
      host, port,
      statusPage: admin === null && config.server.statusPage !== false,
      activity: { hotKeys: config.server.hotKeys?.capacity },
      hotKeyMetrics: config.server.hotKeys?.metrics,
      maxBodyBytes: config.server.maxBodyBytes, authDenyStatus: config.server.authDenyStatus,
      stream: config.server.stream ?? undefined,
      // front threads: one per core the shards leave free (only with shards and no Redis: see src/server/threads.ts)
      threads: threadsGiven ?? (shards === 0 || redisOptions !== null ? 1 : Math.max(1, availableParallelism() - shards)),
    },
    reloader: { file: values.config ?? (env.SLUICE_CONFIG || null), prefix, startup: config, announceSecret },
    grpc: grpcPort === undefined ? null : { host, port: grpcPort },
    admin: admin === null ? null : { ...admin, status: config.server.statusPage !== false },
  });
  const { limiter, server, grpc: grpcServer } = app;
  log.info({ host, port: server.port, ...(grpcServer ? { grpcPort: grpcServer.port } : {}), shards, policies: [...config.policies.keys()], version: limiter.version }, 'sluice serving');
  return new Promise<number>((resolve) => {
    const stop = (signal: string): void => {
      const started = Date.now();
      log.info({ signal, drainTimeoutMs: drainMs }, 'draining');
      // Past the deadline (and a grace for the shards and sockets to close), exit whatever still waits.
      const hard = setTimeout(() => {
        log.error({ drainTimeoutMs: drainMs }, 'shutdown did not finish within the drain deadline; exiting');
        process.exit(1);
      }, drainMs + HARD_GRACE_MS);
      hard.unref();
      // Stop accepting first (every listener closes at once, the reloader beside them); then the limiter
      // merges sync deltas until the deadline; then the store closes (compose.ts).
      app.close({ drainMs })
        .then(() => {
          log.info({ ms: Date.now() - started }, 'stopped');
          return 0;
        }, (e: unknown) => {
          log.error({ err: e }, 'shutdown failed');
          return 1;
        })
        .then((code) => {
          clearTimeout(hard);
          // a handle some library left open must not keep the process alive past its drain
          setTimeout(() => process.exit(code), EXIT_GRACE_MS).unref();
          resolve(code);
        });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

/** Default drain deadline after SIGTERM/SIGINT, in ms (`--drain-timeout`, SLUICE_DRAIN_TIMEOUT_MS). */
export const DRAIN_MS = 10_000;
/** Past the drain deadline, how long shutdown may still take before the process exits with 1, in ms. */
const HARD_GRACE_MS = 2000;
/** After shutdown, how long the process may linger on handles left open before it exits, in ms. */
const EXIT_GRACE_MS = 500;

/**
 * The secret policy announcements are signed with (src/reload/announce.ts): `--announce-secret-file PATH`
 * (its content, one trailing newline dropped), `--announce-secret`, SLUICE_ANNOUNCE_SECRET_FILE or
 * SLUICE_ANNOUNCE_SECRET, in that order; null (announcements off) when none is given.
 * @throws SluiceError INVALID_ARGUMENT for an unreadable file or a secret under 16 bytes.
 */
async function secretFrom(flag: string | undefined, file: string | undefined, env: NodeJS.ProcessEnv): Promise<string | null> {
  const path = file ?? (flag === undefined ? env.SLUICE_ANNOUNCE_SECRET_FILE || undefined : undefined);
  if (path !== undefined) {
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (e) {
      throw usage(`--announce-secret-file: cannot read ${path}: ${(e as Error).message}`, '--announce-secret-file');
    }
    return checkSecret(text.replace(/\r?\n$/, ''), '--announce-secret-file');
  }
  const v = flag ?? (env.SLUICE_ANNOUNCE_SECRET || undefined);
  return v === undefined ? null : checkSecret(v, flag !== undefined ? '--announce-secret' : 'SLUICE_ANNOUNCE_SECRET');
}

/**
 * The admin API's address and token: flags win over the environment, which wins over `server.admin`. Off
 * (null) without a port. @throws SluiceError USAGE for a port without a token, or a token too short or malformed.
 */
function adminTarget(
  values: { 'admin-port'?: string; 'admin-host'?: string; 'admin-token'?: string }, env: NodeJS.ProcessEnv,
  file: { port?: number; host?: string } | undefined,
): { port: number; host: string; token: string } | null {
  const port = intArg(values['admin-port'], '--admin-port', 0, 65535) ?? intArg(env.SLUICE_ADMIN_PORT, 'SLUICE_ADMIN_PORT', 0, 65535)
    ?? file?.port;
  if (port === undefined) return null;
  const token = values['admin-token'] ?? (env.SLUICE_ADMIN_TOKEN || undefined);
  if (token === undefined || token === '') {
    throw usage('the admin API needs a token: give --admin-token or SLUICE_ADMIN_TOKEN with --admin-port (or server.admin)', '--admin-token');
  }
  const bad = adminTokenProblem(token);
  if (bad !== null) throw usage(`--admin-token / SLUICE_ADMIN_TOKEN: ${bad}`, '--admin-token');
  return { port, host: values['admin-host'] ?? (env.SLUICE_ADMIN_HOST || undefined) ?? file?.host ?? '127.0.0.1', token };
}

/**
 * One Redis or a Cluster: a flag wins over the environment (so `--redis` overrides REDIS_CLUSTER_NODES);
 * both flags, or both variables without a flag, are an error.
 */
/**
 * The prefix of every Redis key and of the policies channel: deployments that share a Redis but not their
 * quotas or policies each take their own. 1 to 64 visible ASCII characters without braces (a brace would
 * break the keys' Cluster hash tag). Default `sluice:`.
 */
function redisPrefix(v: string | undefined): string {
  if (v === undefined) return 'sluice:';
  if (!/^[\x21-\x7a\x7c\x7e]{1,64}$/.test(v)) throw usage(`--redis-prefix: must be 1 to 64 visible ASCII characters without { or } (got ${JSON.stringify(v)})`, '--redis-prefix');
  return v;
}

/**
 * Redis Sentinel: `--redis-sentinel host:port,...` with `--redis-master NAME`, else REDIS_SENTINELS with
 * REDIS_MASTER, else the file's `redis.sentinels` and `redis.master`; null when none is given, or when `other`
 * (`--redis` or `--redis-cluster`) is, unless a sentinel flag is too (an error).
 * @throws Error for sentinels without a master name (or the reverse), or with `--redis` / `--redis-cluster`.
 */
function sentinelTarget(
  flag: string | undefined, master: string | undefined, env: NodeJS.ProcessEnv,
  file: { sentinels?: string[]; master?: string }, other: boolean,
): { sentinel: { sentinels: string[]; name: string } } | null {
  const envOther = Boolean(env.REDIS_URL || env.REDIS_CLUSTER_NODES);
  const envSentinel = Boolean(env.REDIS_SENTINELS || env.REDIS_MASTER);
  if (flag !== undefined || master !== undefined) {
    if (other) throw usage('--redis-sentinel and --redis / --redis-cluster: give one', '--redis-sentinel');
  } else if (other) {
    return null; // a flag wins over the environment and the file
  } else if (envSentinel) {
    if (envOther) throw usage('REDIS_SENTINELS and REDIS_URL / REDIS_CLUSTER_NODES: set one', 'REDIS_SENTINELS');
  } else if (envOther) {
    return null; // the environment wins over the file
  }
  const list = flag ?? (env.REDIS_SENTINELS || undefined);
  const sentinels = list !== undefined ? list.split(',').map((n) => n.trim()).filter((n) => n !== '') : file.sentinels;
  const name = master ?? (env.REDIS_MASTER || undefined) ?? file.master;
  if (sentinels === undefined && name === undefined) return null;
  if (sentinels === undefined || sentinels.length === 0) throw usage('--redis-master: needs --redis-sentinel host:port,... (or REDIS_SENTINELS, or redis.sentinels)', '--redis-sentinel');
  if (name === undefined) throw usage('--redis-sentinel: needs --redis-master NAME (or REDIS_MASTER, or redis.master): the name the sentinels monitor', '--redis-master');
  return { sentinel: { sentinels, name } };
}

function redisTarget(url: string | undefined, cluster: string | undefined, env: NodeJS.ProcessEnv): { url: string } | { cluster: string[] } | null {
  if (url !== undefined && cluster !== undefined) throw usage('--redis and --redis-cluster: give one', '--redis');
  if (url === undefined && cluster === undefined) {
    if (env.REDIS_URL && env.REDIS_CLUSTER_NODES) throw usage('REDIS_URL and REDIS_CLUSTER_NODES: set one', 'REDIS_URL');
    url = env.REDIS_URL || undefined;
    cluster = env.REDIS_CLUSTER_NODES || undefined;
  }
  if (url !== undefined) return { url };
  if (cluster === undefined) return null;
  const nodes = cluster.split(',').map((n) => n.trim()).filter((n) => n !== '');
  if (nodes.length === 0) throw usage(`--redis-cluster: expected host:port,host:port,... (got ${JSON.stringify(cluster)})`, '--redis-cluster');
  return { cluster: nodes };
}
