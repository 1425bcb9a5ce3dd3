/**
 * gRPC scenario: Envoy's `ShouldRateLimit` (src/grpc/) against `GET /v1/check` on the same server process,
 * the same limiter (built-in default config, shards 0) and the same checks: policy `free`, descriptors
 * tenant = t<n> (n uniform in [0, 10,000)) and action = read, cost 1. Closed loop with the same number of calls
 * in flight: @grpc/grpc-js clients (4 channels, each keeping its share in flight) for gRPC, autocannon (one
 * connection per call in flight, pipelining 1) for HTTP, both in the runner process. The ratio is
 * ShouldRateLimit ÷ /v1/check, taken in the same run, rounds alternated.
 */
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import autocannon from 'autocannon';
import { createLimiter } from '../../src/index.js';
import { defaultConfig } from '../../src/config/default.js';
import { startServer } from '../../src/server/http.js';
import { grpcService, startGrpcServer } from '../../src/grpc/server.js';
import { alternate } from '../lib/ab.js';
import { isChildEntry, serverMain, startServerChild, type Cpu, type ServerChild } from '../lib/harness.js';
import { median, xorshift32 } from '../lib/measure.js';
import { freePort } from '../lib/redis-server.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);
const KEYS = 10_000;
const CHANNELS = 4;

interface Spec {
  grpcPort: number;
}

if (isChildEntry(import.meta.url)) {
  serverMain<Spec>(async (spec) => {
    const cfg = defaultConfig();
    const limiter = await createLimiter({ policies: cfg.policies, shards: 0, maxKeys: cfg.engine.maxKeys });
    const http = await startServer({ limiter, host: '127.0.0.1', port: 0 });
    const g = await startGrpcServer({ limiter, host: '127.0.0.1', port: spec.grpcPort, metrics: http.metrics });
    return {
      port: http.port,
      async close() {
        await g.close();
        await http.close();
        await limiter.close();
      },
    };
  });
}

interface Run {
  calls: number;
  wallMs: number;
  serverCpu: number;
  clientCpu: number;
  errors: number;
  /** Answers that were not "admitted or denied" (HTTP non-2xx; gRPC: none, errors are counted above). */
  odd: number;
}

const cpuMicros = (a: Cpu, b: Cpu): number => b.user - a.user + (b.system - a.system);

/** Keeps `inFlight` ShouldRateLimit calls going over CHANNELS channels for `seconds`. */
async function grpcLoad(srv: ServerChild, grpcPort: number, inFlight: number, seconds: number, seed: number): Promise<Run> {
  const Rls = grpcService('envoy.service.ratelimit.v3.RateLimitService');
  const clients = Array.from({ length: CHANNELS }, (_, i) =>
    new Rls(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, 'bench.channel': i }));
  const next = xorshift32(seed);
  let calls = 0;
  let errors = 0;
  const c0 = await srv.cpu();
  const u0 = process.cpuUsage();
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  await Promise.all(Array.from({ length: inFlight }, (_, i) => new Promise<void>((done) => {
    const client = clients[i % CHANNELS] as unknown as { ShouldRateLimit(r: unknown, cb: (e: Error | null) => void): void };
    const one = (): void => {
      if (performance.now() >= end) return done();
      client.ShouldRateLimit({
        domain: 'free', descriptors: [{ entries: [{ key: 'tenant', value: `t${next() % KEYS}` }, { key: 'action', value: 'read' }] }],
      }, (e) => {
        if (e) errors++;
        else calls++;
        one();
      });
    };
    one();
  })));
  const wallMs = performance.now() - t0;
  const u = process.cpuUsage(u0);
  const c1 = await srv.cpu();
  for (const c of clients) c.close();
  return { calls, wallMs, serverCpu: cpuMicros(c0, c1), clientCpu: u.user + u.system, errors, odd: 0 };
}

/** autocannon with one connection per call in flight against GET /v1/check, the same checks. */
async function httpLoad(srv: ServerChild, inFlight: number, seconds: number, seed: number): Promise<Run> {
  const next = xorshift32(seed);
  let calls = 0;
  const c0 = await srv.cpu();
  const u0 = process.cpuUsage();
  const t0 = performance.now();
  const result = await new Promise<{ errors: number; timeouts: number; non2xx: number }>((resolve, reject) => {
    const inst = autocannon({
      url: `http://127.0.0.1:${srv.port}`, connections: inFlight, pipelining: 1, duration: seconds, timeout: 10,
      requests: [{
        method: 'GET', path: '/v1/check?policy=free&tenant=t0&action=read',
        setupRequest: (req: { path?: string }) => {
          req.path = `/v1/check?policy=free&tenant=t${next() % KEYS}&action=read`;
          return req;
        },
      }],
    } as Parameters<typeof autocannon>[0], (err, r) => (err ? reject(err) : resolve(r)));
    inst.on('response', () => void calls++);
  });
  const wallMs = performance.now() - t0;
  const u = process.cpuUsage(u0);
  const c1 = await srv.cpu();
  return { calls, wallMs, serverCpu: cpuMicros(c0, c1), clientCpu: u.user + u.system, errors: result.errors + result.timeouts, odd: result.non2xx };
}

const GRPC = 'sluice ShouldRateLimit (gRPC, @grpc/grpc-js client)';
const HTTP = 'sluice GET /v1/check (HTTP, autocannon)';

function row(id: string, kase: string, subject: string, runs: Run[]): Row {
  const med = (f: (r: Run) => number): number => median(runs.map(f).sort((a, b) => a - b));
  const rate = runs.map((r) => (r.calls * 1000) / r.wallMs);
  const errors = runs.reduce((a, r) => a + r.errors, 0);
  const odd = runs.reduce((a, r) => a + r.odd, 0);
  const info = [`server ${med((r) => r.serverCpu / 1000 / r.wallMs).toFixed(2)} cores`, `client ${med((r) => r.clientCpu / 1000 / r.wallMs).toFixed(2)} cores`];
  if (errors > 0) info.push(`${errors} errors`);
  if (odd > 0) info.push(`${odd} non-2xx`);
  return {
    id, case: kase, subject,
    values: { rate: med((r) => (r.calls * 1000) / r.wallMs), cpu: med((r) => r.serverCpu / Math.max(1, r.calls)) },
    spread: runs.length > 1 ? { rate: [Math.min(...rate), Math.max(...rate)] } : undefined,
    info: info.join(', '),
    extra: { runs },
  };
}

export const grpcScenario: Scenario = {
  name: 'grpc',
  summary: 'Envoy RLS ShouldRateLimit (gRPC) vs GET /v1/check on the same server and checks: calls/s, server CPU/call',
  async run(ctx: Ctx): Promise<Section[]> {
    const inFlight = 64;
    const kase = `${inFlight} calls in flight, 10k keys`;
    const jobs = [
      { id: 'grpc/rls', subject: GRPC },
      { id: 'grpc/http-check', subject: HTTP },
    ].filter((j) => ctx.want(j.id));
    if (jobs.length === 0) return [];
    const seconds = ctx.quick ? 2 : 5;
    const reps = ctx.quick ? 2 : 3;
    const grpcPort = await freePort();
    const srv = await startServerChild(FILE, { grpcPort } satisfies Spec);
    const sec: Section = {
      scenario: 'grpc',
      id: 'grpc-rls',
      title: 'gRPC: Envoy ShouldRateLimit vs GET /v1/check, same server, same checks',
      method: `One server child (built-in default config, shards 0) serving both fronts on one limiter. Policy free, ` +
        `descriptors tenant (uniform over ${KEYS.toLocaleString('en')}) and action, cost 1, ${inFlight} calls in flight: ` +
        `gRPC from @grpc/grpc-js clients (${CHANNELS} channels), HTTP from autocannon (${inFlight} connections, pipelining 1), ` +
        `both in the runner process. ${seconds} s per run, ${reps} runs each, alternated after a warm-up run each; medians ` +
        '(range in parentheses). Server CPU = the server process\'s user+system time ÷ calls answered.',
      metrics: [
        { key: 'rate', label: 'calls/s', higherIsBetter: true },
        { key: 'cpu', label: 'server CPU µs/call', higherIsBetter: false },
      ],
      baselines: [{ label: '/v1/check', subject: HTTP }],
      rows: [],
      notes: [],
    };
    try {
      const results = await alternate(ctx, jobs, reps, (j) => j.id, async (j, r, warmup) => {
        ctx.progress(`${j.id}: ${j.subject}${warmup ? ' (warm-up)' : ` (round ${r + 1}/${reps})`}`);
        const s = warmup ? 1 : seconds;
        const run = j.id === 'grpc/rls' ? await grpcLoad(srv, grpcPort, inFlight, s, 17 + r) : await httpLoad(srv, inFlight, s, 17 + r);
        if (!warmup) ctx.progress(`  ${Math.round((run.calls * 1000) / run.wallMs)} calls/s, ${(run.serverCpu / Math.max(1, run.calls)).toFixed(1)} µs server CPU/call`);
        return run;
      }, sec.notes);
      jobs.forEach((j, i) => {
        if (results[i].length > 0) sec.rows.push(row(j.id, kase, j.subject, results[i]));
      });
    } finally {
      await srv.stop();
    }
    return [sec];
  },
};
