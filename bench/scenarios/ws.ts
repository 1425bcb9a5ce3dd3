/**
 * WebSocket scenario: decisions per second through `/v1/stream` over one and over several connections, in
 * binary frames and in JSON frames, with the latency of each batch (a frame of checks sent → its last answer
 * received). Subjects, each a resident child process, taken alternately round by round:
 * - sluice `/v1/stream` (startServer, shards 0), a load-generating client child per (connections, encoding);
 * - bare uWS WebSocket: reads each binary checks frame's ids and answers a ready-made answers frame of the
 *   same count (no parsing of policy or key, no limiter): the ceiling of the transport on this machine;
 * - in-process createLimiter (no socket): the same checks as `Promise.all` batches of the frame size, the
 *   engine's own ceiling for what the stream can deliver.
 *
 * The client (package `ws`) keeps `WINDOW` frames of `FRAME` checks in flight per connection, keys drawn
 * uniformly from 100,000, token bucket of 1e9 per minute (every check admitted).
 */
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import type { Decision } from '../../src/index.js';
import { ANSWER_HEAD, FRAME_ANSWERS, FRAME_CHECKS, FRAME_HEADER, CHECK_HEAD, KIND_ALLOWED } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { alternate, roundMain, startAll, startRoundChild, stopAll, type RoundChild } from '../lib/ab.js';
import { isChildEntry, serverMain, startServerChild, type Cpu, type ServerChild } from '../lib/harness.js';
import { median, percentile, summary, xorshift32 } from '../lib/measure.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);

/** Checks per frame (the server's default maxChecksPerFrame). */
const FRAME = 4096;
/** Frames in flight per connection. */
const WINDOW = 8;
/** Key set. */
const KEYS = 100_000;
/** Distinct frame contents per window slot (cycled). */
const PATTERNS = 4;
const POLICY = 'bench';
const POLICIES = { [POLICY]: { algorithm: 'token_bucket' as const, limit: 1_000_000_000, period: 60_000, burst: 1_000_000_000 } };

// ---------------------------------------------------------------------------------------------- children

type Spec =
  | { role: 'server'; kind: 'sluice' | 'bare'; port?: number }
  | { role: 'client'; port: number; connections: number; encoding: 'binary' | 'json' }
  | { role: 'inproc' };

interface RoundQ {
  ms: number;
}

interface RoundR {
  decisions: number;
  elapsedMs: number;
  /** Per-batch latencies, ms (sampled: at most 20,000). */
  batchMs: number[];
  clientCpuMicros: number;
  errors: number;
  allowed: number;
}

// The engine, the server and uWS are imported where they are used, so a load-client child loads none of them.

async function startSluice(port: number): Promise<{ port: number; close(): Promise<void> }> {
  const { createLimiter } = await import('../../src/index.js');
  const { startServer } = await import('../../src/server/http.js');
  const limiter = await createLimiter({ policies: POLICIES, shards: 0, maxKeys: KEYS * 2 });
  const srv = await startServer({ limiter, host: '127.0.0.1', port });
  return {
    port: srv.port,
    async close() {
      await srv.close();
      await limiter.close();
    },
  };
}

/** The transport's ceiling: answers every checks frame with the same number of fixed answer records. */
async function startBareWs(port: number): Promise<{ port: number; close(): void }> {
  const uWS = (await import('uWebSockets.js')).default;
  if (!/native code/.test(String(uWS.App))) throw new Error('uWebSockets.js native binary not loaded');
  const w = new FrameWriter(FRAME_ANSWERS, 1 << 20);
  for (let i = 0; i < FRAME; i++) w.answer(i, KIND_ALLOWED, 0, 0, 1e9, 999_999_999, 60, 0, POLICY, '', '');
  const full = w.finish()!;
  const rec = ANSWER_HEAD + POLICY.length;
  const app = uWS.App();
  app.ws('/v1/stream', {
    maxPayloadLength: 2 << 20,
    maxBackpressure: 16 << 20,
    compression: uWS.DISABLED,
    idleTimeout: 120,
    message: (ws, data, isBinary) => {
      if (!isBinary) return;
      const b = new Uint8Array(data);
      const count = b[2] | (b[3] << 8);
      const out = full.subarray(0, FRAME_HEADER + count * rec);
      out[2] = count & 0xff;
      out[3] = count >>> 8;
      // Copy each check's id into its answer: the one thing a real answer must carry.
      let at = FRAME_HEADER;
      let o = FRAME_HEADER;
      for (let i = 0; i < count; i++) {
        out[o] = b[at]; out[o + 1] = b[at + 1]; out[o + 2] = b[at + 2]; out[o + 3] = b[at + 3];
        at += CHECK_HEAD + b[at + 13] + (b[at + 14] | (b[at + 15] << 8));
        o += rec;
      }
      ws.send(out, true);
    },
  });
  return new Promise((resolve, reject) => {
    app.listen('127.0.0.1', port, (token) => {
      if (!token) return reject(new Error('bare WS: cannot listen'));
      resolve({
        port: uWS.us_socket_local_port(token),
        close: () => {
          uWS.us_listen_socket_close(token);
          (app as unknown as { close(): void }).close();
        },
      });
    });
  });
}

/** Pre-built frames: frames[slot][pattern], ids slot·FRAME + i, so a slot's ids are unique while it is in flight. */
function buildFrames(encoding: 'binary' | 'json', seed: number): Array<Array<Uint8Array | string>> {
  const next = xorshift32(seed);
  const out: Array<Array<Uint8Array | string>> = [];
  for (let s = 0; s < WINDOW; s++) {
    const row: Array<Uint8Array | string> = [];
    for (let p = 0; p < PATTERNS; p++) {
      if (encoding === 'binary') {
        const w = new FrameWriter(FRAME_CHECKS, 1 << 17);
        for (let i = 0; i < FRAME; i++) w.check(s * FRAME + i, POLICY, `k${next() % KEYS}`, 1, 0);
        row.push(w.finish()!);
      } else {
        const parts: string[] = [];
        for (let i = 0; i < FRAME; i++) parts.push(`{"id":${s * FRAME + i},"policy":"${POLICY}","key":"k${next() % KEYS}","cost":1}`);
        row.push(`[${parts.join(',')}]`);
      }
    }
    out.push(row);
  }
  return out;
}

/** One connection of the load client: WINDOW slots, each a frame in flight, re-sent when fully answered. */
class Lane {
  readonly left = new Int32Array(WINDOW);
  readonly sentAt = new Float64Array(WINDOW);
  readonly pattern = new Int32Array(WINDOW);
  busy = 0;
  running = false;
  constructor(readonly ws: WebSocket, readonly frames: Array<Array<Uint8Array | string>>, readonly r: Runner) {}

  send(slot: number): void {
    const p = (this.pattern[slot] = (this.pattern[slot] + 1) % PATTERNS);
    this.left[slot] = FRAME;
    this.sentAt[slot] = performance.now();
    this.busy++;
    this.ws.send(this.frames[slot][p], { binary: typeof this.frames[slot][p] !== 'string' });
  }

  /** `n` answers for ids in `slot`. */
  answered(slot: number, n: number): void {
    this.r.decisions += n;
    if ((this.left[slot] -= n) > 0) return;
    this.busy--;
    this.r.batch(performance.now() - this.sentAt[slot]);
    if (this.running) this.send(slot);
    else if (this.busy === 0) this.r.laneIdle();
  }

  onMessage(data: Buffer, isBinary: boolean): void {
    if (isBinary) {
      const b = data;
      const count = b[2] | (b[3] << 8);
      let at = FRAME_HEADER;
      // Answers of one frame usually share a slot: count runs of equal slots.
      let slot = -1, run = 0;
      for (let i = 0; i < count; i++) {
        const id = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16);
        const s = Math.floor(id / FRAME);
        if (b[at + 4] === KIND_ALLOWED) this.r.allowed++;
        else if (b[at + 4] === 2) this.r.errors++;
        if (s !== slot) {
          if (run > 0) this.answered(slot, run);
          slot = s;
          run = 0;
        }
        run++;
        at += ANSWER_HEAD + b[at + 40] + b[at + 41] + (b[at + 42] | (b[at + 43] << 8));
      }
      if (run > 0) this.answered(slot, run);
    } else {
      const t = data.toString('latin1');
      let slot = -1, run = 0;
      let pos = 0;
      for (;;) {
        const k = t.indexOf('{"id":', pos);
        if (k < 0) break;
        let j = k + 6, id = 0;
        for (let c = t.charCodeAt(j); c >= 48 && c <= 57; c = t.charCodeAt(++j)) id = id * 10 + (c - 48);
        if (t.startsWith('"allowed":true', j + 1)) this.r.allowed++;
        else if (t.startsWith('"error"', j + 1)) this.r.errors++;
        pos = j;
        const s = Math.floor(id / FRAME);
        if (s !== slot) {
          if (run > 0) this.answered(slot, run);
          slot = s;
          run = 0;
        }
        run++;
      }
      if (run > 0) this.answered(slot, run);
    }
  }
}

class Runner {
  decisions = 0;
  allowed = 0;
  errors = 0;
  batches: number[] = [];
  private seen = 0;
  private idle: (() => void) | null = null;
  lanes: Lane[] = [];

  batch(ms: number): void {
    // Reservoir of at most 20,000 batch latencies.
    this.seen++;
    if (this.batches.length < 20_000) this.batches.push(ms);
    else {
      const j = Math.floor(Math.random() * this.seen);
      if (j < 20_000) this.batches[j] = ms;
    }
  }

  laneIdle(): void {
    if (this.lanes.every((l) => l.busy === 0)) this.idle?.();
  }

  async round(ms: number): Promise<RoundR> {
    this.decisions = this.allowed = this.errors = this.seen = 0;
    this.batches = [];
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (const l of this.lanes) {
      l.running = true;
      for (let s = 0; s < WINDOW; s++) l.send(s);
    }
    await new Promise((r) => setTimeout(r, ms));
    // Count what arrived within the round, then let the frames in flight drain before the next round.
    const decisions = this.decisions;
    const elapsedMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const allowed = this.allowed, errors = this.errors;
    const batchMs = this.batches;
    await new Promise<void>((resolve) => {
      this.idle = resolve;
      for (const l of this.lanes) l.running = false;
      this.laneIdle();
    });
    this.idle = null;
    return { decisions, elapsedMs, batchMs, clientCpuMicros: cpu.user + cpu.system, errors, allowed };
  }
}

async function clientSetup(spec: Extract<Spec, { role: 'client' }>) {
  const r = new Runner();
  const frames = buildFrames(spec.encoding, 0xbeef);
  for (let i = 0; i < spec.connections; i++) {
    const ws = new WebSocket(`ws://127.0.0.1:${spec.port}/v1/stream`, { perMessageDeflate: false, maxPayload: 64 << 20 });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const lane = new Lane(ws, frames, r);
    ws.on('message', (data: Buffer, isBinary: boolean) => lane.onMessage(data, isBinary));
    ws.on('close', (code, reason) => {
      if (lane.running || lane.busy > 0) process.stderr.write(`ws bench client: connection closed ${code} ${reason.toString()}\n`);
    });
    r.lanes.push(lane);
  }
  return {
    round: (q: RoundQ) => r.round(q.ms),
    close: () => {
      for (const l of r.lanes) l.ws.close();
    },
  };
}

/** The engine without a socket: the same keys as Promise.all batches of FRAME checks, WINDOW·connections in flight. */
async function inprocSetup() {
  const { createLimiter } = await import('../../src/index.js');
  const lim = await createLimiter({ policies: POLICIES, shards: 0, maxKeys: KEYS * 2 });
  const next = xorshift32(0xbeef);
  const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
  const seq = Array.from({ length: WINDOW * PATTERNS * FRAME }, () => keys[next() % KEYS]);
  let pos = 0;
  const batch = async (): Promise<{ n: number; allowed: number; ms: number }> => {
    const t0 = performance.now();
    const ps = new Array<Promise<Decision>>(FRAME);
    for (let i = 0; i < FRAME; i++) {
      ps[i] = lim.check({ policy: POLICY, key: seq[pos], cost: 1 });
      pos = pos + 1 === seq.length ? 0 : pos + 1;
    }
    const ds = await Promise.all(ps);
    let a = 0;
    for (const d of ds) if (d.allowed) a++;
    return { n: FRAME, allowed: a, ms: performance.now() - t0 };
  };
  return {
    async round(q: RoundQ): Promise<RoundR> {
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      let decisions = 0, allowed = 0;
      const batchMs: number[] = [];
      while (performance.now() - t0 < q.ms) {
        const b = await batch();
        decisions += b.n;
        allowed += b.allowed;
        if (batchMs.length < 20_000) batchMs.push(b.ms);
      }
      const cpu = process.cpuUsage(cpu0);
      return { decisions, elapsedMs: performance.now() - t0, batchMs, clientCpuMicros: cpu.user + cpu.system, errors: 0, allowed };
    },
    close: () => lim.close(),
  };
}

if (isChildEntry(import.meta.url)) {
  const spec = JSON.parse(process.argv[3] ?? '{}') as Spec;
  if (spec.role === 'server') {
    serverMain<Extract<Spec, { role: 'server' }>>((s) => (s.kind === 'sluice' ? startSluice(s.port ?? 0) : startBareWs(s.port ?? 0)));
  } else if (spec.role === 'client') {
    roundMain<Extract<Spec, { role: 'client' }>, RoundQ, RoundR>(clientSetup);
  } else {
    roundMain<Spec, RoundQ, RoundR>(inprocSetup);
  }
}

// ---------------------------------------------------------------------------------------------- runner

const SUBJECTS = [
  { tag: 'sluice-binary', subject: 'sluice /v1/stream, binary', server: 'sluice' as const, encoding: 'binary' as const },
  { tag: 'sluice-json', subject: 'sluice /v1/stream, JSON', server: 'sluice' as const, encoding: 'json' as const },
  { tag: 'bare-binary', subject: 'bare uWS WS (fixed answers), binary', server: 'bare' as const, encoding: 'binary' as const },
  { tag: 'inproc', subject: 'in-process createLimiter (no socket)', server: null, encoding: null },
];
const BARE = SUBJECTS[2].subject;
const INPROC = SUBJECTS[3].subject;

/** Target: binary frames, one connection, decisions/s. */
export const WS_TARGET = 1_000_000;

interface Res extends RoundR {
  serverCpuMicros: number | null;
}

function cpuMicros(a: Cpu, b: Cpu): number {
  return b.user - a.user + (b.system - a.system);
}

export const wsScenario: Scenario = {
  name: 'ws',
  summary: `/v1/stream decisions/s and batch latency, binary and JSON, 1 and 4 connections (target: binary ≥ 1 M/s on one)`,
  async run(ctx: Ctx): Promise<Section[]> {
    const q = ctx.quick;
    const rounds = q ? 2 : 5;
    const roundMs = q ? 500 : 2_000;
    const cases = [
      { tag: '1conn', label: '1 connection', connections: 1 },
      { tag: '4conn', label: '4 connections', connections: 4 },
    ];
    const plan = cases.map((c) => ({
      c,
      subs: SUBJECTS.filter((s) => (s.server !== null || c.connections === 1)).map((s) => ({ ...s, id: `ws/${c.tag}/${s.tag}` }))
        .filter((s) => ctx.want(s.id)),
    }));
    if (plan.every((p) => p.subs.length === 0)) return [];
    const sec: Section = {
      scenario: 'ws',
      id: 'ws',
      title: 'WebSocket /v1/stream: decisions per second and batch latency',
      method: `A load client (package ws, its own process) keeps ${WINDOW} frames of ${FRAME.toLocaleString('en')} checks in ` +
        `flight per connection (pre-built frames, keys uniform over ${KEYS.toLocaleString('en')}, token bucket 1e9/min so ` +
        'every check is admitted); a frame is re-sent as soon as all its answers are back. Batch latency = a frame sent → ' +
        `its last answer read. Server: startServer, shards 0, default stream limits. ${rounds} rounds of ${roundMs} ms per ` +
        'subject taken alternately (rotated) after a warm-up round each; every subject is a resident child (server ' +
        'and client), medians with the round range. Baselines: a bare uWS WebSocket that answers each binary frame with ' +
        'fixed answer records carrying the checks\' ids (the transport\'s ceiling), and the same checks through ' +
        `createLimiter in the client's place, in Promise.all batches of ${FRAME.toLocaleString('en')} (the engine's ceiling, no socket).`,
      metrics: [
        { key: 'rate', label: 'decisions/s', higherIsBetter: true },
        { key: 'p50', label: 'batch p50 ms', higherIsBetter: false },
        { key: 'p99', label: 'batch p99 ms', higherIsBetter: false },
        { key: 'scpu', label: 'server CPU ns/decision', higherIsBetter: false },
      ],
      baselines: [{ label: 'bare WS', subject: BARE }, { label: 'in-process', subject: INPROC }],
      ratioMetrics: ['rate', 'scpu'],
      rows: [],
      notes: [],
    };

    const servers = new Map<string, ServerChild>();
    for (const kind of ['sluice', 'bare'] as const) {
      if (!plan.some((p) => p.subs.some((s) => s.server === kind))) continue;
      try {
        servers.set(kind, await startServerChild(FILE, { role: 'server', kind } satisfies Spec));
      } catch (e) {
        sec.notes.push(`ws ${kind} server failed: ${(e as Error).message.split('\n')[0]}`);
      }
    }
    try {
      // Every case's children start at once (set-ups overlap, untimed); each case then runs its rounds.
      const all = await startAll(ctx, plan.flatMap(({ c, subs }) => subs.filter((s) => s.server === null || servers.has(s.server))
        .map((s) => ({ ...s, c }))), (s) => s.id,
      (s) => startRoundChild<RoundQ, RoundR>(FILE, s.server === null ? { role: 'inproc' } satisfies Spec
        : { role: 'client', port: servers.get(s.server)!.port, connections: s.c.connections, encoding: s.encoding! } satisfies Spec,
      { setupTimeoutMs: 60_000 }), sec.notes);
      for (const { c } of plan) {
        const children = all.filter((x) => x.s.c === c);
        if (children.length === 0) continue;
        const results = await alternate(ctx, children, rounds, (x) => x.s.id, async (x, r, warmup) => {
          const srv = x.s.server === null ? null : servers.get(x.s.server)!;
          if (!warmup) ctx.progress(`${x.s.id}: ${x.s.subject}, ${c.label} (round ${r + 1}/${rounds})`);
          const c0 = srv ? await srv.cpu() : null;
          const res = await x.child.round({ ms: warmup ? 300 : roundMs }, roundMs + 60_000);
          const c1 = srv ? await srv.cpu() : null;
          const out: Res = { ...res, serverCpuMicros: c0 && c1 ? cpuMicros(c0, c1) : null };
          if (!warmup) ctx.progress(`  ${(res.decisions / res.elapsedMs / 1000).toFixed(3)} M/s`);
          return out;
        }, sec.notes);
        children.forEach((x, i) => {
          const runs = results[i];
          if (runs.length === 0) return;
          const rates = runs.map((r) => (r.decisions * 1000) / r.elapsedMs);
          const rs = summary(rates);
          const lat = runs.flatMap((r) => r.batchMs).sort((a, b) => a - b);
          const scpu = runs.every((r) => r.serverCpuMicros !== null)
            ? median(runs.map((r) => (r.serverCpuMicros! * 1000) / Math.max(1, r.decisions)).sort((a, b) => a - b))
            : (median(runs.map((r) => (r.clientCpuMicros * 1000) / Math.max(1, r.decisions)).sort((a, b) => a - b)));
          const ccores = median(runs.map((r) => r.clientCpuMicros / 1000 / r.elapsedMs).sort((a, b) => a - b));
          const scores = runs.every((r) => r.serverCpuMicros !== null)
            ? median(runs.map((r) => r.serverCpuMicros! / 1000 / r.elapsedMs).sort((a, b) => a - b)) : null;
          const decided = runs.reduce((a, r) => a + r.decisions, 0);
          const allowed = runs.reduce((a, r) => a + r.allowed, 0);
          const errors = runs.reduce((a, r) => a + r.errors, 0);
          const info = [
            x.s.server === null ? `${ccores.toFixed(2)} cores (CPU column: this process)` : `server ${scores!.toFixed(2)} cores, client ${ccores.toFixed(2)} cores`,
            `${((100 * allowed) / Math.max(1, decided)).toFixed(1)}% admitted`,
          ];
          if (errors > 0) info.push(`${errors} errors`);
          if (x.s.tag === 'sluice-binary' && c.connections === 1) {
            info.push(`target ${(WS_TARGET / 1e6).toFixed(0)} M/s: ${(rs.median / WS_TARGET).toFixed(2)}×`);
          }
          const row: Row = {
            id: x.s.id, case: c.label, subject: x.s.subject,
            values: { rate: rs.median, p50: percentile(lat, 50), p99: percentile(lat, 99), scpu },
            spread: { rate: [rs.min, rs.max] },
            info: info.join(', '),
            extra: { rates, batches: lat.length },
          };
          sec.rows.push(row);
        });
      }
      await stopAll(all);
    } finally {
      await Promise.all([...servers.values()].map((s) => s.stop()));
    }
    const bin = sec.rows.find((r) => r.id === 'ws/1conn/sluice-binary');
    if (bin) {
      const ratio = bin.values.rate / WS_TARGET;
      sec.notes.push(`Target: binary frames over one connection ≥ 1 M decisions/s. Measured ${(bin.values.rate / 1e6).toFixed(3)} M/s: ` +
        `${ratio.toFixed(2)}× the target (${ratio >= 1 ? 'met' : `missed by ${((1 - ratio) * 100).toFixed(0)}%`}). See bench/README.md for the profile.`);
    }
    return [sec];
  },
};
