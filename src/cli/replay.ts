import { createLimiter } from '../limiter.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import type { CheckRequest } from '../types/decision.js';
import { unknownPolicy, traceError } from '../util/errors.js';
import { keyOf } from '../keys/derive.js';
import type { ReplayProgress } from './progress.js';
import { readTrace, type TraceRow } from './trace.js';

/**
 * Counts for one policy over a trace. A shadow policy, which never denies, is counted by its evaluation: its
 * would-denies count as denied, so a replay shows what it would do if it enforced.
 */
export interface PolicyReplay {
  policy: string;
  admitted: number;
  denied: number;
  /** Keys with the most denials, most first (ties: key order). */
  mostLimited: Array<{ key: string; admitted: number; denied: number }>;
  /**
   * Present when the key table evicted keys (more distinct keys than `maxKeys`): an evicted key that was not
   * idle started afresh, so the counts may admit more than the policy would. Raise `maxKeys` (--max-keys).
   */
  evictions?: number;
}

export interface ReplayOptions {
  /**
   * CSV text with a header row: `ts_ms` (Unix ms) and one column per descriptor (e.g. `client`). When absent,
   * `file` is read as a stream (memory does not grow with the trace's length).
   */
  csv?: string;
  /** The trace's file (read when `csv` is absent), and its name in error messages. */
  file: string;
  policies: ReadonlyMap<string, CompiledPolicy>;
  /** Policies to replay; default every policy that is not only some other policy's guard. */
  only?: string[];
  /** Column used as the key of a policy without descriptors. Default `client`. */
  keyColumn?: string;
  /** How many most-limited keys to report. Default 10. */
  top?: number;
  shards?: number;
  /**
   * Key table capacity of each policy's limiter. Default {@link REPLAY_MAX_KEYS}. A trace with more distinct
   * keys than this makes the table evict, and an evicted key that was not idle starts afresh: the result then
   * says how many keys were evicted ({@link PolicyReplay.evictions}).
   */
  maxKeys?: number;
  /** Called every {@link PROGRESS_EVERY} rows and at the end of each pass (one pass per policy). */
  onProgress?: (p: ReplayProgress) => void;
}

/** Default key table capacity of a replay's limiter: ~6 MiB of kernel memory. */
export const REPLAY_MAX_KEYS = 65_536;
/** Rows between two progress calls. */
export const PROGRESS_EVERY = 8192;
/**
 * Most rows decided in one batch: rows sharing a timestamp are batched, and a batch decides its checks in
 * order exactly as one-by-one checks would, so a longer run of one timestamp is simply split. 64, not 256:
 * what a batch holds survives V8's young-generation collections, and the more survives the more V8 grows the
 * young generation; a 2 M-row replay peaks at ~83 MB RSS with 64 (16 and 32 the same) against ~95 MB with 256
 * and 1,024, at the same speed (~5 s here).
 */
const MAX_BATCH_ROWS = 64;

/**
 * Replays a recorded trace through the engine with the trace's own timestamps as the clock, one limiter per
 * policy (so policies do not charge each other), in the trace's order: one pass over the trace per policy,
 * reading it as a stream. Rows that share a timestamp go in one batch (see MAX_BATCH_ROWS). Memory grows
 * with the number of distinct keys (the limiter's state and the per-key counts), not with the rows.
 * @throws SluiceError INVALID_ARGUMENT naming the file, row and column of a bad row.
 */
export async function replay(o: ReplayOptions): Promise<PolicyReplay[]> {
  const names = o.only ?? [...o.policies.values()].filter((p) => !isOnlyGuard(p, o.policies)).map((p) => p.name);
  for (const name of names) {
    if (!o.policies.has(name)) throw unknownPolicy(name);
  }
  const out: PolicyReplay[] = [];
  for (let i = 0; i < names.length; i++) out.push(await replayPolicy(o.policies.get(names[i])!, o, i + 1, names.length));
  return out;
}

async function replayPolicy(policy: CompiledPolicy, o: ReplayOptions, pass: number, passes: number): Promise<PolicyReplay> {
  const keyColumn = o.keyColumn ?? 'client';
  let now = 0;
  const limiter = await createLimiter({ policies: o.policies, shards: o.shards ?? 0, maxKeys: o.maxKeys ?? REPLAY_MAX_KEYS, clock: () => now });
  const perKey = new Map<string, { admitted: number; denied: number }>();
  const progress: ReplayProgress = { policy: policy.name, pass, passes, rows: 0, bytes: 0 };
  let admitted = 0;
  let rows = 0;
  let request: ((r: TraceRow) => CheckRequest) | undefined;
  let batch: TraceRow[] = [];
  const flush = async (): Promise<void> => {
    now = batch[0].t;
    const reqs = batch.map(request!);
    batch = [];
    const decisions = await limiter.checkMany(reqs);
    for (let k = 0; k < decisions.length; k++) {
      const d = decisions[k];
      if (d instanceof Error) throw d;
      const key = keyOf(policy, reqs[k].key, reqs[k].descriptors);
      let c = perKey.get(key);
      if (c === undefined) perKey.set(key, (c = { admitted: 0, denied: 0 }));
      if (d.shadow?.allowed ?? d.allowed) { c.admitted++; admitted++; } else c.denied++;
    }
  };
  let evictions = 0;
  try {
    for await (const row of readTrace({ file: o.file, csv: o.csv, onRead: (n) => (progress.bytes += n) })) {
      request ??= requestBuilder(policy, keyColumn, o.file, row.fields);
      if (batch.length > 0 && (row.t !== batch[0].t || batch.length >= MAX_BATCH_ROWS)) await flush();
      batch.push(row);
      if (++rows % PROGRESS_EVERY === 0 && o.onProgress) {
        progress.rows = rows;
        o.onProgress(progress);
      }
    }
    if (batch.length > 0) await flush();
    evictions = (await limiter.stats()).evictions;
  } finally {
    await limiter.close();
  }
  progress.rows = rows;
  o.onProgress?.(progress);
  const mostLimited = [...perKey.entries()]
    .filter(([, c]) => c.denied > 0)
    .sort((a, b) => b[1].denied - a[1].denied || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, o.top ?? 10)
    .map(([key, c]) => ({ key, ...c }));
  const result: PolicyReplay = { policy: policy.name, admitted, denied: rows - admitted, mostLimited };
  if (evictions > 0) result.evictions = evictions;
  return result;
}

/** Maps a row to a check: descriptors from the columns of the same names, else `keyColumn` as the key. */
function requestBuilder(policy: CompiledPolicy, keyColumn: string, file: string, sample: Record<string, string>) {
  const names = policy.descriptors.map((d) => d.name);
  for (const n of names.length > 0 ? names : [keyColumn]) {
    if (!(n in sample)) {
      throw traceError(file, `policy "${policy.name}" needs column "${n}", which the trace lacks`, n);
    }
  }
  return (r: TraceRow): CheckRequest => names.length > 0
    ? { policy: policy.name, descriptors: Object.fromEntries(names.map((n) => [n, r.fields[n]])), cost: 1 }
    : { policy: policy.name, key: r.fields[keyColumn], cost: 1 };
}

function isOnlyGuard(p: CompiledPolicy, all: ReadonlyMap<string, CompiledPolicy>): boolean {
  return [...all.values()].some((q) => q.guard === p.name) && p.descriptors.length === 0;
}

/** A report as aligned text. */
export function formatReplay(results: PolicyReplay[], file: string): string {
  const lines: string[] = [`replay of ${file}`];
  for (const r of results) {
    const total = r.admitted + r.denied;
    const pct = total === 0 ? '0.0' : ((100 * r.denied) / total).toFixed(1);
    lines.push('', `policy ${r.policy}: ${total} checks, ${r.admitted} admitted, ${r.denied} denied (${pct}% denied)`);
    if (r.evictions !== undefined) lines.push(`  warning: ${r.evictions} keys evicted (more distinct keys than --max-keys): counts may be inexact`);
    if (r.mostLimited.length > 0) {
      lines.push('  most-limited keys:');
      for (const k of r.mostLimited) lines.push(`    ${k.key.padEnd(24)} denied ${String(k.denied).padStart(6)}  admitted ${String(k.admitted).padStart(6)}`);
    }
  }
  return lines.join('\n');
}

/** {@link replay} of a trace file, read as a stream. */
export async function replayFile(file: string, o: Omit<ReplayOptions, 'csv' | 'file'>): Promise<PolicyReplay[]> {
  return replay({ ...o, file });
}

// ---------------------------------------------------------------------------------------------------------
// Two configs side by side (sluice replay --compare)
// ---------------------------------------------------------------------------------------------------------

/** One side's counts for a policy: checks admitted and denied, and the deny rate (denied / checks, 0 to 1). */
export interface SideCounts {
  admitted: number;
  denied: number;
  /** denied / (admitted + denied); 0 for an empty trace. */
  denyRate: number;
}

/** One policy under config A and config B; a side is null when that config has no such policy. */
export interface PolicyComparison {
  policy: string;
  a: SideCounts | null;
  b: SideCounts | null;
  /** B minus A (deny rate as a fraction: -0.125 is 12.5 points fewer denied); null unless both sides exist. */
  diff: SideCounts | null;
}

export interface CompareOptions extends Omit<ReplayOptions, 'policies' | 'only'> {
  /** Config A's and config B's policies. */
  a: ReadonlyMap<string, CompiledPolicy>;
  b: ReadonlyMap<string, CompiledPolicy>;
  /**
   * Policies to compare; each must exist in A or B. Default: every policy of A, then those only in B, that is
   * not only some other policy's guard.
   */
  only?: string[];
}

/**
 * Replays one trace under two policy sets, each exactly as {@link replay} does, and pairs the counts by
 * policy name.
 * @throws SluiceError UNKNOWN_POLICY for a name in `only` that neither set has; as {@link replay} otherwise.
 */
export async function replayCompare(o: CompareOptions): Promise<PolicyComparison[]> {
  const wanted = (m: ReadonlyMap<string, CompiledPolicy>): string[] => [...m.values()].filter((p) => !isOnlyGuard(p, m)).map((p) => p.name);
  const names = o.only ?? [...new Set([...wanted(o.a), ...wanted(o.b)])];
  for (const n of names) {
    if (!o.a.has(n) && !o.b.has(n)) throw unknownPolicy(n, '(in neither config)');
  }
  const side = async (policies: ReadonlyMap<string, CompiledPolicy>): Promise<Map<string, SideCounts>> => {
    const only = names.filter((n) => policies.has(n));
    const results = only.length === 0 ? [] : await replay({ ...o, policies, only });
    return new Map(results.map((r) => [r.policy, counts(r.admitted, r.denied)]));
  };
  const a = await side(o.a);
  const b = await side(o.b);
  return names.map((policy) => {
    const ca = a.get(policy) ?? null;
    const cb = b.get(policy) ?? null;
    const diff = ca && cb ? { admitted: cb.admitted - ca.admitted, denied: cb.denied - ca.denied, denyRate: cb.denyRate - ca.denyRate } : null;
    return { policy, a: ca, b: cb, diff };
  });
}

function counts(admitted: number, denied: number): SideCounts {
  const total = admitted + denied;
  return { admitted, denied, denyRate: total === 0 ? 0 : denied / total };
}

/** A comparison as an aligned table: A's and B's admitted, denied and deny rate per policy, and B − A. */
export function formatCompare(rows: PolicyComparison[], trace: string, fileA: string, fileB: string): string {
  const pct = (r: number): string => `${(100 * r).toFixed(1)}%`;
  const signed = (n: number, text: string): string => (n > 0 ? `+${text}` : text);
  const cells = (c: SideCounts | null): string[] => (c === null ? ['-', '-', '-'] : [String(c.admitted), String(c.denied), pct(c.denyRate)]);
  const header = ['policy', 'A admitted', 'A denied', 'A deny', 'B admitted', 'B denied', 'B deny', 'B-A admitted', 'B-A denied', 'B-A deny'];
  const table = rows.map((r) => [
    r.policy, ...cells(r.a), ...cells(r.b),
    ...(r.diff === null ? ['-', '-', '-']
      : [signed(r.diff.admitted, String(r.diff.admitted)), signed(r.diff.denied, String(r.diff.denied)),
        signed(r.diff.denyRate, `${(100 * r.diff.denyRate).toFixed(1)} pts`)]),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i].length)));
  const line = (row: string[]): string => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd();
  return [`replay of ${trace}`, `A: ${fileA}`, `B: ${fileB}`, '', line(header), ...table.map(line)].join('\n');
}
