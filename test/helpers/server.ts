/**
 * Test servers: a limiter on a {@link ManualClock} behind the real uWebSockets.js front, bound to 127.0.0.1 on
 * a free port (port 0), plus small HTTP helpers and a way to run the built `sluice` CLI as a child process.
 *
 * `shards > 0` starts worker threads from the BUILT dist/ (src/shard/pool.ts): run `npm run build` first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLimiter } from '../../src/index.js';
import { startServer, type ServerOptions, type SluiceServer } from '../../src/server/http.js';
import type { Limiter, LimiterOptions } from '../../src/types.js';
import { ManualClock } from './clock.js';
import { HttpConn, REQUEST_TIMEOUT_MS } from './http-conn.js';
import { TEST_MAX_KEYS } from './limiter.js';
import { sharedFile } from './shared.js';

/** The project root (the folder holding package.json). */
export const PROJECT_ROOT = path.resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..');
/** The shared access trace: ../shared/data/access-trace.csv, or the checkout's copy (test/helpers/shared.ts). */
export const TRACE_PATH = sharedFile('data/access-trace.csv');
/** The built CLI entry point. */
export const SLUICE_BIN = path.join(PROJECT_ROOT, 'bin', 'sluice.js');

export interface TestServerOptions extends Omit<ServerOptions, 'limiter' | 'host' | 'port'> {
  policies: LimiterOptions['policies'];
  /** Worker shards (0: decide in-thread). Default 0. */
  shards?: number;
  /** The clock to decide with; default a new ManualClock at a whole minute. */
  clock?: ManualClock;
  /**
   * Key table capacity. Default {@link TEST_MAX_KEYS}, not the library's 1,000,000: a table that size costs
   * ~100 ms to allocate per limiter, and no test here holds more than a few thousand keys.
   */
  maxKeys?: number;
  maxPending?: number;
  /** Redis, for strict policies. */
  redis?: LimiterOptions['redis'];
}

export { TEST_MAX_KEYS };

export interface TestServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  clock: ManualClock;
  limiter: Limiter;
  server: SluiceServer;
  /** Closes the server, then the limiter. Safe to call more than once. */
  close(): Promise<void>;
}

/** Starts a limiter on a manual clock and the HTTP front on 127.0.0.1, port 0. */
export async function startTestServer(o: TestServerOptions): Promise<TestServer> {
  const clock = o.clock ?? new ManualClock();
  const limiter = await createLimiter({
    policies: o.policies, shards: o.shards ?? 0, clock: clock.now, maxKeys: o.maxKeys ?? TEST_MAX_KEYS, maxPending: o.maxPending,
    ...(o.redis !== undefined ? { redis: o.redis } : {}),
  });
  let server: SluiceServer;
  try {
    server = await startServer({
      limiter, host: '127.0.0.1', port: 0, maxBodyBytes: o.maxBodyBytes, maxBatchItems: o.maxBatchItems,
      authDenyStatus: o.authDenyStatus, logger: o.logger,
      statusPage: o.statusPage, activity: o.activity, hotKeyMetrics: o.hotKeyMetrics,
    });
  } catch (e) {
    await limiter.close();
    throw e;
  }
  let closing: Promise<void> | null = null;
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port,
    clock,
    limiter,
    server,
    close: () => (closing ??= server.close().then(() => limiter.close())),
  };
}

/** Tracks servers so one afterEach/afterAll closes them all. */
export class ServerPool {
  private readonly open: TestServer[] = [];

  async start(o: TestServerOptions): Promise<TestServer> {
    const s = await startTestServer(o);
    this.open.push(s);
    return s;
  }

  async closeAll(): Promise<void> {
    const all = this.open.splice(0);
    await Promise.all(all.map((s) => s.close()));
  }
}

/** A response read in full. */
export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  /** The body parsed as JSON (undefined when empty or not JSON). */
  json: any;
  contentType: string | null;
}

export { REQUEST_TIMEOUT_MS };

/** fetch with a timeout, reading the whole body. */
export async function send(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, { ...init, signal: init.signal ?? AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  const text = await res.text();
  let json: unknown;
  if (text !== '') {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  return { status: res.status, headers: res.headers, text, json, contentType: res.headers.get('content-type') };
}

/** POST a JSON text (a string is sent as is, anything else is JSON.stringified). */
export function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return send(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** A query string with every value percent-encoded (encodeURIComponent: `+` becomes %2B, space %20). */
export function query(params: Record<string, string | number>): string {
  return Object.entries(params).map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`).join('&');
}

// ---------------------------------------------------------------------------------------------------------
// The built CLI as a child process
// ---------------------------------------------------------------------------------------------------------

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `node bin/sluice.js ...args` to completion (killed after `timeoutMs`). */
export function runSluice(args: string[], opts: SluiceRunOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [opts.bin ?? SLUICE_BIN, ...args], {
      cwd: opts.cwd ?? PROJECT_ROOT, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 20_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** How {@link runSluice} and {@link spawnServe} start the CLI. */
export interface SluiceRunOptions {
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  /** The CLI script to run; default this checkout's bin/sluice.js (an installed copy's, for the package test). */
  bin?: string;
  /** Working directory; default the project root. */
  cwd?: string;
}

/** A running `sluice serve`. */
export interface ServeProcess {
  child: ChildProcess;
  port: number;
  url: string;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** Parsed JSON log lines of stdout so far. */
  logs(): Array<Record<string, unknown>>;
  /** Resolves with the exit code and signal once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILLs the process if it is still running. */
  kill(): Promise<void>;
}

/**
 * Spawns `node bin/sluice.js serve --host 127.0.0.1 --port 0 ...extra` and waits for the "sluice serving"
 * log line, whose `port` field is the port chosen.
 */
export function spawnServe(extra: string[] = [], opts: SluiceRunOptions = {}): Promise<ServeProcess> {
  const child = spawn(process.execPath, [opts.bin ?? SLUICE_BIN, 'serve', '--host', '127.0.0.1', '--port', '0', ...extra], {
    cwd: opts.cwd ?? PROJECT_ROOT, env: { ...process.env, LOG_LEVEL: 'info', ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  const logs = (): Array<Record<string, unknown>> => out.split('\n').filter((l) => l.trim() !== '').flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
  const kill = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void kill();
      reject(new Error(`sluice serve did not log "sluice serving" in time; stdout: ${out} stderr: ${err}`));
    }, opts.timeoutMs ?? 15_000);
    child.stdout!.on('data', (d: string) => {
      out += d;
      const line = logs().find((l) => l.msg === 'sluice serving');
      if (line === undefined || typeof line.port !== 'number') return;
      clearTimeout(timer);
      const port = line.port;
      resolve({
        child, port, url: `http://127.0.0.1:${port}`, stdout: () => out, stderr: () => err, logs, exited, kill,
      });
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`sluice serve exited early (code ${code}, signal ${signal}); stdout: ${out} stderr: ${err}`));
    });
  });
}

/**
 * Starts `n` `sluice serve` instances with `args` (a config and `--redis URL`), and warms each up on the strict
 * policy `warm` (token bucket, large): checks until one is decided by Redis (the Redis connection comes up
 * after the listening socket), then 20 more at once, so a first burst does not pay for JIT warm-up.
 */
export async function serveStrict(n: number, args: string[]): Promise<ServeProcess[]> {
  const started = await Promise.allSettled(Array.from({ length: n }, () => spawnServe(args, { env: { LOG_LEVEL: 'info' } })));
  const procs = started.flatMap((x) => (x.status === 'fulfilled' ? [x.value] : []));
  const failed = started.find((x) => x.status === 'rejected');
  if (failed) {
    await Promise.all(procs.map((p) => p.kill()));
    throw (failed as PromiseRejectedResult).reason;
  }
  for (const proc of procs) {
    const until = Date.now() + 10_000;
    for (;;) {
      const a = await send(`${proc.url}/v1/check?policy=warm&key=w&cost=1`);
      if (a.status === 200 && (a.json as { degraded?: boolean }).degraded !== true) break;
      if (Date.now() > until) throw new Error(`${proc.url} never decided in Redis`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await Promise.all(Array.from({ length: 20 }, (_, i) => send(`${proc.url}/v1/check?policy=warm&key=w${i}&cost=1`)));
  }
  return procs;
}

/** What {@link hammerOneKey} counted: 200 answers admitted, denied or degraded, and anything else. */
export interface HammerTally { admitted: number; denied: number; degraded: number; other: number }

/**
 * Sends `checks` checks of cost 1 on one key of `policy` through every instance at once: `clientsPerInstance`
 * sequential HTTP clients per instance, each on a keep-alive connection of its own (opened first), released
 * together by one barrier (the herd the exactness tests need). The clients are test/helpers/http-conn.ts
 * connections, not fetch: fetch's own CPU per request was several times what the instances spent, on the
 * same two cores.
 */
export async function hammerOneKey(procs: ServeProcess[], o: { policy: string; key: string; checks: number; clientsPerInstance: number }): Promise<HammerTally> {
  const t: HammerTally = { admitted: 0, denied: 0, degraded: 0, other: 0 };
  const per = o.checks / (procs.length * o.clientsPerInstance);
  const conns = await Promise.all(procs.flatMap((proc) => Array.from({ length: o.clientsPerInstance }, () => HttpConn.open(proc.port))));
  try {
    let release!: () => void;
    const barrier = new Promise<void>((res) => (release = res));
    const clients = conns.map(async (conn) => {
      await barrier;
      for (let i = 0; i < per; i++) {
        const a = await conn.get(`/v1/check?policy=${o.policy}&key=${o.key}&cost=1`);
        if (a.status !== 200) t.other++;
        else if (a.json.degraded === true) t.degraded++;
        else if (a.json.allowed === true) t.admitted++;
        else t.denied++;
      }
    });
    release();
    await Promise.all(clients);
  } finally {
    for (const c of conns) c.close();
  }
  return t;
}
