/**
 * The `sluice` command's flags and environment variables, in one table per command ({@link COMMANDS}): each
 * command's parser takes its options from it ({@link parseCommand}), and its help (`sluice CMD --help`), the
 * usage printed after a usage error, and the global usage's environment list are generated from it.
 *
 * Exit codes, for every command: 0 done (for `check`: admitted), 1 a runtime error (a bad policies file, an
 * unreachable server, an error answer), 2 a usage error (unknown command or flag, a missing or malformed
 * argument or environment variable), 3 `check` denied.
 */
import { parseArgs } from 'node:util';
import { usage } from '../util/errors.js';

/** Exit code of a usage error. */
export const EXIT_USAGE = 2;

/** One flag of a command. */
export interface FlagSpec {
  /** The value's placeholder in the help (`FILE`, `N`, `MS`...); absent for a boolean flag. */
  readonly arg?: string;
  /** Whether the flag may be given more than once (each value kept, in order). */
  readonly multiple?: boolean;
  /** A one-letter alias. */
  readonly short?: string;
  /** The environment variables read when the flag is absent, first one first. */
  readonly env?: readonly string[];
  /** What it sets, with its units, bounds and default. */
  readonly help: string;
}

/** One command: its synopsis (laid out by hand; a test checks it names exactly these flags) and its flags. */
export interface CommandSpec {
  readonly synopsis: string;
  readonly flags: Readonly<Record<string, FlagSpec>>;
  /** Environment variables the command reads that no flag stands for, with what they set. */
  readonly env?: Readonly<Record<string, string>>;
}

const serve = {
  synopsis: `  sluice serve  [--config FILE] [--port N] [--host H] [--shards N] [--threads N] [--drain-timeout MS]
                [--redis URL | --redis-cluster HOST:PORT,... | --redis-sentinel HOST:PORT,... --redis-master NAME] [--redis-prefix P] [--redis-timeout MS] [--sync-interval MS]
                [--announce-secret S | --announce-secret-file FILE] [--admin-port N --admin-token T [--admin-host H]] [--grpc-port N] [--region NAME [--global-redis URL]]`,
  flags: {
    config: { arg: 'FILE', env: ['SLUICE_CONFIG'], help: 'the policies file (default: the built-in config); watched, and reloaded on SIGHUP' },
    port: { arg: 'N', env: ['SLUICE_PORT'], help: 'HTTP port, 0 to 65535 (default server.port, else 8080)' },
    host: { arg: 'H', env: ['SLUICE_HOST'], help: 'address to listen on (default server.host, else 0.0.0.0)' },
    shards: { arg: 'N', env: ['SLUICE_SHARDS'], help: 'worker threads holding the keys, 0 to 64 (default engine.shards, else 0)' },
    threads: { arg: 'N', env: ['SLUICE_THREADS'], help: 'HTTP front threads, 1 to 256; more than 1 needs shards and local policies (default server.threads, else the cores the shards leave free with shards and no Redis, else 1)' },
    'drain-timeout': { arg: 'MS', env: ['SLUICE_DRAIN_TIMEOUT_MS'], help: 'on SIGTERM/SIGINT, ms to finish requests and merge deltas, 0 to 3600000 (default 10000)' },
    redis: { arg: 'URL', env: ['REDIS_URL'], help: 'one Redis' },
    'redis-cluster': { arg: 'HOST:PORT,...', env: ['REDIS_CLUSTER_NODES'], help: 'a Redis Cluster\'s seed nodes' },
    'redis-sentinel': { arg: 'HOST:PORT,...', env: ['REDIS_SENTINELS'], help: 'Redis Sentinels (with --redis-master; or redis.sentinels)' },
    'redis-master': { arg: 'NAME', env: ['REDIS_MASTER'], help: 'the master the sentinels monitor (or redis.master)' },
    'redis-prefix': { arg: 'P', env: ['SLUICE_REDIS_PREFIX'], help: 'start of every Redis key and of the policies channel (default sluice:)' },
    'redis-timeout': { arg: 'MS', env: ['REDIS_TIMEOUT_MS'], help: 'a Redis call\'s deadline in ms, 1 to 60000' },
    'sync-interval': { arg: 'MS', env: ['SLUICE_SYNC_INTERVAL_MS'], help: 'ms between merges of consistency: sync deltas, 1 to 3600000' },
    'announce-secret': { arg: 'S', env: ['SLUICE_ANNOUNCE_SECRET'], help: 'secret (16 bytes or more) signing reload announcements between instances' },
    'announce-secret-file': { arg: 'FILE', env: ['SLUICE_ANNOUNCE_SECRET_FILE'], help: 'a file holding that secret (wins over --announce-secret)' },
    'admin-port': { arg: 'N', env: ['SLUICE_ADMIN_PORT'], help: 'serve the admin API on this port (or server.admin.port); needs --admin-token' },
    'admin-token': { arg: 'T', env: ['SLUICE_ADMIN_TOKEN'], help: 'the admin API\'s bearer token' },
    'admin-host': { arg: 'H', env: ['SLUICE_ADMIN_HOST'], help: 'the admin API\'s address (default server.admin.host, else 127.0.0.1)' },
    'grpc-port': { arg: 'N', env: ['SLUICE_GRPC_PORT'], help: 'serve Envoy\'s rate limit service over gRPC on this port (or server.grpcPort)' },
    region: { arg: 'NAME', env: ['SLUICE_REGION'], help: 'this instance\'s region, one of the file\'s regions.names (or region:)' },
    'global-redis': { arg: 'URL', env: ['SLUICE_GLOBAL_REDIS'], help: 'the Redis the region\'s reconciler reports to (or globalRedis:)' },
  },
  env: { LOG_LEVEL: 'fatal, error, warn, info (default), debug, trace or silent' },
} as const satisfies CommandSpec;

const check = {
  synopsis: '  sluice check  --policy P (--key K | --descriptor name=value ...) [--cost N] [--url URL]',
  flags: {
    policy: { arg: 'P', help: 'the policy to check (required)' },
    key: { arg: 'K', help: 'the key, for a policy without descriptors' },
    descriptor: { arg: 'name=value', multiple: true, help: 'a descriptor\'s value, once per descriptor name' },
    cost: { arg: 'N', help: 'the check\'s cost, an integer >= 0 (default 1)' },
    url: { arg: 'URL', env: ['SLUICE_URL'], help: 'the server, http:// or https:// (default http://127.0.0.1:8080)' },
  },
} as const satisfies CommandSpec;

const replay = {
  synopsis: '  sluice replay TRACE.csv [--config FILE] [--compare FILE] [--policy P ...] [--key-column C] [--top N] [--shards N] [--max-keys N] [--json] [--quiet]',
  flags: {
    config: { arg: 'FILE', env: ['SLUICE_CONFIG'], help: 'the policies file (default: the built-in config)' },
    compare: { arg: 'FILE', help: 'a second policies file to replay the trace under, side by side' },
    policy: { arg: 'P', multiple: true, help: 'replay only this policy (repeatable; default every policy)' },
    'key-column': { arg: 'C', help: 'the key column of a policy without descriptors (default client)' },
    top: { arg: 'N', help: 'most-limited keys listed per policy, 0 to 1000000 (default 10)' },
    shards: { arg: 'N', help: 'worker shards, 0 to 64 (default 0)' },
    'max-keys': { arg: 'N', help: 'keys each limiter holds before evicting (default 65536)' },
    json: { help: 'print JSON instead of the text report' },
    quiet: { short: 'q', help: 'no progress line on stderr' },
  },
} as const satisfies CommandSpec;

const validate = {
  synopsis: '  sluice validate FILE ...',
  flags: {},
} as const satisfies CommandSpec;

/** Every command's flags and environment. */
export const COMMANDS = { serve, check, replay, validate } as const;

export type CommandName = keyof typeof COMMANDS;

/** Every environment variable a command reads, in table order, each once. */
export function environmentOf(name: CommandName): string[] {
  const c: CommandSpec = COMMANDS[name];
  return [...new Set([...Object.values(c.flags).flatMap((f) => f.env ?? []), ...Object.keys(c.env ?? {})])];
}

/** Every command's usage, then `--version`, the exit codes and the environment. */
export const USAGE = `usage:
${Object.values(COMMANDS).map((c) => c.synopsis).join('\n')}
  sluice --version

exit codes: 0 ok (check: admitted), 1 error, 2 usage error, 3 check denied
environment: ${[...new Set((Object.keys(COMMANDS) as CommandName[]).flatMap(environmentOf))].join(', ')}
\`sluice CMD --help\` lists a command's flags and the variable each reads.`;

/** One command's usage (what a usage error of it is followed by): its synopsis and exit codes. */
export function commandUsage(name: CommandName): string {
  return `usage:\n${COMMANDS[name].synopsis}\n\nexit codes: 0 ok${name === 'check' ? ' (admitted)' : ''}, 1 error, 2 usage error${name === 'check' ? ', 3 denied' : ''}`;
}

/** One command's help (`sluice CMD --help`): its usage, then each flag with the variable it reads, then the other variables. */
export function commandHelp(name: CommandName): string {
  const c: CommandSpec = COMMANDS[name];
  const rows = Object.entries(c.flags).map(([flag, f]) => [
    `${f.short ? `-${f.short}, ` : ''}--${flag}${f.arg ? ` ${f.arg}` : ''}`,
    `${f.help}${f.env ? ` [env ${f.env.join(', ')}]` : ''}`,
  ]);
  const width = Math.max(0, ...rows.map(([l]) => l.length)) + 2;
  const flags = rows.length === 0 ? '' : `\n\nflags (a flag wins over its environment variable${name === 'check' ? '' : ', which wins over the file'}):\n${rows.map(([l, r]) => `  ${l.padEnd(width)}${r}`).join('\n')}`;
  const env = Object.entries(c.env ?? {});
  const other = env.length === 0 ? '' : `\n\nenvironment:\n${env.map(([k, v]) => `  ${k.padEnd(width)}${v}`).join('\n')}`;
  return commandUsage(name) + flags + other;
}

/** A command's parsed command line: each flag's value (a list for a repeatable flag, true for a boolean one). */
export type ParsedFlags<F extends Readonly<Record<string, FlagSpec>>> = {
  -readonly [K in keyof F]?: F[K] extends { multiple: true } ? string[] : F[K] extends { arg: string } ? string : boolean;
};

/**
 * Parses `argv` with the flags of command `name` (node:util parseArgs, strict). A value that looks like a
 * negative number (`--cost -1`) is taken as the flag's value, as `--cost=-1` is, so the flag's own check names
 * it; no flag's name starts with a digit.
 * @throws SluiceError USAGE naming the flag for a single-valued flag given more than once; parseArgs's errors
 *   (code ERR_PARSE_ARGS_*) for an unknown flag, a missing value, or a positional argument to a command that
 *   takes none.
 */
export function parseCommand<N extends CommandName>(name: N, argv: string[]): { values: ParsedFlags<(typeof COMMANDS)[N]['flags']>; positionals: string[] } {
  const c: CommandSpec = COMMANDS[name];
  const valued = new Set(Object.entries(c.flags).flatMap(([flag, f]) => (f.arg === undefined ? [] : [`--${flag}`, ...(f.short ? [`-${f.short}`] : [])])));
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') {
      args.push(...argv.slice(i));
      break;
    }
    if (valued.has(a) && i + 1 < argv.length && /^-\.?\d/.test(argv[i + 1])) args.push(`${a}=${argv[++i]}`);
    else args.push(a);
  }
  // every value flag is parsed as a list, so a repeated single-valued one is refused rather than the last kept
  const options = Object.fromEntries(Object.entries(c.flags).map(([flag, f]) => [flag, {
    type: f.arg === undefined ? 'boolean' as const : 'string' as const,
    ...(f.arg !== undefined ? { multiple: true } : {}),
    ...(f.short ? { short: f.short } : {}),
  }]));
  const { values, positionals } = parseArgs({ args, options, allowPositionals: name === 'replay' || name === 'validate' });
  const out: Record<string, unknown> = {};
  for (const [flag, v] of Object.entries(values)) {
    const f = c.flags[flag];
    if (Array.isArray(v) && !f.multiple) {
      if (v.length > 1) throw usage(`--${flag} given ${v.length} times (${v.map((x) => JSON.stringify(x)).join(', ')}): give it once`, `--${flag}`);
      out[flag] = v[0];
    } else {
      out[flag] = v;
    }
  }
  return { values: out as ParsedFlags<(typeof COMMANDS)[N]['flags']>, positionals };
}
