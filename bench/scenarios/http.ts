/**
 * HTTP scenario: `GET /v1/check?policy=free&key=k<n>` (n uniform in [0, 10,000), or one hot key) against
 * sluice (built-in default config, shards 0 and 1), a bare uWS server answering a fixed JSON (the ceiling),
 * uWS + rate-limiter-flexible (the server a Node team would hand-build) and node:http + rate-limiter-flexible
 * (the default Node answer). Three sections:
 * - throughput under autocannon (closed loop, req/s, p50/p99, server CPU per request);
 * - throughput under wrk, when installed (the ceiling autocannon cannot reach on 2 cores);
 * - latency at fixed request rates under autocannon (its programmatic API, `overallRate`), p50/p99/p99.9 from
 *   an hdr-histogram of every response's time in µs.
 * Every server is a resident child process started once for the whole scenario; the load runs of a case go to
 * the servers alternately (A, B, C, A, B, C… rotated each round), so the ratios compare runs taken minutes, not
 * tens of minutes, apart. autocannon runs in the runner process, wrk as its own process (the load
 * generators: http-load.ts). This file is also the sluice server child.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLimiter } from '../../src/index.js';
import { defaultConfig } from '../../src/config/default.js';
import { startServer } from '../../src/server/http.js';
import { alternate } from '../lib/ab.js';
import { isChildEntry, serverMain, startServerChild, type ServerChild } from '../lib/harness.js';
import { median } from '../lib/measure.js';
import type { Ctx, Metric, Row, Scenario, Section } from '../lib/types.js';
import {
  autocannonLoad, buildFixedRate, correctedLoad, fixedRateLoad, probe, STAGGER, wrkLoad, wrkVersion, type LoadResult,
} from './http-load.js';


const FILE = fileURLToPath(import.meta.url);
const BARE_UWS = fileURLToPath(new URL('../baselines/bare-uws.js', import.meta.url));
const NODE_RLF = fileURLToPath(new URL('../baselines/node-http-rlf.js', import.meta.url));
const UWS_RLF = fileURLToPath(new URL('../baselines/uws-rlf.js', import.meta.url));

/** Keys the load generators draw from. */
const KEYS = 10_000;

// ---------------------------------------------------------------------------------------------- child

interface SluiceSpec {
  shards: number;
  /** HTTP front threads (src/server/threads.ts). Default 1. */
  threads?: number;
  /** Default 0: any free port. */
  port?: number;
  /**
   * false: no per-policy activity (no rates, near-limit counts or hot-key sketch) and no status page. Default:
   * both on, as `sluice serve` runs, with `/v1/status` built every 2 s as an open status page polls it.
   */
  activity?: boolean;
}

if (isChildEntry(import.meta.url)) {
  serverMain<SluiceSpec>(async (spec) => {
    const cfg = defaultConfig();
    const limiter = await createLimiter({ policies: cfg.policies, shards: spec.shards, maxKeys: cfg.engine.maxKeys });
    const on = spec.activity !== false;
    const srv = await startServer({
      limiter, host: '127.0.0.1', port: spec.port ?? 0, statusPage: on, threads: spec.threads, ...(on ? {} : { activity: false as const }),
    });
    const poll = on ? setInterval(() => void srv.status.statusJson(), 2000) : null;
    return {
      port: srv.port,
      async close() {
        if (poll !== null) clearInterval(poll);
        await srv.close();
        await limiter.close();
      },
    };
  });
}

// ---------------------------------------------------------------------------------------------- runner

const SLUICE_S0 = 'sluice, shards 0';
const SLUICE_S1 = 'sluice, shards 1';
const SLUICE_S1_T2 = 'sluice, shards 1, 2 front threads';
const SLUICE_PLAIN = 'sluice, shards 0, no status page / hot keys';
const BARE = 'bare uWS (fixed JSON)';
const UWSRLF = 'uWS + rlf';
const NODE = 'node:http + rlf';

interface Target {
  tag: string;
  subject: string;
  file: string;
  spec: unknown;
}

const TARGETS: Target[] = [
  { tag: 'sluice-s0', subject: SLUICE_S0, file: FILE, spec: { shards: 0 } satisfies SluiceSpec },
  { tag: 'sluice-s1', subject: SLUICE_S1, file: FILE, spec: { shards: 1 } satisfies SluiceSpec },
  { tag: 'sluice-s1-t2', subject: SLUICE_S1_T2, file: FILE, spec: { shards: 1, threads: 2 } satisfies SluiceSpec },
  { tag: 'sluice-s0-plain', subject: SLUICE_PLAIN, file: FILE, spec: { shards: 0, activity: false } satisfies SluiceSpec },
  { tag: 'bare-uws', subject: BARE, file: BARE_UWS, spec: {} },
  { tag: 'uws-rlf', subject: UWSRLF, file: UWS_RLF, spec: {} },
  { tag: 'node-rlf', subject: NODE, file: NODE_RLF, spec: {} },
];

const BASELINES = [
  { label: 'no status', subject: SLUICE_PLAIN },
  { label: 'bare uWS', subject: BARE },
  { label: 'uWS+rlf', subject: UWSRLF },
  { label: 'node+rlf', subject: NODE },
];

/** The columns of the two fixed-rate latency sections, and those with ratio columns. */
const LATENCY_METRICS: Metric[] = [
  { key: 'rps', label: 'req/s done', higherIsBetter: true },
  { key: 'p50', label: 'p50 ms', higherIsBetter: false, digits: 3 },
  { key: 'p99', label: 'p99 ms', higherIsBetter: false, digits: 3 },
  { key: 'p999', label: 'p99.9 ms', higherIsBetter: false, digits: 3 },
  { key: 'cpu', label: 'server CPU µs/req', higherIsBetter: false },
];
const LATENCY_RATIOS = ['p50', 'p99', 'p999', 'cpu'];

const METRICS = [
  { key: 'rps', label: 'req/s', higherIsBetter: true },
  { key: 'cpu', label: 'server CPU µs/req', higherIsBetter: false },
  { key: 'p50', label: 'p50 ms', higherIsBetter: false },
  { key: 'p99', label: 'p99 ms', higherIsBetter: false },
];

/** A row from the alternated runs of one target: medians, with the req/s range over the runs. */
function row(id: string, kase: string, subject: string, runs: LoadResult[], inFlight: number): Row {
  const med = (f: (r: LoadResult) => number): number => median(runs.map(f).sort((a, b) => a - b));
  const rps = runs.map((r) => r.rps);
  const info = [`server ${med((r) => r.serverCores).toFixed(2)} cores`];
  if (runs.every((r) => r.clientCores !== null)) info.push(`client ${med((r) => r.clientCores!).toFixed(2)} cores`);
  const errors = runs.reduce((a, r) => a + r.errors, 0);
  const non2xx = runs.reduce((a, r) => a + r.non2xx, 0);
  if (errors > 0) info.push(`${errors} errors`);
  if (non2xx > 0) info.push(`${non2xx} non-2xx`);
  // autocannon reconnects silently when the server closes a connection: compare requests written to answers.
  const sent = runs.reduce((a, r) => a + (r.sent ?? 0), 0);
  const answered = runs.reduce((a, r) => a + r.responses, 0);
  if (runs.every((r) => r.sent !== null) && sent - answered > inFlight * runs.length) {
    info.push(`${((100 * (sent - answered)) / sent).toFixed(0)}% of ${sent} requests unanswered (connections closed)`);
  }
  if (runs.every((r) => r.max !== undefined)) info.push(`max ${Math.max(...runs.map((r) => r.max!)).toFixed(1)} ms`);
  const values: Record<string, number> = { rps: med((r) => r.rps), p50: med((r) => r.p50), p99: med((r) => r.p99), cpu: med((r) => r.cpu) };
  if (runs.every((r) => r.p999 !== undefined)) values.p999 = med((r) => r.p999!);
  return {
    id, case: kase, subject, values,
    spread: runs.length > 1 ? { rps: [Math.min(...rps), Math.max(...rps)] } : undefined,
    info: info.join(', '),
    extra: { runs },
  };
}

/** Key sets of every section. */
const KEYSETS = [
  { tag: '10k', label: '10k keys', keys: KEYS },
  { tag: 'hot', label: '1 hot key', keys: 1 },
];

interface Job {
  id: string;
  kase: string;
  target: Target;
}

/**
 * Runs one case's jobs alternately against the resident servers (a warm-up run each first) and adds a row per
 * target. `load` does one run.
 */
async function runCase(ctx: Ctx, sec: Section, servers: Map<string, ServerChild>, jobs: Job[], reps: number,
  inFlight: number, describe: string, load: (srv: ServerChild, warmup: boolean) => Promise<LoadResult>,
  warmed: Set<string>): Promise<void> {
  const live = jobs.filter((j) => servers.has(j.target.tag));
  // A server already loaded by an earlier case needs no warm-up run.
  const warm = live.some((j) => !warmed.has(j.target.tag));
  for (const j of live) warmed.add(j.target.tag);
  const results = await alternate(ctx, live, reps, (j) => j.id, async (j, r, warmup) => {
    ctx.progress(`${j.id}: ${j.target.subject}, ${describe}${warmup ? ' (warm-up)' : ` (round ${r + 1}/${reps})`}`);
    const res = await load(servers.get(j.target.tag)!, warmup);
    if (!warmup) {
      ctx.progress(`  ${Math.round(res.rps)} req/s, p50 ${res.p50.toFixed(2)} ms, p99 ${res.p99.toFixed(2)} ms` +
        (res.p999 !== undefined ? `, p99.9 ${res.p999.toFixed(2)} ms` : '') + `, ${res.cpu.toFixed(1)} µs CPU/req`);
    }
    return res;
  }, sec.notes, warm);
  live.forEach((j, i) => {
    if (results[i].length > 0) sec.rows.push(row(j.id, j.kase, j.target.subject, results[i], inFlight));
  });
}

export const http: Scenario = {
  name: 'http',
  summary: 'GET /v1/check: sluice (shards 0, 1) vs bare uWS, uWS + rlf, node:http + rlf; req/s and CPU/req (autocannon, wrk), ' +
    'p50/p99/p99.9 at fixed rates (autocannon)',
  async run(ctx: Ctx): Promise<Section[]> {
    const q = ctx.quick;
    const seconds = q ? 1 : 4;
    const reps = q ? 2 : 3;
    const warmup = q ? 0.5 : 1;

    // Which jobs are wanted decides which servers to start.
    // --quick: wrk gives the throughput figures, so the closed-loop autocannon runs are left out unless wrk is
    // missing (then they are the only throughput figures).
    const haveWrk = wrkVersion() !== null;
    const acCases = q && haveWrk ? [] : [
      { tag: 'p1', label: 'c100, pipelining 1', connections: 100, pipelining: 1 },
      ...(q ? [] : [{ tag: 'p10', label: 'c50, pipelining 10', connections: 50, pipelining: 10 }]),
    ];
    const acJobs = acCases.map((c) => ({
      c, jobs: TARGETS.map((t) => ({ id: `http/autocannon-${c.tag}/${t.tag}`, kase: c.label, target: t })).filter((j) => ctx.want(j.id)),
    }));
    // both key sets in quick runs too: the HTTP targets (issue #17) are for 10k keys and for one hot key; the
    // front-thread subjects (1 and 2 front threads, shards 1) on 10k keys only
    const wrkJobs = KEYSETS.map((k, ki) => ({
      k, jobs: TARGETS.filter((t) => !(ki > 0 && t.tag.startsWith('sluice-s1')))
        .map((t) => ({ id: `http/wrk-${k.tag}/${t.tag}`, kase: `wrk -t1 -c100, ${k.label}`, target: t }))
        .filter((j) => ctx.want(j.id)),
    }));
    const rates = q ? [5_000] : [2_000, 8_000];
    // Latency: sluice shards 0 against the two uWS baselines; node:http + rlf too in a full run.
    const latTargets = TARGETS.filter((t) => !t.tag.startsWith('sluice-s1') && t.tag !== 'sluice-s0-plain' && !(q && t.tag === 'node-rlf'));
    const latJobs = KEYSETS.flatMap((k) => rates.map((rate) => ({
      k, rate,
      jobs: latTargets.map((t) => ({
        id: `http/latency-${k.tag}-${rate / 1000}k/${t.tag}`, kase: `${rate.toLocaleString('en')} req/s, ${k.label}`, target: t,
      })).filter((j) => ctx.want(j.id)),
    })));
    // Corrected latency (issue #17): sluice shards 0 and bare uWS at half of sluice's own wrk peak of the run.
    const coJobs = KEYSETS.map((k) => ({
      k,
      jobs: TARGETS.filter((t) => t.tag === 'sluice-s0' || t.tag === 'bare-uws')
        .map((t) => ({ id: `http/co-${k.tag}/${t.tag}`, kase: `half of sluice's peak, ${k.label}`, target: t }))
        .filter((j) => ctx.want(j.id)),
    }));
    const wantedTags = new Set([...acJobs, ...wrkJobs, ...latJobs, ...coJobs].flatMap((x) => x.jobs.map((j) => j.target.tag)));
    if (wantedTags.size === 0) return [];

    const notes: string[] = [];
    const warmed = new Set<string>();
    const servers = new Map<string, ServerChild>();
    for (const t of TARGETS) {
      if (!wantedTags.has(t.tag)) continue;
      try {
        const srv = await startServerChild(t.file, t.spec);
        servers.set(t.tag, srv);
        await probe(srv.port);
      } catch (e) {
        notes.push(`${t.tag} failed: could not start: ${(e as Error).message.split('\n')[0]}`);
        ctx.progress(`  FAILED: ${t.subject}: ${(e as Error).message}`);
      }
    }
    ctx.progress(`http: ${servers.size} servers up (${[...servers.keys()].join(', ')})`);
    const sections: Section[] = [];
    try {
      const ac: Section = {
        scenario: 'http',
        id: 'http-autocannon',
        title: 'HTTP: GET /v1/check, closed loop under autocannon',
        method: `autocannon 9 in the runner process against resident server children (started once for the ` +
          `whole HTTP scenario), key drawn uniformly from ${KEYS.toLocaleString('en')} per request (setupRequest); ` +
          `${seconds} s per run, ${reps} runs per target taken alternately (A, B, C…, order rotated each round) after ` +
          `a ${warmup} s warm-up run each; medians (req/s range in parentheses). Latency percentiles from every ` +
          `response's time (µs resolution). Server CPU = the server process's user+system time (all threads) ÷ responses.`,
        metrics: METRICS,
        baselines: BASELINES,
        ratioMetrics: ['rps', 'cpu'],
        rows: [],
        notes: [...notes],
      };
      for (const { c, jobs } of acJobs) {
        if (jobs.length === 0) continue;
        await runCase(ctx, ac, servers, jobs, reps, c.connections * c.pipelining, `autocannon ${c.label}`,
          (srv, w) => autocannonLoad(srv, c.connections, c.pipelining, w ? warmup : seconds, KEYS), warmed);
      }
      if (ac.rows.length > 0 || acJobs.some((x) => x.jobs.length > 0)) sections.push(ac);

      const wrk: Section = {
        scenario: 'http',
        id: 'http-wrk',
        title: 'HTTP: GET /v1/check, closed loop under wrk (the ceiling autocannon cannot reach)',
        method: `wrk -t1 -c100 -d${seconds}s --latency, 10k keys: -s bench/wrk/random-key.lua (a random key of ` +
          `${KEYS.toLocaleString('en')} per request); 1 hot key: the plain URL ?policy=free&key=hot. ` +
          `${reps} runs per target taken alternately, resident servers (warmed by the autocannon runs, else by a 1 s run), medians. ` +
          'Latency percentiles are wrk\'s. Server CPU as above.',
        metrics: METRICS,
        baselines: BASELINES,
        ratioMetrics: ['rps', 'cpu'],
        rows: [],
        notes: [],
      };
      if (wrkJobs.some((x) => x.jobs.length > 0)) {
        const version = wrkVersion();
        const lua = join(ctx.root, 'bench', 'wrk', 'random-key.lua');
        if (version === null) {
          wrk.notes.push('wrk is not installed: wrk runs skipped (install it, e.g. `apt-get install wrk`, to measure the ceiling).');
          ctx.progress('http/wrk: wrk not installed, skipped');
        } else if (!existsSync(lua)) {
          wrk.notes.push(`${lua} is missing: wrk runs skipped.`);
        } else {
          for (const { k, jobs } of wrkJobs) {
            if (jobs.length === 0) continue;
            await runCase(ctx, wrk, servers, jobs, reps, 100, `wrk -t1 -c100 -d${seconds}s, ${k.label}`,
              (srv, w) => wrkLoad(srv, w ? 1 : seconds, lua, k.keys), warmed);
          }
        }
        sections.push(wrk);
      }

      const latConnections = 20;
      const latSeconds = q ? 1 : 4;
      const lat: Section = {
        scenario: 'http',
        id: 'http-latency',
        title: 'HTTP: latency at fixed request rates (autocannon, hdr-histogram)',
        method: `autocannon 9's programmatic API with overallRate (fixed rate), ${latConnections} connections, ` +
          `pipelining 1, run as ${STAGGER} instances started ${1000 / STAGGER} ms apart (autocannon's rate is a quota ` +
          'per connection per second, sent as a burst when its 1 s timer resets; staggering makes 5 smaller bursts ' +
          `a second). ${latSeconds} s per run, ${reps} runs per target alternately, resident servers (already warm). ` +
          'p50/p99/p99.9: every response\'s time (autocannon measures it with process.hrtime) ' +
          'recorded in µs into one hdr-histogram-js histogram per run (3 significant digits; autocannon\'s own ' +
          'histogram keeps whole ms), median over runs. Not corrected for coordinated omission. "req/s" is what was ' +
          'achieved (responses ÷ run time), to show the rate was met.',
        metrics: LATENCY_METRICS,
        baselines: [BASELINES[1], BASELINES[2]],
        ratioMetrics: LATENCY_RATIOS,
        rows: [],
        notes: [],
      };
      for (const { k, rate, jobs } of latJobs) {
        if (jobs.length === 0) continue;
        await runCase(ctx, lat, servers, jobs, reps, latConnections, `${rate} req/s, ${k.label}, ${latSeconds} s`,
          (srv, w) => fixedRateLoad(srv, rate, latConnections, w ? 1 : latSeconds, k.keys), warmed);
      }
      if (latJobs.some((x) => x.jobs.length > 0)) sections.push(lat);

      const coConnections = 50;
      const coSeconds = q ? 2 : 5;
      const co: Section = {
        scenario: 'http',
        id: 'http-corrected',
        title: 'HTTP: latency at half of sluice\'s peak rate, corrected for coordinated omission (bench/latency/fixed-rate.c)',
        method: `bench/latency/fixed-rate.c (C, epoll, the wrk2 model): ${coConnections} connections, one request in flight ` +
          'each; connection c sends its k-th request at the intended time t0 + (k·C + c) ÷ rate and every latency is ' +
          'taken from that intended time, so a stall is charged for every request it held back. The rate is half of ' +
          'sluice shards 0\'s median wrk req/s for the same key set in this run (20,000 req/s when wrk did not run). ' +
          `${coSeconds} s per run after 0.2 s unrecorded, ${reps} runs per target alternately; every latency kept and ` +
          'sorted (exact percentiles), medians over runs.',
        metrics: LATENCY_METRICS,
        baselines: [BASELINES[1]],
        ratioMetrics: LATENCY_RATIOS,
        rows: [],
        notes: [],
      };
      if (coJobs.some((x) => x.jobs.length > 0)) {
        const bin = buildFixedRate(ctx.root);
        if (bin === null) co.notes.push('no C compiler (cc): the corrected fixed-rate runs are skipped.');
        else {
          for (const { k, jobs } of coJobs) {
            if (jobs.length === 0) continue;
            const peak = wrk.rows.find((r) => r.id === `http/wrk-${k.tag}/sluice-s0`)?.values.rps;
            const rate = Math.round((peak !== undefined && Number.isFinite(peak) ? peak / 2 : 20_000) / 100) * 100;
            co.notes.push(`${k.label}: ${rate.toLocaleString('en')} req/s (${peak !== undefined ? 'half of sluice shards 0\'s wrk median' : 'no wrk figure'}).`);
            for (const j of jobs) j.kase = `${rate.toLocaleString('en')} req/s, ${k.label}`;
            await runCase(ctx, co, servers, jobs, reps, coConnections, `corrected ${rate} req/s, ${k.label}, ${coSeconds} s`,
              (srv, w) => correctedLoad(bin, srv, rate, coConnections, w ? 1 : coSeconds, k.keys), warmed);
          }
        }
        sections.push(co);
      }
    } finally {
      await Promise.all([...servers.values()].map((s) => s.stop()));
    }
    return sections.filter((s) => s.rows.length > 0 || s.notes.length > 0);
  },
};
