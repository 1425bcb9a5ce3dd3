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
import { alternate, roundMain, startAll, startRoundChild, stopAll, type RoundSubject } from '../lib/ab.js';
import { isChildEntry, packageRoot } from '../lib/harness.js';
import { median, summary, timedRound } from '../lib/measure.js';
import type { Ctx, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);
const POLICY = 'per-client';

/** The shared access trace: ../shared/data/access-trace.csv beside the checkout, else the checkout's copy. */
function tracePath(root: string): string {
  const beside = join(root, '..', 'shared', 'data', 'access-trace.csv');
  return existsSync(beside) ? beside : join(root, 'test', 'fixtures', 'shared', 'data', 'access-trace.csv');
}

function configPath(root: string): string {
  return join(root, 'examples', 'trace-per-client.yaml');
}

interface Spec {
  impl: 'sluice' | 'map';
}

interface RoundQ {
  ms: number;
}

interface Result {
  rate: number;
  rows: number;
  admitted: number;
  denied: number;
  /** sluice: median ms of one replay() call on a one-row trace (limiter set-up and tear-down). */
  fixedMs?: number;
}

/** Set-up of a resident child: reads the trace and the config; each round replays it for about `ms`. */
async function child(s: Spec): Promise<RoundSubject<RoundQ, Result>> {
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
    // The fixed cost of a call: a trace of one row.
    const oneRow = csv.split('\n').slice(0, 2).join('\n') + '\n';
    let fixedMs: number | undefined;
    return {
      async round(q) {
        const r = await timedRound(step, q.ms);
        if (fixedMs === undefined) {
          const times: number[] = [];
          for (let i = 0; i < 20; i++) {
            const t0 = performance.now();
            await replay({ csv: oneRow, file, policies: cfg.policies, only: [POLICY], shards: 0 });
            times.push(performance.now() - t0);
          }
          fixedMs = median(times.sort((a, b) => a - b));
        }
        return { rate: r.rate, rows: admitted + denied, admitted, denied, fixedMs };
      },
    };
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
  return {
    async round(q) {
      const r = await timedRound(step, q.ms);
      return { rate: r.rate, rows: admitted + denied, admitted, denied };
    },
  };
}

if (isChildEntry(import.meta.url)) roundMain<Spec, RoundQ, Result>(child);

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
        `${t.rounds} rounds of ${t.roundMs} ms each, taken alternately after a ${t.warmupMs} ms warm-up round each, ` +
        'each subject a resident child process; median with the slowest and fastest round.',
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
    const children = await startAll(ctx, jobs, (j) => j.id,
      (j) => startRoundChild<RoundQ, Result>(FILE, { impl: j.impl } satisfies Spec, { setupTimeoutMs: 60_000 }), sec.notes);
    const results = await alternate(ctx, children, t.rounds, (x) => x.s.id, async (x, r, warmup) => {
      const res = await x.child.round({ ms: warmup ? t.warmupMs : t.roundMs }, 60_000 + 4 * t.roundMs);
      if (!warmup) ctx.progress(`${x.s.id}: ${x.s.subject} (round ${r + 1}/${t.rounds}): ${Math.round(res.rate)} rows/s`);
      return res;
    }, sec.notes);
    await stopAll(children);
    children.forEach((x, i) => {
      const runs = results[i];
      if (runs.length === 0) return;
      const r = runs[runs.length - 1];
      const rs = summary(runs.map((y) => y.rate));
      const info = [`${r.rows} rows: ${r.admitted} admitted, ${r.denied} denied`];
      if (r.fixedMs !== undefined) info.push(`${r.fixedMs.toFixed(1)} ms fixed cost per call`);
      sec.rows.push({
        id: x.s.id, case: '10k-row trace', subject: x.s.subject,
        values: { rate: rs.median }, spread: { rate: [rs.min, rs.max] },
        info: info.join('; '), extra: { rounds: runs.map((y) => y.rate), fixedMs: r.fixedMs },
      });
      counts.set(x.s.subject, `${r.admitted}/${r.denied}`);
    });
    if (counts.size === 2) {
      const [a, b] = [counts.get(SLUICE), counts.get(MAP)];
      sec.notes.push(a === b
        ? `Admitted/denied counts agree exactly (${a}): the kernel and the Map bucket implement the same integer token bucket.`
        : `MISMATCH: sluice admitted/denied ${a}, Map bucket ${b}. The kernel and the reference arithmetic disagree on this trace.`);
    }
    return [sec];
  },
};
