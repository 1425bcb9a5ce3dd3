/**
 * The bench runner: `npm run bench [-- --quick] [filter...]`.
 *
 * Runs the scenarios (each measurement in its own child process), prints progress to stderr and the tables
 * to stdout, and writes bench/results/<ISO date>.json and .md. A filter keeps the jobs whose id contains it
 * (case-insensitive), e.g. `engine`, `1M`, `http/wrk`, `replay`; `--list` prints the job ids' prefixes.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { packageRoot } from './lib/harness.js';
import { cpuTicks, stealPercent } from './lib/host.js';
import { FULL_TIMING, QUICK_TIMING } from './lib/measure.js';
import { computeRatios, markdown, table, type RunMeta } from './lib/report.js';
import { checkTargets, targetsMarkdown } from './lib/targets.js';
import type { Ctx, Scenario, Section } from './lib/types.js';
import { engine } from './scenarios/engine.js';
import { http } from './scenarios/http.js';
import { wrkVersion } from './scenarios/http-load.js';
import { replayScenario } from './scenarios/replay.js';
import { wsScenario } from './scenarios/ws.js';
import { redisScenario } from './scenarios/redis.js';
import { grpcScenario } from './scenarios/grpc.js';
import { leaseScenario } from './scenarios/lease.js';

const SCENARIOS: Scenario[] = [engine, http, wsScenario, redisScenario, leaseScenario, replayScenario, grpcScenario];

function usage(): string {
  return [
    'usage: npm run bench [-- [--quick] [--list] [filter...]]',
    '  --quick   shorter and fewer rounds (under 3 minutes here): a smoke run',
    '  --list    print the scenarios and exit',
    '  filter    keep jobs whose id contains it, e.g. engine, 1M, engine/memory, http/wrk, http/latency, ws/, redis/, lease/, replay, grpc/',
    '',
    ...SCENARIOS.map((s) => `  ${s.name.padEnd(8)} ${s.summary}`),
  ].join('\n');
}

function gitCommit(root: string): string | null {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root, encoding: 'utf8' }).trim();
    return dirty === '' ? head : `${head} (uncommitted changes)`;
  } catch {
    return null;
  }
}

async function main(argv: string[]): Promise<number> {
  const quick = argv.includes('--quick');
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage() + '\n');
    return 0;
  }
  if (argv.includes('--list')) {
    process.stdout.write(usage() + '\n');
    return 0;
  }
  const unknown = argv.filter((a) => a.startsWith('-') && a !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`bench: unknown option ${unknown[0]}\n${usage()}\n`);
    return 2;
  }
  const filters = argv.filter((a) => !a.startsWith('-')).map((f) => f.toLowerCase());
  const root = packageRoot();
  const started = performance.now();
  const date = new Date().toISOString();
  const selected = new Set<string>();
  const ctx: Ctx = {
    quick,
    timing: quick ? QUICK_TIMING : FULL_TIMING,
    root,
    want(id: string): boolean {
      const ok = filters.length === 0 || filters.some((f) => id.toLowerCase().includes(f));
      if (ok) selected.add(id);
      return ok;
    },
    progress(msg: string): void {
      const s = ((performance.now() - started) / 1000).toFixed(0).padStart(4);
      process.stderr.write(`[${s}s] ${msg}\n`);
    },
  };
  const meta: RunMeta = {
    date,
    mode: quick ? 'quick' : 'full',
    filters,
    node: process.versions.node,
    v8: process.versions.v8,
    platform: `${process.platform} ${process.arch}`,
    cpus: cpus()[0]?.model.trim() ?? 'unknown CPU',
    cores: cpus().length,
    loadavgStart: loadavg(),
    wrk: wrkVersion(),
    commit: gitCommit(root),
  };
  ctx.progress(`sluice bench (${meta.mode}), Node ${meta.node}, ${meta.cores} cores, load ${meta.loadavgStart.map((l) => l.toFixed(2)).join(' ')}`);

  // the hypervisor's steal over the run (a shared host's figures move with it)
  const ticks0 = cpuTicks();
  const sections: Section[] = [];
  for (const sc of SCENARIOS) {
    const got = await sc.run(ctx);
    for (const s of got) {
      computeRatios(s);
      sections.push(s);
      process.stdout.write(`\n## ${s.title}\n\n${s.rows.length > 0 ? table(s) + '\n' : ''}`);
      for (const n of s.notes) process.stdout.write(`- ${n}\n`);
    }
  }
  if (selected.size === 0) {
    process.stderr.write(`bench: no job matches ${filters.join(' ')}\n${usage()}\n`);
    return 2;
  }
  meta.durationMs = performance.now() - started;
  meta.loadavgEnd = loadavg();
  meta.stealPercent = stealPercent(ticks0, cpuTicks());

  const dir = join(root, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const stem = date.replace(/:/g, '-').replace(/\.\d+Z$/, 'Z') + (quick ? '-quick' : '');
  // The targets whose rows this run measured (a filtered run checks only those).
  const targetLines = checkTargets(sections).filter((t) => t.verdict !== '–');
  const targets = targetLines.length > 0 ? targetsMarkdown(targetLines) : undefined;
  if (targets) process.stdout.write(`\n## Targets\n\n${targets}\n`);
  writeFileSync(join(dir, `${stem}.json`), JSON.stringify({ meta, targets: targetLines, sections }, null, 2) + '\n');
  writeFileSync(join(dir, `${stem}.md`), markdown(meta, sections, targets));
  ctx.progress(`done in ${(meta.durationMs / 1000).toFixed(0)} s; wrote bench/results/${stem}.json and .md`);
  return sections.some((s) => s.notes.some((n) => / failed: /.test(n))) ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`bench: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  },
);
