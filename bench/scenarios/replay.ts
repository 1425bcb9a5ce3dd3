/**
 * Replay scenario: rows per second through `replay()` (src/cli/replay.ts, what `sluice replay` runs) for the
 * shared access trace with examples/trace-per-client.yaml, shards 0; against the same trace parsed the same
 * way (csv-parse) and decided by the plain JS Map bucket. Both use the trace's timestamps as the clock, so
 * their admitted/denied counts must agree exactly: the run checks that.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parse } from 'csv-parse/sync';
import { replay } from '../../src/cli/replay.js';
import { loadConfigFile } from '../../src/config/load.js';
import { MapBucket } from '../baselines/map-bucket.js';
import { isChildEntry, jobMain, packageRoot, runJob } from '../lib/harness.js';
import { median, rates, type Rates, type Timing } from '../lib/measure.js';
import type { Ctx, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);
const POLICY = 'per-client';

function tracePath(root: string): string {
  return join(root, '..', 'shared', 'data', 'access-trace.csv');
}

function configPath(root: string): string {
  return join(root, 'examples', 'trace-per-client.yaml');
}

interface Spec {
  impl: 'sluice' | 'map';
  timing: Timing;
}

interface Result {
  rates: Rates;
  rows: number;
  admitted: number;
  denied: number;
  /** sluice: median ms of one replay() call on a one-row trace (limiter set-up and tear-down). */
  fixedMs?: number;
}

async function child(s: Spec): Promise<Result> {
  const root = packageRoot();
  const file = tracePath(root);
  const csv = await readFile(file, 'utf8');
  const cfg = await loadConfigFile(configPath(root));
  const policy = cfg.policies.get(POLICY);
  if (!policy) throw new Error(`${configPath(root)} has no policy ${POLICY}`);
  let admitted = 0, denied = 0;

  if (s.impl === 'sluice') {
    const step = async (): Promise<number> => {
      const [r] = await replay({ csv, file, policies: cfg.policies, only: [POLICY], shards: 0 });
      admitted = r.admitted;
      denied = r.denied;
      return r.admitted + r.denied;
    };
    const r = await rates(step, s.timing);
    // The fixed cost of a call: a trace of one row.
    const oneRow = csv.split('\n').slice(0, 2).join('\n') + '\n';
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      await replay({ csv: oneRow, file, policies: cfg.policies, only: [POLICY], shards: 0 });
      times.push(performance.now() - t0);
    }
    return { rates: r, rows: admitted + denied, admitted, denied, fixedMs: median(times.sort((a, b) => a - b)) };
  }

  const limit = policy.limits[0];
  const column = policy.descriptors[0]?.name ?? 'client';
  const step = (): number => {
    const records = parse(csv, { columns: true, skip_empty_lines: true, trim: true }) as Record<string, string>[];
    const mb = new MapBucket(limit.limit, limit.periodMs, limit.burst);
    let a = 0;
    for (const rec of records) if (mb.take(rec[column], 1, Number(rec.ts_ms)) >= 0) a++;
    admitted = a;
    denied = records.length - a;
    return records.length;
  };
  const r = await rates(step, s.timing);
  return { rates: r, rows: admitted + denied, admitted, denied };
}

if (isChildEntry(import.meta.url)) jobMain<Spec, Result>(child);

const SLUICE = 'sluice replay(), shards 0';
const MAP = 'csv-parse + Map bucket';

export const replayScenario: Scenario = {
  name: 'replay',
  summary: 'rows/s of replay() on ../shared/data/access-trace.csv with examples/trace-per-client.yaml vs a Map bucket',
  async run(ctx: Ctx): Promise<Section[]> {
    const t = ctx.timing;
    const sec: Section = {
      scenario: 'replay',
      id: 'replay',
      title: 'Replay: the shared access trace, per-client token bucket',
      method: `replay() from src/cli/replay.ts (CSV parse, one limiter per call, rows sharing a timestamp in one ` +
        `batch, the trace's timestamps as the clock) on ../shared/data/access-trace.csv with policy ${POLICY} of ` +
        `examples/trace-per-client.yaml, shards 0; baseline: the same CSV parse and the Map bucket, row by row. ` +
        `Median of ${t.rounds} rounds of ${t.roundMs} ms after ${t.warmupMs} ms of warm-up, each in a fresh process.`,
      metrics: [{ key: 'rate', label: 'rows/s', higherIsBetter: true }],
      baselines: [{ label: 'Map', subject: MAP }],
      rows: [],
      notes: [],
    };
    const jobs = [
      { id: 'replay/sluice-s0', subject: SLUICE, impl: 'sluice' as const },
      { id: 'replay/map-bucket', subject: MAP, impl: 'map' as const },
    ].filter((j) => ctx.want(j.id));
    if (jobs.length === 0) return [];
    if (!existsSync(tracePath(ctx.root))) {
      sec.notes.push(`${tracePath(ctx.root)} not found: replay skipped.`);
      return [sec];
    }
    const counts = new Map<string, string>();
    for (const j of jobs) {
      ctx.progress(`${j.id}: ${j.subject}`);
      try {
        const r = await runJob<Result>(FILE, { impl: j.impl, timing: t } satisfies Spec, {
          timeoutMs: 60_000 + t.warmupMs + 4 * t.rounds * t.roundMs,
        });
        const info = [`${r.rows} rows: ${r.admitted} admitted, ${r.denied} denied`];
        if (r.fixedMs !== undefined) info.push(`${r.fixedMs.toFixed(1)} ms fixed cost per call`);
        sec.rows.push({
          id: j.id, case: '10k-row trace', subject: j.subject,
          values: { rate: r.rates.median }, spread: { rate: [r.rates.min, r.rates.max] },
          info: info.join('; '), extra: { rounds: r.rates.rounds, ...r, rates: undefined },
        });
        counts.set(j.subject, `${r.admitted}/${r.denied}`);
        ctx.progress(`  ${Math.round(r.rates.median)} rows/s (${r.admitted} admitted, ${r.denied} denied)`);
      } catch (e) {
        sec.notes.push(`${j.id} failed: ${(e as Error).message.split('\n')[0]}`);
        ctx.progress(`  FAILED: ${(e as Error).message}`);
      }
    }
    if (counts.size === 2) {
      const [a, b] = [counts.get(SLUICE), counts.get(MAP)];
      sec.notes.push(a === b
        ? `Admitted/denied counts agree exactly (${a}): the kernel and the Map bucket implement the same integer token bucket.`
        : `MISMATCH: sluice admitted/denied ${a}, Map bucket ${b}. The kernel and the reference arithmetic disagree on this trace.`);
    }
    return [sec];
  },
};
