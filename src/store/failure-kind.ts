/** What kind of failure a failed store call was: the breaker and the metrics count by it. */
import { StoreTimeoutError } from './deadline.js';
import type { StoreFailures } from './contract.js';

/**
 * Redis replies that say it cannot serve now (its memory, a busy script, loading, a replica, cluster state),
 * not that the script failed. ioredis may wrap a script's error as "ERR Error running script ...: OOM ...",
 * so the code is looked for after a script-error prefix too.
 */
const UNAVAILABLE_REPLY = /(^|: |^ERR Error running script.*?)(OOM|BUSY|LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|MISCONF|NOREPLICAS)\b/;

/** The kind of a failed store call (see {@link StoreFailures}). */
export function failureKind(e: unknown): keyof StoreFailures {
  const err = e as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (err?.code === 'EOPENBREAKER') return 'breakerRejections';
  if (err instanceof StoreTimeoutError || err?.message === 'Command timed out') return 'timeouts';
  if (err?.name === 'ReplyError') return UNAVAILABLE_REPLY.test(String(err.message)) ? 'unavailable' : 'scriptErrors';
  return 'connectionErrors';
}
