/** What kind of failure a failed store call was: the breaker and the metrics count by it. */
import { StoreTimeoutError } from './deadline.js';
import type { StoreFailures } from './contract.js';

/**
 * Redis replies that say it cannot serve now (its memory, a busy script, loading, a replica, cluster state),
 * not that the script failed. The code is the reply's first word (Redis 7 keeps a refused command's code first
 * even from inside a script: "OOM command not allowed ... script: <sha>, on @user_script:1."); Redis 6 wraps
 * it as "ERR Error running script (call to f_<sha>): @user_script:<line>: OOM ...", so the code is also looked
 * for right after that prefix and its "@user_script:<line>:" parts. Nowhere else: a script's own error can
 * carry a key's name ("... in <key>"), and a key named "x: BUSY" must not open the breaker.
 */
const UNAVAILABLE_REPLY =
  /^(?:ERR Error running script \(call to [^)]*\): (?:@?user_script: ?\d+: )*-?)?(OOM|BUSY|LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|MISCONF|NOREPLICAS)\b/;

/** The kind of a failed store call (see {@link StoreFailures}). */
export function failureKind(e: unknown): keyof StoreFailures {
  const err = e as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (err?.code === 'EOPENBREAKER') return 'breakerRejections';
  if (err instanceof StoreTimeoutError || err?.message === 'Command timed out') return 'timeouts';
  if (err?.name === 'ReplyError') return UNAVAILABLE_REPLY.test(String(err.message)) ? 'unavailable' : 'scriptErrors';
  return 'connectionErrors';
}
