/**
 * The HTTP scenario's load generators (bench/scenarios/http.ts), each run against a resident server child
 * with its CPU read before and after: autocannon closed-loop and fixed-rate runs (in this process), wrk (its
 * own process, when installed), and bench/latency/fixed-rate.c, built with cc, corrected for coordinated
 * omission. Every run requests `GET /v1/check?policy=free&key=k<n>`, n uniform in [0, keys), or one hot key.
 */
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import * as hdr from 'hdr-histogram-js';
import type { Cpu, ServerChild } from '../lib/harness.js';
import { percentile, xorshift32 } from '../lib/measure.js';

/** One load run's figures (or a warm-up's): rates per second, latencies in ms, CPU in µs per response. */
export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  /** Only from the fixed-rate runs (hdr-histogram). */
  p999?: number;
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
  /** Fixed-rate runs: the largest response time, ms. */
  max?: number;
}

/** The wrk binary's version line, or null when wrk is not installed. */
export function wrkVersion(): string | null {
  const r = spawnSync('wrk', ['-v'], { encoding: 'utf8', timeout: 5_000 });
  if (r.error) return null;
  const m = /wrk\s+(\S+)/.exec(`${r.stdout}${r.stderr}`);
  return m ? m[1] : 'unknown version';
}

/** Runs `run` against `srv`: its result, the server's CPU meanwhile (µs, all its threads) and the wall time (ms). */
async function onServer<T>(srv: ServerChild, run: () => Promise<T>): Promise<{ result: T; serverCpu: number; wallMs: number }> {
  const c0 = await srv.cpu();
  const t0 = performance.now();
  const result = await run();
  const wallMs = performance.now() - t0;
  const c1 = await srv.cpu();
  return { result, serverCpu: cpuMicros(c0, c1), wallMs };
}

function cpuMicros(a: Cpu, b: Cpu): number {
  return b.user - a.user + (b.system - a.system);
}

/** A run's server figures: CPU µs per response, and cores busy (CPU seconds per wall second). */
function serverShare(serverCpu: number, wallMs: number, responses: number): { cpu: number; serverCores: number } {
  return { cpu: serverCpu / Math.max(1, responses), serverCores: serverCpu / 1000 / wallMs };
}

/** Checks one request before loading a server: status 200 and a decision-shaped body. */
export async function probe(port: number): Promise<void> {
  const r = await fetch(`http://127.0.0.1:${port}/v1/check?policy=free&key=k1`, { signal: AbortSignal.timeout(5_000) });
  const body = await r.text();
  if (r.status !== 200 || !body.includes('"allowed"')) throw new Error(`probe: HTTP ${r.status} ${body.slice(0, 200)}`);
}

interface AcRun {
  responses: number;
  wallMs: number;
  errors: number;
  non2xx: number;
  clientCpu: number;
  sent: number;
}

/** Keys: 10,000 drawn per request by setupRequest, or 1 (one fixed path, no setupRequest). */
function acRequests(keys: number, seed: number): Array<Record<string, unknown>> {
  if (keys <= 1) return [{ method: 'GET', path: '/v1/check?policy=free&key=hot' }];
  const next = xorshift32(seed);
  return [{
    method: 'GET',
    path: '/v1/check?policy=free&key=k0',
    setupRequest: (req: { path?: string }) => {
      req.path = `/v1/check?policy=free&key=k${next() % keys}`;
      return req;
    },
  }];
}

/**
 * One autocannon instance. `onLatency` gets every response's time (ms, µs resolution: autocannon measures it
 * with process.hrtime). `overallRate` makes it a fixed-rate run.
 */
function autocannonOnce(port: number, o: { connections: number; pipelining: number; seconds: number; keys: number;
  seed: number; overallRate?: number; onLatency?: (ms: number) => void }): Promise<AcRun> {
  let n = 0;
  return new Promise((resolve, reject) => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const guard = setTimeout(() => inst.stop(), (o.seconds + 10) * 1000);
    const opts = {
      url: `http://127.0.0.1:${port}`,
      connections: o.connections,
      pipelining: o.pipelining,
      duration: o.seconds,
      timeout: 10,
      requests: acRequests(o.keys, o.seed),
      ...(o.overallRate !== undefined ? { overallRate: o.overallRate } : {}),
    };
    const inst = autocannon(opts as Parameters<typeof autocannon>[0], (err, result) => {
      clearTimeout(guard);
      const wallMs = performance.now() - t0;
      const c = process.cpuUsage(cpu0);
      if (err) return reject(err);
      resolve({
        responses: n, wallMs, errors: result.errors + result.timeouts, non2xx: result.non2xx,
        clientCpu: c.user + c.system, sent: result.requests.sent,
      });
    });
    const onLatency = o.onLatency;
    inst.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => {
      onLatency?.(ms);
      n++;
    });
  });
}

/**
 * A closed-loop autocannon run against a resident server, `connections` × `pipelining` requests in flight for
 * `seconds`, keys drawn from `keys`: req/s, p50/p99 of every response, server CPU.
 */
export async function autocannonLoad(srv: ServerChild, connections: number, pipelining: number, seconds: number,
  keys: number): Promise<LoadResult> {
  const cap = 1 << 23;
  const lat = new Float64Array(cap);
  let k = 0;
  const { result: r, serverCpu } = await onServer(srv, () => autocannonOnce(srv.port, {
    connections, pipelining, seconds, keys, seed: pipelining * 7919 + connections,
    onLatency: (ms) => {
      if (k < cap) lat[k++] = ms;
    },
  }));
  const sorted = lat.subarray(0, k).sort();
  return {
    rps: (r.responses * 1000) / r.wallMs,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    ...serverShare(serverCpu, r.wallMs, r.responses),
    responses: r.responses,
    clientCores: r.clientCpu / 1000 / r.wallMs,
    errors: r.errors,
    non2xx: r.non2xx,
    sent: r.sent,
  };
}

/** Staggered autocannon instances per fixed-rate run: see {@link fixedRateLoad}. */
export const STAGGER = 5;

/**
 * A fixed-rate run: `rate` requests/s over `connections` connections, with autocannon's `overallRate`.
 * autocannon enforces a rate as a quota per connection per second (a 1 s timer resets it), so each second's
 * requests leave as a closed-loop burst at the start of the second. To spread them, the run is 5 autocannon
 * instances (each with a fifth of the connections and of the rate) started 200 ms apart: 5 smaller bursts a
 * second. Every response's time goes into one hdr-histogram (µs, 3 significant digits).
 */
export async function fixedRateLoad(srv: ServerChild, rate: number, connections: number, seconds: number,
  keys: number): Promise<LoadResult> {
  const h = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  try {
    const per = Math.max(1, Math.round(connections / STAGGER));
    const cpu0 = process.cpuUsage();
    const { result: runs, serverCpu, wallMs } = await onServer(srv, () => Promise.all(Array.from({ length: STAGGER }, (_, i) => new Promise<AcRun>((res, rej) => {
      setTimeout(() => {
        // Stop just short of the whole second: the rate timer would otherwise start one more burst at the end.
        autocannonOnce(srv.port, {
          connections: per, pipelining: 1, seconds: seconds - 0.05, keys, seed: 1 + i, overallRate: rate / STAGGER,
          onLatency: (ms) => h.recordValue(Math.max(1, Math.round(ms * 1000))),
        }).then(res, rej);
      }, (i * 1000) / STAGGER);
    }))));
    const cc = process.cpuUsage(cpu0);
    const responses = runs.reduce((a, r) => a + r.responses, 0);
    return {
      // Each instance runs `seconds`; the staggered starts add 0.8 s of partial load at the edges.
      rps: responses / seconds,
      p50: h.getValueAtPercentile(50) / 1000,
      p99: h.getValueAtPercentile(99) / 1000,
      p999: h.getValueAtPercentile(99.9) / 1000,
      max: h.maxValue / 1000,
      ...serverShare(serverCpu, wallMs, responses),
      responses,
      clientCores: (cc.user + cc.system) / 1000 / wallMs,
      errors: runs.reduce((a, r) => a + r.errors, 0),
      non2xx: runs.reduce((a, r) => a + r.non2xx, 0),
      // autocannon's `sent` counts requests held back by the rate quota too: no unanswered check here.
      sent: null,
    };
  } finally {
    h.destroy();
  }
}

/**
 * Runs `cmd` with `args` to its end and resolves with its stdout; rejects when it cannot start, exits other
 * than 0 (the error says `what` and its output), or is still running after `timeoutMs` (it is killed).
 */
function runProcess(cmd: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
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
      else reject(new Error(`${what} exited with ${code}: ${err || out}`));
    });
  });
}

/** "1.23ms" / "850.00us" / "1.02s" → ms. */
function wrkMs(v: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(v.trim());
  if (!m) return NaN;
  const x = Number(m[1]);
  return m[2] === 'us' ? x / 1000 : m[2] === 'ms' ? x : m[2] === 's' ? x * 1000 : x * 60_000;
}

/**
 * A wrk run (`-t1 -c100`, `seconds`) against a resident server: `keys` > 1 through the Lua script `lua` (a
 * random key of 10,000 per request), or one hot key (a plain URL).
 */
export async function wrkLoad(srv: ServerChild, seconds: number, lua: string, keys: number): Promise<LoadResult> {
  const url = keys <= 1 ? `http://127.0.0.1:${srv.port}/v1/check?policy=free&key=hot` : `http://127.0.0.1:${srv.port}/`;
  const script = keys <= 1 ? [] : ['-s', lua];
  const { result: out, serverCpu, wallMs } = await onServer(srv,
    () => runProcess('wrk', ['-t1', '-c100', `-d${seconds}s`, '--latency', ...script, url], (seconds + 15) * 1000, 'wrk'));
  const total = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
  const p50 = wrkMs(/^\s+50%\s+(\S+)/m.exec(out)?.[1] ?? '');
  const p99 = wrkMs(/^\s+99%\s+(\S+)/m.exec(out)?.[1] ?? '');
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = sock ? sock.slice(1).reduce((a, x) => a + Number(x), 0) : 0;
  return { rps, p50, p99, ...serverShare(serverCpu, wallMs, total), responses: total, clientCores: null, errors, non2xx, sent: null };
}

/**
 * Builds bench/latency/fixed-rate.c (the coordinated-omission-corrected fixed-rate load generator) into the
 * OS temp directory; null when no C compiler is at hand (the section is then skipped, and says so).
 */
export function buildFixedRate(root: string): string | null {
  const out = join(tmpdir(), `sluice-fixed-rate-${process.pid}`);
  const r = spawnSync('cc', ['-O2', '-o', out, join(root, 'bench', 'latency', 'fixed-rate.c')], { encoding: 'utf8', timeout: 60_000 });
  return r.status === 0 ? out : null;
}

/**
 * One corrected fixed-rate run of `bin` (built by {@link buildFixedRate}): `rate` req/s over `connections` for
 * `seconds`, latency from each request's intended send time.
 */
export async function correctedLoad(bin: string, srv: ServerChild, rate: number, connections: number, seconds: number, keys: number): Promise<LoadResult> {
  const { result: r, serverCpu, wallMs } = await onServer(srv, () => runProcess(bin,
    ['127.0.0.1', String(srv.port), String(rate), String(seconds), String(connections), String(keys), '0.2'], (seconds + 20) * 1000, 'fixed-rate'));
  const j = JSON.parse(r) as { intended: number; answered: number; p50: number; p99: number; p999: number; max: number };
  return {
    rps: j.answered / seconds, p50: j.p50, p99: j.p99, p999: j.p999, max: j.max, ...serverShare(serverCpu, wallMs, j.answered),
    responses: j.answered, clientCores: null, errors: j.intended - j.answered, non2xx: 0, sent: null,
  };
}

