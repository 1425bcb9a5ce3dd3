import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/paths.js';

/** The Lua files of the batch check script, in the order they are joined into one chunk. */
export const CHECK_PARTS: readonly string[] = ['lib.lua', 'token_bucket.lua', 'gcra.lua', 'fixed_window.lua', 'sliding_window.lua', 'calendar_window.lua', 'sliding_log.lua', 'check.lua'];

let script: string | undefined;
let sync: string | undefined;

/** The sync-mode merge script: `lua/lib.lua` then `lua/sync.lua`. */
export function syncScript(): string {
  sync ??= ['lib.lua', 'sync.lua'].map((f) => readFileSync(join(packageRoot(), 'lua', f), 'utf8')).join('\n');
  return sync;
}

let source: string | undefined;
let library: CheckLibrary | undefined;

/**
 * The check script's source from the Lua files in `dir` ({@link CHECK_PARTS}: `lib.lua`, one file per
 * algorithm, then the batch driver `check.lua`, which defines `check(KEYS, ARGV)`). Another `dir` than the
 * package's `lua/` serves tools that measure a variant (bench/tools/script-instructions.mjs).
 */
export function checkSourceIn(dir: string): string {
  return CHECK_PARTS.map((f) => readFileSync(join(dir, f), 'utf8')).join('\n');
}

function checkSource(): string {
  source ??= checkSourceIn(join(packageRoot(), 'lua'));
  return source;
}

/** `src` (a {@link checkSourceIn}) as an EVAL chunk: it ends by calling `check(KEYS, ARGV)`. */
export function checkChunkOf(src: string): string {
  return `${src}\nreturn check(KEYS, ARGV)\n`;
}

/**
 * The check script as an EVAL chunk: {@link checkSource} then `return check(KEYS, ARGV)` (Redis runs one chunk
 * per script; the algorithms stay one file each). Every call runs the whole chunk, which defines the helpers
 * and makes the scratch tables again: used where Redis refuses FUNCTION LOAD (and by tests).
 */
export function checkScript(): string {
  script ??= checkChunkOf(checkSource());
  return script;
}

/** The check script as a Redis Function library (Redis 7): its text and the names FUNCTION LOAD and FCALL take. */
export interface CheckLibrary {
  /** `#!lua name=…` then {@link checkSource} and the registration of `check`. */
  text: string;
  /** The library's name, `sluice_` + 16 hex digits of the source's SHA-1: each version of the script its own library. */
  name: string;
  /** The function FCALL calls: the library's name + `_check`. */
  fn: string;
}

/**
 * The check script as a Redis Function library. The library's code runs once, at FUNCTION LOAD: its helpers
 * and scratch tables then live as long as the library, where an EVAL makes them on every call (~120 k of the
 * ~157 k Redis instructions of a one-check call, a callgrind count: bench/README.md). The names carry the
 * source's hash, so instances of different versions on one Redis each call their own.
 */
export function checkLibrary(): CheckLibrary {
  library ??= checkLibraryOf(checkSource());
  return library;
}

/** `src` (a {@link checkSourceIn}) as a Redis Function library, named by its hash as {@link checkLibrary} is. */
export function checkLibraryOf(src: string): CheckLibrary {
  const name = `sluice_${createHash('sha1').update(src).digest('hex').slice(0, 16)}`;
  const fn = `${name}_check`;
  return { name, fn, text: `#!lua name=${name}\n${src}\nredis.register_function('${fn}', check)\n` };
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

/**
 * What a failed FUNCTION LOAD of the check library means for its caller: `loaded` (another instance of this
 * version loaded it: "already exists"), `refused` (this Redis will not take the library: FUNCTION unknown on
 * Redis < 7, an ACL without it, a registration error; call the script by EVALSHA from now on), or `retry`
 * (it cannot take writes now: READONLY, OOM, LOADING, BUSY...; load again on the next call, and a call that
 * found no library behind this load fails with this error: Redis's state, not the script's).
 */
export function loadFailure(e: unknown): 'loaded' | 'refused' | 'retry' {
  const msg = String((e as Error)?.message);
  if (msg.includes('already exists')) return 'loaded';
  return /unknown command|NOPERM|ERR Error registering/i.test(msg) ? 'refused' : 'retry';
}

/** Whether an EVALSHA failed because the server does not hold the script (a restart, failover, SCRIPT FLUSH). */
export function scriptMissing(e: unknown): boolean {
  return String((e as Error)?.message).includes('NOSCRIPT');
}

/**
 * Whether an FCALL was refused as a command: "unknown command" (Redis older than 7) or NOPERM for `fcall` (an
 * ACL without it; not a NOPERM for a key, which EVALSHA would meet too). The script then goes by EVALSHA.
 */
export function fcallRefused(e: unknown): boolean {
  return /unknown command [`']?fcall\b|^NOPERM.*'fcall'/i.test(String((e as Error)?.message));
}

/** Whether an FCALL failed because the server does not hold the library (a restart, FUNCTION FLUSH). */
export function functionMissing(e: unknown): boolean {
  return String((e as Error)?.message).includes('Function not found');
}
