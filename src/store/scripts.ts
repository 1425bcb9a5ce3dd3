import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/paths.js';

/** The Lua files of the batch check script, in the order they are joined into one chunk. */
const PARTS = ['lib.lua', 'token_bucket.lua', 'gcra.lua', 'fixed_window.lua', 'sliding_window.lua', 'calendar_window.lua', 'sliding_log.lua', 'check.lua'];

let script: string | undefined;
let sync: string | undefined;

/** The sync-mode merge script: `lua/lib.lua` then `lua/sync.lua`. */
export function syncScript(): string {
  sync ??= ['lib.lua', 'sync.lua'].map((f) => readFileSync(join(packageRoot(), 'lua', f), 'utf8')).join('\n');
  return sync;
}

/**
 * The check script: `lua/lib.lua`, one file per algorithm, then the batch driver `lua/check.lua`, joined into
 * one chunk (Redis runs one chunk per script; the algorithms stay one file each).
 */
export function checkScript(): string {
  script ??= PARTS.map((f) => readFileSync(join(packageRoot(), 'lua', f), 'utf8')).join('\n');
  return script;
}

let lease: string | undefined;

/** The concurrency lease script (src/engine/leases.ts): `lua/lib.lua` then `lua/concurrency.lua`. */
export function leaseScript(): string {
  lease ??= ['lib.lua', 'concurrency.lua'].map((f) => readFileSync(join(packageRoot(), 'lua', f), 'utf8')).join('\n');
  return lease;
}

let quotaLease: string | undefined;

/** The quota lease script (consistency lease): `lua/lib.lua`, `lua/sliding_window.lua` (its helpers), `lua/lease.lua`. */
export function quotaLeaseScript(): string {
  quotaLease ??= ['lib.lua', 'sliding_window.lua', 'lease.lua'].map((f) => readFileSync(join(packageRoot(), 'lua', f), 'utf8')).join('\n');
  return quotaLease;
}
