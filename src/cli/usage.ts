/**
 * The `sluice` command's usage texts: one per command (what `sluice CMD --help` prints and what a usage error
 * of CMD is followed by), and the global one listing them all.
 *
 * Exit codes, for every command: 0 done (for `check`: admitted), 1 a runtime error (a bad policies file, an
 * unreachable server, an error answer), 2 a usage error (unknown command or flag, a missing or malformed
 * argument or environment variable), 3 `check` denied.
 */

/** Exit code of a usage error. */
export const EXIT_USAGE = 2;

export const COMMAND_USAGE = {
  serve: `  sluice serve  [--config FILE] [--port N] [--host H] [--shards N] [--threads N] [--redis URL | --redis-cluster HOST:PORT,...] [--redis-prefix P] [--redis-timeout MS] [--sync-interval MS]
                [--redis-sentinel HOST:PORT,... --redis-master NAME] [--admin-port N --admin-token T [--admin-host H]] [--grpc-port N] [--region NAME [--global-redis URL]]`,
  check: '  sluice check  --policy P (--key K | --descriptor name=value ...) [--cost N] [--url URL]',
  replay: '  sluice replay TRACE.csv [--config FILE] [--compare FILE] [--policy P ...] [--key-column C] [--top N] [--shards N] [--max-keys N] [--json] [--quiet]',
  validate: '  sluice validate FILE ...',
} as const;

export type CommandName = keyof typeof COMMAND_USAGE;

const ENVIRONMENT = 'environment: SLUICE_CONFIG, SLUICE_PORT, SLUICE_HOST, SLUICE_SHARDS, REDIS_URL, REDIS_CLUSTER_NODES, REDIS_TIMEOUT_MS, SLUICE_SYNC_INTERVAL_MS, SLUICE_REDIS_PREFIX, SLUICE_ADMIN_PORT, SLUICE_ADMIN_HOST, SLUICE_ADMIN_TOKEN, SLUICE_GRPC_PORT, SLUICE_REGION, SLUICE_GLOBAL_REDIS, REDIS_SENTINELS, REDIS_MASTER, SLUICE_URL, LOG_LEVEL';

/** Every command's usage, then `--version`, the exit codes and the environment. */
export const USAGE = `usage:
${Object.values(COMMAND_USAGE).join('\n')}
  sluice --version

exit codes: 0 ok (check: admitted), 1 error, 2 usage error, 3 check denied
${ENVIRONMENT}`;

/** One command's usage (`sluice CMD --help`). */
export function commandUsage(name: CommandName): string {
  return `usage:\n${COMMAND_USAGE[name]}\n\nexit codes: 0 ok${name === 'check' ? ' (admitted)' : ''}, 1 error, 2 usage error${name === 'check' ? ', 3 denied' : ''}`;
}
