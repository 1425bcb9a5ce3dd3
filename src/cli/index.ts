import { loadConfigFile } from '../config/load.js';
import { formatCompare, formatReplay, replayCompare, replayFile } from './replay.js';
import { ProgressLine, type ReplayProgress } from './progress.js';
import { MAX_KERNEL_KEYS } from '../shard/kernel.js';
import { stat } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isSluiceError, usage } from '../util/errors.js';
import { configFrom, intArg } from './args.js';
import { packageRoot } from '../util/paths.js';
import { EXIT_USAGE, USAGE, commandHelp, commandUsage, parseCommand, type CommandName } from './usage.js';

type Command = (argv: string[]) => Promise<number | void>;

const commands: Record<CommandName, () => Promise<Command>> = {
  serve: async () => (await import('./serve.js')).serve,
  check: async () => (await import('./check.js')).check,
  replay: async () => replayCommand,
  validate: async () => (await import('./validate.js')).validate,
};

/** The package's version, from its package.json. */
export function version(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}

/**
 * Runs one CLI command; resolves to the exit code (see src/cli/usage.ts). A usage error (a {@link usageError},
 * or one of node:util parseArgs's) is printed with the command's usage and resolves to 2; other errors reject.
 */
export async function main(argv: string[]): Promise<number | void> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-v') {
    process.stdout.write(`sluice ${version()}\n`);
    return 0;
  }
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    (name === undefined ? process.stderr : process.stdout).write(USAGE + '\n');
    return name === undefined ? EXIT_USAGE : 0;
  }
  if (!Object.hasOwn(commands, name)) {
    process.stderr.write(`sluice: unknown command "${name}"\n${USAGE}\n`);
    return EXIT_USAGE;
  }
  const command = name as CommandName;
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(commandHelp(command) + '\n');
    return 0;
  }
  try {
    return await (await commands[command]())(rest);
  } catch (e) {
    if (!isUsage(e)) throw e;
    process.stderr.write(`sluice ${command}: ${(e as Error).message}\n${commandUsage(command)}\n`);
    return EXIT_USAGE;
  }
}

/** A usage error of ours, or one of parseArgs's (ERR_PARSE_ARGS_UNKNOWN_OPTION, ..._INVALID_OPTION_VALUE, ...). */
function isUsage(e: unknown): boolean {
  if (isSluiceError(e)) return e.code === 'USAGE';
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_');
}

async function replayCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand('replay', argv);
  if (positionals.length !== 1) throw usage(`takes one trace file (got ${positionals.length})`);
  const file = positionals[0];
  const shards = intArg(values.shards, '--shards', 0, 64) ?? 0;
  const maxKeys = intArg(values['max-keys'], '--max-keys', 1, MAX_KERNEL_KEYS);
  const top = intArg(values.top, '--top', 0, 1_000_000);
  const config = await configFrom(values.config);
  const other = values.compare === undefined ? undefined : await loadConfigFile(values.compare);
  const progress = !values.quiet && process.stderr.isTTY ? new ProgressLine({ write: (t) => process.stderr.write(t), totalBytes: await sizeOf(file) }) : null;
  const common = { file, keyColumn: values['key-column'], shards, maxKeys, onProgress: progress ? (p: ReplayProgress) => progress.update(p) : undefined };
  try {
    if (other !== undefined) {
      const rows = await replayCompare({ ...common, a: config.policies, b: other.policies, only: values.policy });
      progress?.end();
      const fileA = values.config ?? process.env.SLUICE_CONFIG ?? '(built-in default)';
      process.stdout.write((values.json
        ? JSON.stringify({ trace: file, a: fileA, b: values.compare, policies: rows }, null, 2)
        : formatCompare(rows, file, fileA, values.compare!)) + '\n');
      return 0;
    }
    const results = await replayFile(file, { ...common, policies: config.policies, only: values.policy, top });
    progress?.end();
    process.stdout.write((values.json ? JSON.stringify(results, null, 2) : formatReplay(results, file)) + '\n');
    return 0;
  } finally {
    progress?.end();
  }
}

/** The size of a file in bytes, 0 when it cannot be read (the replay then reports why). */
async function sizeOf(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch {
    return 0;
  }
}
