/**
 * Helpers for the /v1/stream, client and middleware tests: a server on a ManualClock with the subscription
 * timer off (tests call `stream.tick()`), and a WebSocket wrapper that collects answers with timeouts.
 */
import WebSocket from 'ws';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { createLimiter } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import type { StreamEndpoint, StreamOptions } from '../../src/server/ws.js';
import { readAnswers } from '../../src/wire/binary-read.js';
import { type BinaryAnswer } from '../../src/wire/binary-format.js';
import type { Limiter, LimiterOptions } from '../../src/types.js';
import { ManualClock } from '../helpers/clock.js';

const BUCKET: PolicySpec = { algorithm: 'token_bucket', limit: 10, period: 6000 };
/**
 * The stream batch tests' policies (ws-batch, ws-json-batch): a bucket, a window, several limits, lists, a
 * shadow and descriptors, so one frame meets every kind of decision the batch path makes.
 */
export const BATCH_POLICIES: Record<string, PolicySpec> = {
  p: BUCKET,
  w: { algorithm: 'fixed_window', limit: 2, period: 60_000 },
  m: { limits: [{ algorithm: 'token_bucket', limit: 5, period: 6000 }, { algorithm: 'sliding_window', limit: 3, period: 60_000, name: 'm-window' }] },
  l: { ...BUCKET, allow: ['vip'], deny: ['bad'] },
  sh: { algorithm: 'token_bucket', limit: 1, period: 60_000, shadow: true },
  d: { ...BUCKET, descriptors: ['tenant', 'action'] },
};

export interface StreamServer {
  url: string;
  wsUrl: string;
  port: number;
  clock: ManualClock;
  limiter: Limiter;
  server: SluiceServer;
  stream: StreamEndpoint;
  close(): Promise<void>;
}

export interface StreamServerOptions {
  policies: LimiterOptions['policies'];
  shards?: number;
  clock?: ManualClock;
  maxPending?: number;
  maxKeys?: number;
  /** The limiter's store, for policies kept in Redis. */
  redis?: LimiterOptions['redis'];
  /** Or a store of the test's own (a MemoryStore that fails on demand: test/helpers/flaky-store.ts). */
  store?: LimiterOptions['store'];
  /** Stream options; tickMs defaults to 0 here (tests tick by hand). */
  stream?: StreamOptions;
  port?: number;
}

const open = new Set<StreamServer>();

/** A limiter on a ManualClock behind the real server on 127.0.0.1 (port 0 unless given). */
export async function startStreamServer(o: StreamServerOptions): Promise<StreamServer> {
  const clock = o.clock ?? new ManualClock();
  const limiter = await createLimiter({
    policies: o.policies, shards: o.shards ?? 0, clock: clock.now, maxKeys: o.maxKeys ?? 16_384, maxPending: o.maxPending,
    ...(o.redis === undefined ? {} : { redis: o.redis }),
    ...(o.store === undefined ? {} : { store: o.store }),
  });
  let server: SluiceServer;
  try {
    server = await startServer({
      limiter, host: '127.0.0.1', port: o.port ?? 0, stream: { tickMs: 0, clock: clock.now, ...o.stream },
    });
  } catch (e) {
    await limiter.close();
    throw e;
  }
  let closing: Promise<void> | null = null;
  const s: StreamServer = {
    url: `http://127.0.0.1:${server.port}`,
    wsUrl: `ws://127.0.0.1:${server.port}/v1/stream`,
    port: server.port,
    clock, limiter, server, stream: server.stream!,
    close: () => (closing ??= server.close().then(() => limiter.close()).finally(() => open.delete(s))),
  };
  open.add(s);
  return s;
}

/** Closes every server started by startStreamServer (for afterEach). */
export async function closeAllServers(): Promise<void> {
  await Promise.all([...open].map((s) => s.close()));
}

/** One answer as the tests see it: JSON objects as parsed, binary records decoded. */
export type Answer = Record<string, any>;

/** A WebSocket that records every message and close. Every wait has a timeout. */
export class TestSocket {
  readonly ws: WebSocket;
  readonly texts: Answer[] = [];
  readonly binaries: BinaryAnswer[] = [];
  /** Raw frames in arrival order. */
  readonly frames: Array<{ binary: boolean; data: Buffer }> = [];
  closeInfo: { code: number; reason: string } | null = null;
  private waiters: Array<() => void> = [];
  private static readonly all = new Set<TestSocket>();

  private constructor(ws: WebSocket) {
    this.ws = ws;
    TestSocket.all.add(this);
    ws.on('message', (data: Buffer, binary: boolean) => {
      this.frames.push({ binary, data });
      if (binary) {
        const a = readAnswers(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
        if (typeof a === 'string') throw new Error(`bad answers frame: ${a}`);
        this.binaries.push(...a);
      } else {
        const v = JSON.parse(data.toString('utf8'));
        if (Array.isArray(v)) this.texts.push(...v);
        else this.texts.push(v);
      }
      this.wake();
    });
    ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString() };
      TestSocket.all.delete(this);
      this.wake();
    });
    ws.on('error', () => {});
  }

  static open(url: string, protocols?: string[]): Promise<TestSocket> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, protocols, { perMessageDeflate: false, maxPayload: 256 << 20 });
      const s = new TestSocket(ws);
      const timer = setTimeout(() => {
        ws.terminate();
        reject(new Error('open timed out'));
      }, 5000);
      ws.once('open', () => {
        clearTimeout(timer);
        resolve(s);
      });
      ws.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
  }

  /** Terminates every socket still open (for afterEach). */
  static closeAll(): void {
    for (const s of TestSocket.all) s.ws.terminate();
    TestSocket.all.clear();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  get answerCount(): number {
    return this.texts.length + this.binaries.length;
  }

  /** Resolves once `pred()` holds; rejects after `timeoutMs`. */
  until(pred: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
    if (pred()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error(`timed out waiting for ${what} (have ${this.texts.length} JSON and ${this.binaries.length} binary answers, close ${JSON.stringify(this.closeInfo)})`));
      }, timeoutMs);
      const check = (): void => {
        if (pred()) {
          clearTimeout(timer);
          resolve();
        } else this.waiters.push(check);
      };
      this.waiters.push(check);
    });
  }

  /** Waits for `n` answers in total (JSON items plus binary records). */
  answers(n: number, timeoutMs = 5000): Promise<void> {
    return this.until(() => this.answerCount >= n, timeoutMs, `${n} answers`);
  }

  /** Waits for the connection to close and returns its code and reason. */
  async closed(timeoutMs = 5000): Promise<{ code: number; reason: string }> {
    await this.until(() => this.closeInfo !== null, timeoutMs, 'close');
    return this.closeInfo!;
  }

  send(data: string | Uint8Array): void {
    this.ws.send(data, { binary: typeof data !== 'string' });
  }

  sendJson(v: unknown): void {
    this.ws.send(JSON.stringify(v));
  }

  close(): void {
    this.ws.terminate();
  }
}

/** Sleeps `ms` real milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
