import { usage } from '../util/errors.js';
import { parseArgs } from 'node:util';
import { loadConfigFile } from '../config/load.js';
import { configFrom, intArg } from './args.js';
import { formatCompare, formatReplay, replayCompare, replayFile } from './replay.js';
import { readFile } from 'node:fs/promises';

const USAGE = `usage:
  sluice serve  [--config FILE] [--port N] [--host H] [--shards N] [--redis URL | --redis-cluster HOST:PORT,...] [--redis-prefix P] [--redis-timeout MS] [--sync-interval MS]
                [--admin-port N --admin-token T [--admin-host H]] [--grpc-port N]
  sluice check  --policy P (--key K | --descriptor name=value ...) [--cost N] [--url URL]
  sluice replay TRACE.csv [--config FILE] [--compare FILE] [--policy P ...] [--key-column C] [--top N] [--shards N] [--json]

environment: SLUICE_CONFIG, SLUICE_PORT, SLUICE_HOST, SLUICE_SHARDS, REDIS_URL, REDIS_CLUSTER_NODES, REDIS_TIMEOUT_MS, SLUICE_SYNC_INTERVAL_MS, SLUICE_REDIS_PREFIX, SLUICE_ADMIN_PORT, SLUICE_ADMIN_HOST, SLUICE_ADMIN_TOKEN, SLUICE_GRPC_PORT, SLUICE_URL, LOG_LEVEL`;

type Command = (argv: string[]) => Promise<number | void>;

const commands: Record<string, () => Promise<Command>> = {
  serve: async () => (await import('./serve.js')).serve,
  check: async () => (await import('./check.js')).check,
  replay: async () => replayCommand,
};

/** Runs one CLI command; resolves to the exit code. */
export async function main(argv: string[]): Promise<number | void> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(USAGE + '\n');
    return name === undefined ? 2 : 0;
  }
  const load = commands[name];
  if (!load) {
    process.stderr.write(`sluice: unknown command "${name}"\n${USAGE}\n`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  return (await load())(rest);
}

async function replayCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: 'string' },
      policy: { type: 'string', multiple: true },
      'key-column': { type: 'string' },
      top: { type: 'string' },
      shards: { type: 'string' },
      json: { type: 'boolean' },
      compare: { type: 'string' },
    },
  });
  if (positionals.length !== 1) throw usage('replay takes one trace file\n' + USAGE);
  const file = positionals[0];
  const config = await configFrom(values.config);
  if (values.compare !== undefined) {
    const other = await loadConfigFile(values.compare);
    const rows = await replayCompare({
      csv: await readFile(file, 'utf8'), file, a: config.policies, b: other.policies,
      only: values.policy,
      keyColumn: values['key-column'],
      shards: intArg(values.shards, '--shards', 0, 64) ?? 0,
    });
    const fileA = values.config ?? process.env.SLUICE_CONFIG ?? '(built-in default)';
    process.stdout.write((values.json
      ? JSON.stringify({ trace: file, a: fileA, b: values.compare, policies: rows }, null, 2)
      : formatCompare(rows, file, fileA, values.compare)) + '\n');
    return 0;
  }
  const results = await replayFile(file, {
    policies: config.policies,
    only: values.policy,
    keyColumn: values['key-column'],
    top: intArg(values.top, '--top', 0, 1_000_000),
    shards: intArg(values.shards, '--shards', 0, 64) ?? 0,
  });
  process.stdout.write((values.json ? JSON.stringify(results, null, 2) : formatReplay(results, file)) + '\n');
  return 0;
}
