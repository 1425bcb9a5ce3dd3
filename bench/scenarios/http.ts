/**
 * HTTP scenario: requests/s, latency p50/p99 and server CPU per request for `GET /v1/check?policy=free&key=k<n>`
 * (n uniform in [0, 10,000)) against sluice (built-in default config, shards 0 and 1), a bare uWS server
 * answering a fixed JSON and node:http + rate-limiter-flexible. Each server runs in its own child process
 * (a fresh one per run); autocannon runs in the runner process, wrk (if installed) as its own process.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { createLimiter } from '../../src/index.js';
import { defaultConfig } from '../../src/config/default.js';
import { startServer } from '../../src/server/http.js';
import { isChildEntry, serverMain, startServerChild, type Cpu } from '../lib/harness.js';
import { median, percentile, xorshift32 } from '../lib/measure.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);
const BARE_UWS = fileURLToPath(new URL('../baselines/bare-uws.js', import.meta.url));
const NODE_RLF = fileURLToPath(new URL('../baselines/node-http-rlf.js', import.meta.url));

/** Keys the load generators draw from. */
const KEYS = 10_000;

// ---------------------------------------------------------------------------------------------- child

interface SluiceSpec {
  shards: number;
  /** Default 0: any free port. */
  port?: number;
}

if (isChildEntry(import.meta.url)) {
  serverMain<SluiceSpec>(async (spec) => {
    const cfg = defaultConfig();
    const limiter = await createLimiter({ policies: cfg.policies, shards: spec.shards, maxKeys: cfg.engine.maxKeys });
    const srv = await startServer({ limiter, host: '127.0.0.1', port: spec.port ?? 0 });
    return {
      port: srv.port,
      async close() {
        await srv.close();
        await limiter.close();
      },
    };
  });
}

// ---------------------------------------------------------------------------------------------- runner

const SLUICE_S0 = 'sluice, shards 0';
const SLUICE_S1 = 'sluice, shards 1';
const BARE = 'bare uWS (fixed JSON)';
const NODE = 'node:http + rlf';

const TARGETS: Array<{ tag: string; subject: string; file: string; spec: unknown }> = [
  { tag: 'sluice-s0', subject: SLUICE_S0, file: FILE, spec: { shards: 0 } satisfies SluiceSpec },
  { tag: 'sluice-s1', subject: SLUICE_S1, file: FILE, spec: { shards: 1 } satisfies SluiceSpec },
  { tag: 'bare-uws', subject: BARE, file: BARE_UWS, spec: {} },
  { tag: 'node-rlf', subject: NODE, file: NODE_RLF, spec: {} },
];

const BASELINES = [{ label: 'bare uWS', subject: BARE }, { label: 'node+rlf', subject: NODE }];

const METRICS = [
  { key: 'rps', label: 'req/s', higherIsBetter: true },
  { key: 'p50', label: 'p50 ms', higherIsBetter: false },
  { key: 'p99', label: 'p99 ms', higherIsBetter: false },
  { key: 'cpu', label: 'server CPU µs/req', higherIsBetter: false },
];

interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  /** Server CPU µs per response. */
  cpu: number;
  responses: number;
  /** Server and client CPU, in cores (CPU seconds per wall second). */
  serverCores: number;
  clientCores: number | null;
  errors: number;
  non2xx: number;
  /** Requests written by the client (autocannon only): far above responses means the server dropped connections. */
  sent: number | null;
}

/** The wrk binary's version line, or null when wrk is not installed. */
export function wrkVersion(): string | null {
  const r = spawnSync('wrk', ['-v'], { encoding: 'utf8', timeout: 5_000 });
  if (r.error) return null;
  const m = /wrk\s+(\S+)/.exec(`${r.stdout}${r.stderr}`);
  return m ? m[1] : 'unknown version';
}

function cpuMicros(a: Cpu, b: Cpu): number {
  return b.user - a.user + (b.system - a.system);
}

/** Checks one request before loading a server: status 200 and a decision-shaped body. */
async function probe(port: number): Promise<void> {
  const r = await fetch(`http://127.0.0.1:${port}/v1/check?policy=free&key=k1`, { signal: AbortSignal.timeout(5_000) });
  const body = await r.text();
  if (r.status !== 200 || !body.includes('"allowed"')) throw new Error(`probe: HTTP ${r.status} ${body.slice(0, 200)}`);
}

function runAutocannon(port: number, connections: number, pipelining: number, seconds: number, record: boolean): Promise<{
  responses: number; wallMs: number; latencies: Float64Array; errors: number; non2xx: number; clientCpu: number; sent: number;
}> {
  const cap = 1 << 23;
  const latencies = new Float64Array(record ? cap : 0);
  let n = 0;
  const next = xorshift32(pipelining * 7919 + connections);
  return new Promise((resolve, reject) => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const guard = setTimeout(() => inst.stop(), (seconds + 10) * 1000);
    const inst = autocannon({
      url: `http://127.0.0.1:${port}`,
      connections,
      pipelining,
      duration: seconds,
      timeout: 10,
      requests: [{
        method: 'GET',
        path: '/v1/check?policy=free&key=k0',
        setupRequest: (req) => {
          req.path = `/v1/check?policy=free&key=k${next() % KEYS}`;
          return req;
        },
      }],
    }, (err, result) => {
      clearTimeout(guard);
      const wallMs = performance.now() - t0;
      const c = process.cpuUsage(cpu0);
      if (err) return reject(err);
      resolve({
        responses: n, wallMs, latencies: latencies.subarray(0, Math.min(n, cap)),
        errors: result.errors + result.timeouts, non2xx: result.non2xx, clientCpu: c.user + c.system,
        sent: result.requests.sent,
      });
    });
    inst.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => {
      if (n < latencies.length) latencies[n] = ms;
      n++;
    });
  });
}

/** One autocannon measurement of a fresh server: probe, warm up, measure. */
async function autocannonCase(target: typeof TARGETS[number], connections: number, pipelining: number,
  seconds: number, warmupSeconds: number): Promise<LoadResult> {
  const srv = await startServerChild(target.file, target.spec);
  try {
    await probe(srv.port);
    await runAutocannon(srv.port, connections, pipelining, warmupSeconds, false);
    const c0 = await srv.cpu();
    const r = await runAutocannon(srv.port, connections, pipelining, seconds, true);
    const c1 = await srv.cpu();
    const sorted = Float64Array.from(r.latencies).sort();
    const serverCpu = cpuMicros(c0, c1);
    return {
      rps: (r.responses * 1000) / r.wallMs,
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      cpu: serverCpu / Math.max(1, r.responses),
      responses: r.responses,
      serverCores: serverCpu / 1000 / r.wallMs,
      clientCores: r.clientCpu / 1000 / r.wallMs,
      errors: r.errors,
      non2xx: r.non2xx,
      sent: r.sent,
    };
  } finally {
    await srv.stop();
  }
}

/** "1.23ms" / "850.00us" / "1.02s" → ms. */
function wrkMs(v: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(v.trim());
  if (!m) return NaN;
  const x = Number(m[1]);
  return m[2] === 'us' ? x / 1000 : m[2] === 'ms' ? x : m[2] === 's' ? x * 1000 : x * 60_000;
}

function runWrk(args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    p.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`wrk exited with ${code}: ${err || out}`));
    });
  });
}

async function wrkCase(target: typeof TARGETS[number], seconds: number, warmupSeconds: number, lua: string): Promise<LoadResult> {
  const srv = await startServerChild(target.file, target.spec);
  try {
    await probe(srv.port);
    const url = `http://127.0.0.1:${srv.port}/`;
    await runWrk(['-t1', '-c100', `-d${Math.max(1, Math.round(warmupSeconds))}s`, '-s', lua, url], (warmupSeconds + 15) * 1000);
    const c0 = await srv.cpu();
    const t0 = performance.now();
    const out = await runWrk(['-t1', '-c100', `-d${seconds}s`, '--latency', '-s', lua, url], (seconds + 15) * 1000);
    const wallMs = performance.now() - t0;
    const c1 = await srv.cpu();
    const total = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN);
    const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
    const p50 = wrkMs(/^\s+50%\s+(\S+)/m.exec(out)?.[1] ?? '');
    const p99 = wrkMs(/^\s+99%\s+(\S+)/m.exec(out)?.[1] ?? '');
    const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
    const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
    const errors = sock ? sock.slice(1).reduce((a, x) => a + Number(x), 0) : 0;
    const serverCpu = cpuMicros(c0, c1);
    return {
      rps, p50, p99, cpu: serverCpu / Math.max(1, total), responses: total,
      serverCores: serverCpu / 1000 / wallMs, clientCores: null, errors, non2xx, sent: null,
    };
  } finally {
    await srv.stop();
  }
}

/** A row from repeated runs of one target: medians, with the req/s range over the runs. */
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
  return {
    id, case: kase, subject,
    values: { rps: med((r) => r.rps), p50: med((r) => r.p50), p99: med((r) => r.p99), cpu: med((r) => r.cpu) },
    spread: runs.length > 1 ? { rps: [Math.min(...rps), Math.max(...rps)] } : undefined,
    info: info.join(', '),
    extra: { runs },
  };
}

/**
 * Runs every job `reps` times, rotating the order each repetition (ABCD, BCDA, CDAB) so that drift in the
 * machine's load does not always favour the same target. Failures become notes; the rest carry on.
 */
async function interleaved<J extends { id: string }>(ctx: Ctx, jobs: J[], reps: number,
  run: (job: J, rep: number) => Promise<LoadResult>, notes: string[]): Promise<Map<string, LoadResult[]>> {
  const out = new Map<string, LoadResult[]>();
  for (let rep = 0; rep < reps; rep++) {
    for (let k = 0; k < jobs.length; k++) {
      const job = jobs[(k + rep) % jobs.length];
      try {
        const r = await run(job, rep);
        out.set(job.id, [...(out.get(job.id) ?? []), r]);
      } catch (e) {
        notes.push(`${job.id} run ${rep + 1} failed: ${(e as Error).message.split('\n')[0]}`);
        ctx.progress(`  FAILED: ${(e as Error).message}`);
      }
    }
  }
  return out;
}

export const http: Scenario = {
  name: 'http',
  summary: 'GET /v1/check req/s, p50/p99, CPU/req: sluice (shards 0, 1) vs bare uWS and node:http + rlf; autocannon, wrk',
  async run(ctx: Ctx): Promise<Section[]> {
    const seconds = ctx.quick ? 2 : 5;
    const warmup = ctx.quick ? 0.5 : 1;
    const reps = ctx.quick ? 1 : 3;
    const ac: Section = {
      scenario: 'http',
      id: 'http-autocannon',
      title: 'HTTP: GET /v1/check under autocannon',
      method: `autocannon 9 in the runner process, ${seconds} s per run after a ${warmup} s warm-up, a fresh server ` +
        `child per run, key drawn uniformly from ${KEYS.toLocaleString('en')} per request (setupRequest); ` +
        `${reps} run(s) per target in rotating order, medians shown (req/s range in parentheses). ` +
        'Latency percentiles from every response\'s time (µs resolution, not autocannon\'s whole-ms histogram). ' +
        'Server CPU = the server process\'s user+system time (all threads) ÷ responses.',
      metrics: METRICS,
      baselines: BASELINES,
      rows: [],
      notes: [],
    };
    const cases = [
      { tag: 'p1', label: 'c100, pipelining 1', connections: 100, pipelining: 1 },
      { tag: 'p10', label: 'c50, pipelining 10', connections: 50, pipelining: 10 },
    ];
    for (const c of cases) {
      const targets = TARGETS.map((t) => ({ t, id: `http/autocannon-${c.tag}/${t.tag}` })).filter(({ id }) => ctx.want(id));
      const runs = await interleaved(ctx, targets, reps, async ({ t, id }, rep) => {
        ctx.progress(`${id}: ${t.subject}, ${c.label}, ${seconds} s (run ${rep + 1}/${reps})`);
        const r = await autocannonCase(t, c.connections, c.pipelining, seconds, warmup);
        ctx.progress(`  ${Math.round(r.rps)} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms`);
        return r;
      }, ac.notes);
      for (const { t, id } of targets) {
        const got = runs.get(id) ?? [];
        if (got.length > 0) ac.rows.push(row(id, c.label, t.subject, got, c.connections * c.pipelining));
      }
    }

    const wrk: Section = {
      scenario: 'http',
      id: 'http-wrk',
      title: 'HTTP: GET /v1/check under wrk (the ceiling autocannon cannot reach)',
      method: `wrk -t1 -c100 -d${seconds}s --latency -s bench/wrk/random-key.lua (a random key of ` +
        `${KEYS.toLocaleString('en')} per request) after a 1 s warm-up, a fresh server child per run, ` +
        `${reps} run(s) per target in rotating order, medians shown. Server CPU as above.`,
      metrics: METRICS,
      baselines: BASELINES,
      rows: [],
      notes: [],
    };
    const wrkIds = TARGETS.map((t) => ({ t, id: `http/wrk/${t.tag}` })).filter(({ id }) => ctx.want(id));
    if (wrkIds.length > 0) {
      const version = wrkVersion();
      const lua = join(ctx.root, 'bench', 'wrk', 'random-key.lua');
      if (version === null) {
        wrk.notes.push('wrk is not installed: wrk runs skipped (install it, e.g. `apt-get install wrk`, to measure the ceiling).');
        ctx.progress('http/wrk: wrk not installed, skipped');
      } else if (!existsSync(lua)) {
        wrk.notes.push(`${lua} is missing: wrk runs skipped.`);
      } else {
        const runs = await interleaved(ctx, wrkIds, reps, async ({ t, id }, rep) => {
          ctx.progress(`${id}: ${t.subject}, wrk -t1 -c100 -d${seconds}s (run ${rep + 1}/${reps})`);
          const r = await wrkCase(t, seconds, warmup, lua);
          ctx.progress(`  ${Math.round(r.rps)} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms`);
          return r;
        }, wrk.notes);
        for (const { t, id } of wrkIds) {
          const got = runs.get(id) ?? [];
          if (got.length > 0) wrk.rows.push(row(id, 'wrk -t1 -c100', t.subject, got, 100));
        }
      }
    }
    return [ac, wrk].filter((s) => s.rows.length > 0 || s.notes.length > 0);
  },
};

