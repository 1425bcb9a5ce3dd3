import { usage } from '../util/errors.js';
import { parseCommand } from './usage.js';
import { intArg } from './args.js';

/** Exit code of `sluice check` when the check is denied (0: admitted, 1: error, 2: usage). */
export const EXIT_DENIED = 3;

/**
 * `sluice check`: one decision from a running server (`--url`, or SLUICE_URL, default http://127.0.0.1:8080).
 * Prints the decision as JSON; exits 0 if admitted, 3 if denied, 1 on an error answer.
 * @throws SluiceError USAGE (exit 2) naming the flag: no `--policy`, a malformed `--cost`, `--descriptor` or
 *   `--url` (SLUICE_URL), a descriptor name or a single-valued flag given twice.
 */
export async function check(argv: string[]): Promise<number> {
  const { values } = parseCommand('check', argv);
  if (values.policy === undefined) throw usage('needs --policy', '--policy');
  const params = new URLSearchParams({ policy: values.policy });
  if (values.key !== undefined) params.set('key', values.key);
  const cost = intArg(values.cost, '--cost', 0, Number.MAX_SAFE_INTEGER);
  if (cost !== undefined) params.set('cost', String(cost));
  const given = new Map<string, string>();
  for (const d of values.descriptor ?? []) {
    const eq = d.indexOf('=');
    if (eq <= 0) throw usage(`--descriptor must be name=value (got ${JSON.stringify(d)})`, '--descriptor');
    const name = d.slice(0, eq);
    const value = d.slice(eq + 1);
    if (given.has(name)) throw usage(`--descriptor: ${name} given twice (${JSON.stringify(given.get(name))}, ${JSON.stringify(value)}): give each descriptor name once`, '--descriptor');
    given.set(name, value);
    params.set(name, value);
  }
  const url = new URL(`/v1/check?${params}`, serverUrl(values.url));
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`cannot reach ${url.origin}: ${cause?.code ?? cause?.message ?? (e as Error).message}`);
  }
  const body = await res.text();
  process.stdout.write(body + '\n');
  if (!res.ok) return 1;
  return (JSON.parse(body) as { allowed: boolean }).allowed ? 0 : EXIT_DENIED;
}

/**
 * The server's base URL: `--url`, else SLUICE_URL, else http://127.0.0.1:8080.
 * @throws SluiceError USAGE naming `--url` (or SLUICE_URL) when it is not an http:// or https:// URL.
 */
function serverUrl(flag: string | undefined): URL {
  const env = process.env.SLUICE_URL || undefined;
  const [name, text] = flag !== undefined ? ['--url', flag] : env !== undefined ? ['SLUICE_URL', env] : ['--url', 'http://127.0.0.1:8080'];
  let url: URL | null = null;
  try {
    url = new URL(text);
  } catch {
    // reported below
  }
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw usage(`${name} must be an http:// or https:// URL (got ${JSON.stringify(text)})`, name);
  }
  return url;
}
