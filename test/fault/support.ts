/**
 * Helpers shared by the fault tests: keys routed to a chosen shard (computed exactly as the front routes
 * them), settling promises with a hang guard, and waiting for a condition.
 */
import { copyFileSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { isSluiceError, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { buildRuntimes, type PolicyRuntime } from '../../src/engine/runtime.js';
import { LimitTable } from '../../src/engine/limits.js';
import { Hasher } from '../../src/keys/hasher.js';
import { Kernel, kernelModule } from '../../src/shard/kernel.js';
import { shardOf } from '../../src/shard/router.js';
import type { ShardPool } from '../../src/shard/pool.js';
import { engineOf } from '../../src/engine/handle.js';
import { PROJECT_ROOT } from '../helpers/server.js';

/**
 * `policy`'s runtime, and the hash of `key` under it (and the hasher, for more), as the limiter's own front
 * makes them (same plan, same limit ids).
 */
export function runtimeOf(policies: Record<string, PolicySpec>, policy: string, key = ''): { rt: PolicyRuntime; lo: number; hi: number; hasher: Hasher } {
  const compiled = compilePolicies(policies);
  const table = new LimitTable(4096);
  const plan = table.plan(compiled);
  table.commit(plan);
  const hasher = new Hasher(new Kernel(kernelModule(), { maxKeys: 1, maxBatch: 16, limits: table.limits }), 16);
  const rt = buildRuntimes(compiled, plan.ids, hasher).get(policy)!;
  const [lo, hi] = hasher.hashOne(key, rt.seedLo, rt.seedHi);
  return { rt, lo, hi, hasher };
}

/** `perShard` keys of `policy` owned by each of `shards` shards. */
export function keysByShard(policies: Record<string, PolicySpec>, policy: string, shards: number, perShard: number): string[][] {
  const { rt, hasher } = runtimeOf(policies, policy);
  const out: string[][] = Array.from({ length: shards }, () => []);
  for (let i = 0; out.some((ks) => ks.length < perShard); i++) {
    const key = `tenant-${i}`;
    const [, hi] = hasher.hashOne(key, rt.seedLo, rt.seedHi);
    const s = shardOf(rt.guardHashes === null ? hi : rt.guardHashes[1], shards);
    if (out[s].length < perShard) out[s].push(key);
  }
  return out;
}

export type Settled = { ok: true; value: Decision } | { ok: false; error: unknown };

/** Settles every promise, or fails if any is still pending after `ms` (a hang). */
export async function settleWithin(ps: Array<Promise<Decision>>, ms: number): Promise<Settled[]> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`checks still pending after ${ms} ms`)), ms);
  });
  try {
    const all = Promise.all(ps.map((p) => p.then(
      (value): Settled => ({ ok: true, value }),
      (error: unknown): Settled => ({ ok: false, error }),
    )));
    return await Promise.race([all, guard]);
  } finally {
    clearTimeout(timer);
  }
}

export function codeOf(s: Settled): string {
  if (s.ok) return 'decided';
  return isSluiceError(s.error) ? s.error.code : `not a SluiceError: ${String(s.error)}`;
}

export function tally(ss: Settled[]): Record<string, number> {
  const t: Record<string, number> = {};
  for (const s of ss) t[codeOf(s)] = (t[codeOf(s)] ?? 0) + 1;
  return t;
}

export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The limiter's shard pool (internal: reached through a symbol for fault tests). */
export const poolOf = (l: Limiter): ShardPool => engineOf(l)!.pool!;

/** OS threads of this process (Linux: /proc/self/task); worker threads are OS threads. */
export async function osThreads(): Promise<number> {
  const { readdirSync } = await import('node:fs');
  return readdirSync('/proc/self/task').length;
}

/** Prometheus text → `name{a="1",b="2"}` (labels sorted) → value. Comment lines are skipped. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null) throw new Error(`not a metric line: ${line}`);
    const labels = m[2] === undefined || m[2] === '' ? [] : m[2].split(',').sort();
    out.set(labels.length === 0 ? m[1] : `${m[1]}{${labels.join(',')}}`, Number(m[3]));
  }
  return out;
}

/** Faults the fixture worker (test/fault/fixtures/faulty-worker.mjs) injects; see that file. */
export interface Faults {
  atLoad?: 'throw' | 'exit' | 'hang';
  loadFlag?: string;
  loadHangFlag?: string;
  loadWaitFlag?: string;
  loadWaitingFlag?: string;
  throwCost?: number;
  exitCost?: number;
  stallCost?: number;
  stalledFlag?: string;
  releaseFlag?: string;
}

/**
 * A {@link faultyRoot} whose worker stalls on a check of `stallCost`: it writes the file `stalled` once it
 * holds that check, and goes on once the test writes the file `release` (both inside the root).
 */
export function stallingRoot(stallCost: number): { root: string; stalled: string; release: string } {
  let stalled = '';
  let release = '';
  const root = faultyRoot((dir) => {
    stalled = path.join(dir, 'stalled');
    release = path.join(dir, 'release');
    return { stallCost, stalledFlag: stalled, releaseFlag: release };
  });
  return { root, stalled, release };
}

/**
 * A temporary package root whose shard worker is the faulty fixture: the real `build/` (the kernel), and as
 * `dist/src/shard/worker.js` the fixture, which wraps the real built worker. A test file mocks `packageRoot`
 * (src/util/paths.ts) to return it; src/shard/pool.ts then starts the fixture under vitest.
 */
export function faultyRoot(faults: Faults | ((root: string) => Faults)): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'sluice-faults-'));
  if (typeof faults === 'function') faults = faults(dir);
  symlinkSync(path.join(PROJECT_ROOT, 'build'), path.join(dir, 'build'));
  const shardDir = path.join(dir, 'dist', 'src', 'shard');
  mkdirSync(shardDir, { recursive: true });
  copyFileSync(path.join(PROJECT_ROOT, 'test', 'fault', 'fixtures', 'faulty-worker.mjs'), path.join(shardDir, 'worker.js'));
  const real = pathToFileURL(path.join(PROJECT_ROOT, 'dist', 'src', 'shard', 'worker.js')).href;
  writeFileSync(path.join(shardDir, 'faults.json'), JSON.stringify({ real, ...faults }));
  writeFileSync(path.join(dir, 'package.json'), '{"type":"module"}');
  return dir;
}
