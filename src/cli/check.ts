import { usage } from '../util/errors.js';
import { parseCommand } from './usage.js';
import { intArg } from './args.js';

/** Exit code of `sluice check` when the check is denied (0: admitted, 1: error, 2: usage). */
export const EXIT_DENIED = 3;

/**
 * `sluice check`: one decision from a running server (`--url`, or SLUICE_URL, default http://127.0.0.1:8080).
 * Prints the decision as JSON; exits 0 if admitted, 3 if denied, 1 on an error answer.
 */
export async function check(argv: string[]): Promise<number> {
  const { values } = parseCommand('check', argv);
  if (values.policy === undefined) throw usage('needs --policy', '--policy');
  const params = new URLSearchParams({ policy: values.policy });
  if (values.key !== undefined) params.set('key', values.key);
  const cost = intArg(values.cost, '--cost', 0, Number.MAX_SAFE_INTEGER);
  if (cost !== undefined) params.set('cost', String(cost));
  for (const d of values.descriptor ?? []) {
    const eq = d.indexOf('=');
    if (eq <= 0) throw usage(`--descriptor must be name=value (got ${JSON.stringify(d)})`, '--descriptor');
    params.set(d.slice(0, eq), d.slice(eq + 1));
  }
  const base = values.url ?? process.env.SLUICE_URL ?? 'http://127.0.0.1:8080';
  const url = new URL(`/v1/check?${params}`, base);
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
