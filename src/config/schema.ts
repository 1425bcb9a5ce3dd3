/**
 * The policies file's document shape (strict: unknown keys are errors at every level) and its translation to
 * a {@link SluiceConfig} (a document with a top-level `domain` is envoyproxy/ratelimit's format instead:
 * see envoy-ratelimit.ts). `policies` goes through the same compiler as the library option, with errors
 * re-addressed to the document path; `engine` and `server` are checked here with zod.
 *
 * ```yaml
 * policies: { <name>: <policy>, ... }  # required, see policy-spec.ts
 * engine:                              # optional
 *   shards: 2                          # 0..64 worker shards (0 = decide in-thread)
 *   maxKeys: 1000000                   # >= 1 keys held per engine
 *   maxLogEntries: 64                  # 1..1024 entries per sliding_log key
 *   maxDelayed: 10000                  # >= 0 checks waiting at once (onLimit: delay)
 * server:                              # optional
 *   port: 8080                         # 0..65535 (0 = any free port)
 *   host: 0.0.0.0
 *   maxBodyBytes: 65536                # >= 1 bytes per request body
 *   authDenyStatus: 429                # 429 or 403: what /v1/auth answers when denied
 *   stream: { maxInFlight: 4096, ... }  # /v1/stream limits (StreamOptions in src/server/ws.ts)
 *   admin: { port: 9090, host: 127.0.0.1 }  # the admin API (src/server/admin.ts); its token is never in the file
 *   grpcPort: 8081                     # Envoy's rate limit service over gRPC (src/grpc/), on server.host; off when absent
 *   statusPage: true                   # the status page and /v1/status (on the admin port when there is one)
 *   threads: 4                         # 1..256 HTTP front threads (default: one per core the shards leave free)
 *   hotKeys: { capacity: 100, metrics: 10 }  # keys per policy in the hot-key sketch (0 = off); how many as metrics (0 = none)
 * redis:                               # optional; flags and env win
 *   sentinels: [10.0.0.1:26379, ...]   # Redis Sentinel addresses, with
 *   master: mymaster                   # the master's name as the sentinels know it
 * region: eu                           # optional: this instance's region (--region, SLUICE_REGION win)
 * globalRedis: redis://global:6379     # the reconciler's global Redis (--global-redis, SLUICE_GLOBAL_REDIS win)
 * regions:                             # the region list and share mode: see src/config/regions.ts
 *   names: [eu, us, ap]
 *   shares: adaptive                   # or weights { eu: 2, us: 1, ap: 1 }
 *   reconcileIntervalMs: 1000
 * ```
 */
import * as z from 'zod';
import { configError, SluiceError } from '../util/errors.js';
import { describeValue } from './duration.js';
import { compilePoliciesWith, type PolicyErrorSite } from './policies.js';
import { joinPath } from './fields.js';
import type { CompiledPolicy } from './policy-spec.js';
import { isEnvoyRateLimitDocument, policiesFromEnvoyRateLimit } from './envoy-ratelimit.js';
import { compileRegion } from './regions.js';

/** `engine:` section. Absent keys are left absent: the engine applies its own defaults. */
export interface EngineConfig {
  /** Worker shards, 0..64; 0 decides in the calling thread. */
  shards?: number;
  /** Capacity of the key table (keys), >= 1. */
  maxKeys?: number;
  /** Entries per sliding_log key, 1..1024 (LimiterOptions.maxLogEntries). */
  maxLogEntries?: number;
  /** onLimit: delay: most checks waiting at once, >= 0 (the library's maxDelayed). */
  maxDelayed?: number;
}

/** `server:` section. Absent keys are left absent: the server applies its own defaults. */
export interface ServerConfig {
  /** TCP port, 0..65535 (0: any free port). */
  port?: number;
  /** Interface to bind (non-empty). */
  host?: string;
  /** Largest accepted request body, in bytes (>= 1). */
  maxBodyBytes?: number;
  /** HTTP status /v1/auth answers when a check is denied. */
  authDenyStatus?: 429 | 403;
  /** `/v1/stream` limits; see StreamOptions in src/server/ws.ts. */
  stream?: {
    maxFrameBytes?: number; maxChecksPerFrame?: number; maxInFlight?: number; maxQueued?: number;
    highWaterBytes?: number; lowWaterBytes?: number; maxBufferedBytes?: number; maxSubscriptions?: number;
    maxInstanceSubscriptions?: number; maxFiresPerTick?: number; idleTimeoutSeconds?: number;
  } | null;
  /**
   * The admin API (src/server/admin.ts): its port (0..65535) and interface (default 127.0.0.1). Off when absent;
   * the token comes from `--admin-token` or SLUICE_ADMIN_TOKEN, never from this file.
   */
  admin?: { port?: number; host?: string } | null;
  /** Envoy's rate limit service over gRPC (src/grpc/server.ts) on this port (0..65535); off when absent. */
  grpcPort?: number;
  /** Serves the status page and `/v1/status` (on the admin port when one is configured). Default true. */
  statusPage?: boolean;
  /**
   * HTTP front threads, 1..256 (src/server/threads.ts); more than 1 needs shards and local policies. Default:
   * one per core the shards leave free (cores − shards, at least 1), 1 without shards or with Redis.
   */
  threads?: number;
  /** The hot-key sketch: keys monitored per policy (0..100000, 0 = off) and how many of them become metrics (0..1000). */
  hotKeys?: { capacity?: number; metrics?: number } | null;
}

/** `redis:` section: Redis Sentinel (flags `--redis-sentinel`, `--redis-master` and the environment win). */
export interface RedisConfig {
  /** Sentinel addresses, each `host:port`. */
  sentinels?: string[];
  /** The monitored master's name. */
  master?: string;
}

/** `region:`, `globalRedis:` and `regions:` (validated by src/config/regions.ts once flags are merged in). */
export interface RegionFileConfig {
  region?: string;
  globalRedis?: string;
  /** The `regions:` mapping as written: names, shares, reconcileIntervalMs, maxActiveKeys. */
  regions?: Record<string, unknown>;
}

/** A validated configuration file. */
export interface SluiceConfig {
  policies: Map<string, CompiledPolicy>;
  engine: EngineConfig;
  server: ServerConfig;
  redis: RedisConfig;
  regions: RegionFileConfig;
  /** The parsed document, as plain data. */
  raw: unknown;
}

/** Path shown for errors about the document as a whole. */
export const ROOT_PATH = '(root)';

interface HasInput {
  input?: unknown;
}

/** An integer check whose every failure (wrong type, fraction, out of range) reads `rule (got X)`. */
function intIn(min: number, max: number, rule: string) {
  const error = (iss: HasInput): string => `${rule} (got ${describeValue(iss.input)})`;
  return z.int({ error }).min(min, { error }).max(max, { error });
}

/** A strict mapping: unknown keys and non-mappings get our messages. */
function section<T extends z.core.$ZodLooseShape>(shape: T) {
  const accepted = Object.keys(shape).join(', ');
  return z.strictObject(shape, {
    error: (iss) =>
      iss.code === 'unrecognized_keys'
        ? `unknown key (accepted: ${accepted})`
        : `must be a mapping (got ${describeValue(iss.input)})`,
  });
}

const positiveSafe = (): ReturnType<typeof intIn> =>
  intIn(1, Number.MAX_SAFE_INTEGER, 'must be a positive safe integer');

const nonEmptyString = (iss: HasInput): string => `must be a non-empty string (got ${describeValue(iss.input)})`;

const EngineSchema = section({
  shards: intIn(0, 64, 'must be an integer from 0 to 64').optional(),
  maxKeys: positiveSafe().optional(),
  maxLogEntries: intIn(1, 1024, 'must be an integer from 1 to 1024').optional(),
  maxDelayed: intIn(0, 2 ** 30, 'must be an integer from 0 to 1073741824').optional(),
});

const nonNegative = (): ReturnType<typeof intIn> => intIn(0, Number.MAX_SAFE_INTEGER, 'must be a non-negative safe integer');

/** `server.stream`: the /v1/stream limits (see StreamOptions in src/server/ws.ts for meanings and defaults). */
const StreamSchema = section({
  maxFrameBytes: positiveSafe().optional(),
  maxChecksPerFrame: positiveSafe().optional(),
  maxInFlight: positiveSafe().optional(),
  maxQueued: positiveSafe().optional(),
  highWaterBytes: positiveSafe().optional(),
  lowWaterBytes: nonNegative().optional(),
  maxBufferedBytes: positiveSafe().optional(),
  maxSubscriptions: nonNegative().optional(),
  maxInstanceSubscriptions: nonNegative().optional(),
  maxFiresPerTick: positiveSafe().optional(),
  idleTimeoutSeconds: nonNegative().optional(),
});

const ServerSchema = section({
  port: intIn(0, 65_535, 'must be an integer from 0 to 65535').optional(),
  host: z.string({ error: nonEmptyString }).min(1, { error: nonEmptyString }).optional(),
  maxBodyBytes: positiveSafe().optional(),
  authDenyStatus: z
    .literal([429, 403], { error: (iss) => `must be 429 or 403 (got ${describeValue(iss.input)})` })
    .optional(),
  stream: StreamSchema.nullish(),
  admin: section({
    port: intIn(0, 65_535, 'must be an integer from 0 to 65535').optional(),
    host: z.string({ error: nonEmptyString }).min(1, { error: nonEmptyString }).optional(),
  }).nullish(),
  grpcPort: intIn(0, 65_535, 'must be an integer from 0 to 65535').optional(),
  statusPage: z.boolean({ error: (iss) => `must be true or false (got ${describeValue(iss.input)})` }).optional(),
  threads: intIn(1, 256, 'must be an integer from 1 to 256').optional(),
  hotKeys: section({
    capacity: intIn(0, 100_000, 'must be an integer from 0 to 100000').optional(),
    metrics: intIn(0, 1000, 'must be an integer from 0 to 1000').optional(),
  }).nullish(),
});

const RedisSchema = section({
  sentinels: z.array(z.string({ error: nonEmptyString }).regex(/^\S+:\d{1,5}$/, { error: (iss) => `must be host:port (got ${describeValue(iss.input)})` }), {
    error: (iss) => `must be a list of host:port (got ${describeValue(iss.input)})`,
  }).min(1, { error: 'must list at least one sentinel host:port' }).optional(),
  master: z.string({ error: nonEmptyString }).min(1, { error: nonEmptyString }).optional(),
});

/** The top level; `policies` is checked by the policy compiler. A null section means an empty one. */
const DocumentSchema = section({
  policies: z.unknown().optional(),
  engine: EngineSchema.nullish(),
  server: ServerSchema.nullish(),
  redis: RedisSchema.nullish(),
  region: z.string({ error: nonEmptyString }).min(1, { error: nonEmptyString }).optional(),
  globalRedis: z.string({ error: nonEmptyString }).min(1, { error: nonEmptyString }).optional(),
  regions: z.record(z.string(), z.unknown(), { error: (iss) => `must be a mapping (got ${describeValue(iss.input)})` }).optional(),
});

/**
 * Validates a parsed policies document.
 *
 * @param raw the document as plain data (what YAML parsing produced).
 * @param file the name errors start with.
 * @throws SluiceError code CONFIG, message `<file>: <path>: <reason>` (e.g.
 *   `policies.yaml: policies.free.period: must be ...`), `field` = the document path.
 */
export function configFromDocument(raw: unknown, file: string): SluiceConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw configError(file, ROOT_PATH, `must be a mapping with a top-level "policies" key (got ${describeValue(raw)})`);
  }
  if (isEnvoyRateLimitDocument(raw)) {
    const policies = compilePoliciesWith(policiesFromEnvoyRateLimit(raw as Record<string, unknown>, file), (site, why) => {
      throw configError(file, policyPath(site), why);
    });
    return { policies, engine: {}, server: {}, redis: {}, regions: {}, raw };
  }
  const parsed = DocumentSchema.safeParse(raw);
  if (!parsed.success) throw zodError(parsed.error.issues[0], file);
  if (parsed.data.policies === undefined) throw configError(file, 'policies', 'is required: a mapping of policy names to policies');
  const policies = compilePoliciesWith(parsed.data.policies, (site, why) => {
    throw configError(file, policyPath(site), why);
  });
  const { region, globalRedis, regions } = parsed.data;
  if (regions !== undefined) {
    // the list on its own terms now (`regions.names[1]: ...`); the name may still come from a flag
    const names = Array.isArray(regions.names) ? regions.names : [];
    compileRegion({ ...regions, name: region ?? names[0], ...(globalRedis === undefined ? {} : { globalRedis }) }, file, 'regions', 'region');
  } else if (region !== undefined || globalRedis !== undefined) {
    throw configError(file, region !== undefined ? 'region' : 'globalRedis', 'needs regions.names: the list of every region');
  }
  return {
    policies, engine: parsed.data.engine ?? {}, server: parsed.data.server ?? {}, redis: parsed.data.redis ?? {},
    regions: { region, globalRedis, regions }, raw,
  };
}

/** `policies`, `policies.free`, `policies.free.limits[1].period`, `policies["a.b"].burst`. */
export function policyPath(site: PolicyErrorSite): string {
  if (site.policy === null) return 'policies';
  const base = joinPath('policies', site.policy);
  if (site.field === null) return base;
  return site.field.startsWith('[') ? `${base}${site.field}` : `${base}.${site.field}`;
}

function zodError(issue: z.core.$ZodIssue, file: string): SluiceError {
  let path = issue.path.reduce<string>((p, key) => joinPath(p, typeof key === 'number' ? key : String(key)), '');
  if (issue.code === 'unrecognized_keys') path = joinPath(path, issue.keys[0]);
  return configError(file, path === '' ? ROOT_PATH : path, issue.message);
}
