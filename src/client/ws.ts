import WebSocket from 'ws';
import type { CheckRequest, Decision } from '../types/decision.js';
import { ANSWER_DEGRADED, ANSWER_DELAYED, ANSWER_RULE_SHIFT, ANSWER_RULES, ANSWER_NO_ID, ANSWER_SUBSCRIBED, CHECK_NO_WAIT, CHECK_SUBSCRIBE, FRAME_CHECKS, KIND_ALLOWED, KIND_DENIED, KIND_ENDED, KIND_ERROR, KIND_READY } from '../wire/binary-format.js';
import { FrameWriter } from '../wire/binary-write.js';
import { AnswerReader } from '../wire/binary-read.js';
import { Backoff } from './backoff.js';
import { SluiceClientError, isRetryable, remoteError, clientClosed, clientOverloaded, notADecision, notAReadyEvent } from './errors.js';
import { asError, callSafely } from '../util/callback.js';
import { isWellFormed } from '../util/text.js';
import { decisionProblem, readyProblem } from '../wire/decision-shape.js';
import type { CheckOptions, ClientDecision, Pending, ReadyCallback, ReadyEvent, Transport, TransportStats } from './types.js';

export interface WsTransportOptions {
  /** `ws://host:port/v1/stream` */
  url: string;
  encoding: 'binary' | 'json';
  timeoutMs: number;
  onDisconnect: 'resend' | 'fail';
  maxAttempts: number;
  backoff: Backoff;
  maxPending: number;
  maxInFlight: number;
  headers: Record<string, string> | undefined;
  /** Ms of silence from the server after which the client pings it. */
  pingIntervalMs: number;
  /** Ms a ping may go unanswered (no pong, nothing else either) before the connection is dropped as dead. */
  pongTimeoutMs: number;
  /** Ms the opening handshake (connect, TLS, upgrade) may take before the attempt is dropped. */
  connectTimeoutMs: number;
  /** Told of every decision before it is handed over, with the time (performance.now) its check was issued. */
  observe?: (req: CheckRequest, d: ClientDecision, issuedAt: number) => void;
}

/** Checks per frame: the server's default `maxChecksPerFrame`. */
const FRAME_CHECKS_MAX = 4096;
/** Stop sending while this many bytes are unsent on the socket; resume when a send completes. */
const HIGH_WATER = 1 << 20;
/** A 503 answer (OVERLOADED...) over the WebSocket carries no Retry-After: wait what the HTTP front would say. */
const RETRY_503_MS = 1000;

/**
 * One multiplexed WebSocket to `/v1/stream`. Checks issued in one turn go out in one frame (binary, or JSON
 * for descriptor checks); answers are matched by id. On a dropped connection the checks sent on it are re-sent
 * on the next one (or failed, per `onDisconnect`), and the socket reconnects with exponential backoff and
 * full jitter; an upgrade refused with a 503 waits at least its Retry-After.
 */
export class WsTransport implements Transport {
  private readonly o: WsTransportOptions;
  private ws: WebSocket | null = null;
  private open = false;
  private closed = false;
  /** Increments on every open; a check remembers the generation it was sent on. */
  private gen = 0;
  private nextId = 1;
  /** Every unsettled check, in creation order (so in deadline order). */
  private readonly pending = new Map<number, Pending>();
  /** Checks to send, from `outHead` on. */
  private outbox: Pending[] = [];
  private outHead = 0;
  /** Checks sent on the current socket and not answered. */
  private inFlight = 0;
  private readonly subs = new Map<number, ReadyCallback>();
  private flushScheduled = false;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private retryAfterMs = 0;
  /** Heartbeat: the timer, when the server was last heard from and when the unanswered ping went (0: none). */
  private beatTimer: NodeJS.Timeout | null = null;
  private lastHeard = 0;
  private pingAt = 0;
  /** Why the client dropped the current socket itself (a ping unanswered), for the close's message. */
  private dropReason = '';
  private readonly writer = new FrameWriter(FRAME_CHECKS, 1 << 16);
  private readonly reader = new AnswerReader();
  /** The promise executor of every check: one shared function, so a check allocates no closure for it. */
  private slot: Pending | null = null;
  private readonly executor = (resolve: (d: ClientDecision) => void, reject: (e: Error) => void): void => {
    this.slot!.resolve = resolve;
    this.slot!.reject = reject;
  };
  private waiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  private resent = 0;
  private connects = 0;

  constructor(o: WsTransportOptions) {
    this.o = o;
    this.dial();
  }

  get connected(): boolean {
    return this.open;
  }

  rateLimitPolicy(): string | undefined {
    return undefined;
  }

  stats(): TransportStats {
    return { pending: this.pending.size, resent: this.resent, connects: this.connects, subscriptions: this.subs.size };
  }

  connect(): Promise<void> {
    if (this.closed) return Promise.reject(clientClosed());
    if (this.open) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  check(req: CheckRequest, opts: CheckOptions | undefined): Promise<ClientDecision> {
    if (this.closed) return Promise.reject(clientClosed());
    if (this.pending.size >= this.o.maxPending) {
      return Promise.reject(clientOverloaded(this.o.maxPending));
    }
    const p: Pending = {
      id: this.allocId(), req, resolve: noop, reject: noop, deadline: performance.now() + this.o.timeoutMs,
      attempts: 0, sentOn: 0, done: false, onReady: opts?.onReady,
    };
    this.slot = p;
    const promise = new Promise<ClientDecision>(this.executor);
    this.slot = null;
    this.pending.set(p.id, p);
    this.outbox.push(p);
    this.scheduleFlush();
    this.startSweep();
    return promise;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    this.stopSweep();
    this.stopHeartbeat();
    const err = clientClosed();
    for (const p of this.pending.values()) this.fail(p, err);
    this.pending.clear();
    this.outbox = [];
    this.outHead = 0;
    for (const cb of this.subs.values()) cb(err);
    this.subs.clear();
    for (const w of this.waiters.splice(0)) w.reject(err);
    const ws = this.ws;
    if (ws !== null && ws.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((resolve) => {
        ws.once('close', () => resolve());
        if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
        else ws.close(1000, 'client closed');
        // a server that never answers the close handshake: give up after a while
        setTimeout(() => {
          ws.terminate();
          resolve();
        }, 1000).unref();
      });
    }
  }

  /** A u32 id not held by a pending check or a subscription. */
  private allocId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = this.nextId === 0xffffffff ? 1 : this.nextId + 1;
      if (!this.pending.has(id) && !this.subs.has(id)) return id;
    }
  }

  // -- connection ------------------------------------------------------------------------------------

  private dial(): void {
    if (this.closed) return;
    const ws = new WebSocket(this.o.url, {
      perMessageDeflate: false, headers: this.o.headers, maxPayload: 64 << 20, handshakeTimeout: this.o.connectTimeoutMs,
    });
    this.ws = ws;
    this.dropReason = '';
    ws.on('open', () => {
      if (this.ws !== ws) return;
      this.open = true;
      this.startHeartbeat(ws);
      this.gen++;
      this.connects++;
      this.o.backoff.reset();
      this.retryAfterMs = 0;
      for (const w of this.waiters.splice(0)) w.resolve();
      this.flush();
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (this.ws !== ws) return;
      this.lastHeard = performance.now();
      this.onMessage(data, isBinary);
    });
    // a pong (or the server's own ping, which ws answers) says the connection is alive
    const heard = (): void => {
      if (this.ws === ws) this.lastHeard = performance.now();
    };
    ws.on('pong', heard);
    ws.on('ping', heard);
    ws.on('unexpected-response', (_req, res) => {
      // e.g. 503 + Retry-After from a draining server: wait at least that long before the next attempt
      const ra = Number(res.headers['retry-after']);
      if (Number.isFinite(ra) && ra > 0) this.retryAfterMs = ra * 1000;
      res.resume();
      ws.terminate();
    });
    ws.on('error', () => {
      // 'close' follows and decides what to do
    });
    ws.on('close', (code: number, reason: Buffer) => {
      if (this.ws === ws) this.onClose(code, reason.length === 0 ? this.dropReason : reason.toString());
    });
  }

  // -- heartbeat: a connection that goes silent is pinged; one that does not answer is dropped -------------
  // (a proxy or NAT that stops forwarding without closing leaves the socket open and every check unanswered)

  private startHeartbeat(ws: WebSocket): void {
    this.stopHeartbeat();
    this.lastHeard = performance.now();
    this.pingAt = 0;
    this.armBeat(ws, this.o.pingIntervalMs);
  }

  private stopHeartbeat(): void {
    if (this.beatTimer === null) return;
    clearTimeout(this.beatTimer);
    this.beatTimer = null;
  }

  private armBeat(ws: WebSocket, ms: number): void {
    this.beatTimer = setTimeout(() => this.beat(ws), Math.max(1, Math.ceil(ms)));
    this.beatTimer.unref();
  }

  private beat(ws: WebSocket): void {
    this.beatTimer = null;
    if (this.ws !== ws || !this.open) return;
    const now = performance.now();
    if (this.pingAt !== 0) {
      if (this.lastHeard < this.pingAt) {
        const left = this.pingAt + this.o.pongTimeoutMs - now;
        if (left > 0) return this.armBeat(ws, left);
        // dead: drop it; 'close' (1006) re-sends or fails its checks and reconnects, as for any drop
        this.dropReason = `no answer to a ping within ${this.o.pongTimeoutMs} ms`;
        ws.terminate();
        return;
      }
      this.pingAt = 0;
    }
    const quiet = now - this.lastHeard;
    if (quiet < this.o.pingIntervalMs) return this.armBeat(ws, this.o.pingIntervalMs - quiet);
    this.pingAt = now;
    ws.ping();
    this.armBeat(ws, this.o.pongTimeoutMs);
  }

  private onClose(code: number, reason: string): void {
    this.stopHeartbeat();
    const wasOpen = this.open;
    this.open = false;
    this.ws = null;
    this.inFlight = 0;
    if (wasOpen) {
      // 1002 and 1009 say the frames themselves were refused: sending them again would be refused again.
      const fatal = code === 1002 || code === 1009;
      const why = `connection closed (${code}${reason === '' ? '' : ' ' + reason})`;
      const again: Pending[] = [];
      for (const p of this.pending.values()) {
        if (p.sentOn !== this.gen || p.done) continue;
        if (!fatal && this.o.onDisconnect === 'resend' && p.attempts < this.o.maxAttempts) {
          p.sentOn = 0;
          again.push(p);
        } else {
          this.pending.delete(p.id);
          this.fail(p, new SluiceClientError(fatal ? 'PROTOCOL' : 'UNAVAILABLE', `check not answered: ${why}`));
        }
      }
      if (again.length > 0) {
        this.resent += again.length;
        this.outbox = again.concat(this.outbox.slice(this.outHead));
        this.outHead = 0;
      }
      if (this.subs.size > 0) {
        const err = new SluiceClientError('UNAVAILABLE', `subscription ended: ${why}`);
        const cbs = [...this.subs.values()];
        this.subs.clear();
        for (const cb of cbs) cb(err);
      }
    }
    if (this.closed) return;
    const delay = Math.max(this.o.backoff.next(), this.retryAfterMs);
    this.retryAfterMs = 0;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.dial();
    }, delay);
    this.reconnectTimer.unref();
  }

  // -- sending ---------------------------------------------------------------------------------------

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(this.flushNow);
  }

  private readonly flushNow = (): void => {
    this.flushScheduled = false;
    this.flush();
  };

  private readonly onWritten = (): void => {
    if (this.outHead < this.outbox.length) this.scheduleFlush();
  };

  private flush(): void {
    const ws = this.ws;
    if (!this.open || ws === null) return;
    const box = this.outbox;
    let i = this.outHead;
    const json: string[] = [];
    const writer = this.writer;
    while (i < box.length && this.inFlight < this.o.maxInFlight && ws.bufferedAmount <= HIGH_WATER) {
      const p = box[i++];
      if (p.done) continue;
      p.attempts++;
      p.sentOn = this.gen;
      this.inFlight++;
      const r = p.req;
      // no wait (onLimit: delay): a delayed admission comes back at once and the client waits it out
      // (src/client/index.ts), so a hold on the server never runs into timeoutMs
      const flags = (p.onReady !== undefined ? CHECK_SUBSCRIBE : 0) | CHECK_NO_WAIT;
      if (this.o.encoding === 'binary' && this.binaryOk(r)) writer.check(p.id, r.policy, r.key!, r.cost, flags);
      else json.push(checkJson(p.id, r, p.onReady !== undefined));
      if (writer.count >= FRAME_CHECKS_MAX) this.sendFrame(ws, writer.finish()!, true);
      if (json.length >= FRAME_CHECKS_MAX) this.sendFrame(ws, `[${json.splice(0).join(',')}]`, false);
    }
    const frame = writer.finish();
    if (frame !== null) this.sendFrame(ws, frame, true);
    if (json.length > 0) this.sendFrame(ws, json.length === 1 ? json[0] : `[${json.join(',')}]`, false);
    if (i === box.length) {
      this.outbox = [];
      this.outHead = 0;
    } else if (i > 4096 && i * 2 > box.length) {
      this.outbox = box.slice(i);
      this.outHead = 0;
    } else this.outHead = i;
  }

  private sendFrame(ws: WebSocket, data: Uint8Array | string, binary: boolean): void {
    ws.send(data, { binary }, this.onWritten);
  }

  /**
   * Whether a check fits the binary format: a key (not descriptors) and a numeric cost, a policy and key without
   * lone surrogates; others go as JSON. UTF-8 cannot carry a lone surrogate (it would be written as U+FFFD, so
   * '\ud800k', '\udc00k' and '\ufffdk' would be one key): as JSON the server refuses it as over HTTP,
   * INVALID_ARGUMENT naming `key`.
   */
  private binaryOk(r: CheckRequest): boolean {
    return typeof r.key === 'string' && r.descriptors === undefined && typeof r.policy === 'string' && r.policy.length <= 64 &&
      typeof r.cost === 'number' && r.key.length <= 1024 && isWellFormed(r.key) && isWellFormed(r.policy);
  }

  // -- answers ---------------------------------------------------------------------------------------

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (isBinary) {
      const r = this.reader;
      const bad = r.reset(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      if (bad !== null) return this.protocolError(`unreadable answers frame: ${bad}`);
      while (r.next()) this.binaryAnswer(r);
      return;
    }
    let v: unknown;
    try {
      v = JSON.parse(data.toString('utf8'));
    } catch {
      return this.protocolError('unreadable JSON answer');
    }
    if (Array.isArray(v)) for (const a of v) this.jsonAnswer(a);
    else this.jsonAnswer(v);
  }

  private binaryAnswer(a: AnswerReader): void {
    if (a.kind === KIND_ALLOWED || a.kind === KIND_DENIED) {
      const delayed = (a.flags & ANSWER_DELAYED) !== 0;
      const d: ClientDecision = {
        allowed: a.kind === KIND_ALLOWED, limit: a.limit, remaining: a.remaining, resetAfterMs: a.resetAfterMs,
        retryAfterMs: delayed ? 0 : a.retryAfterMs, policy: a.name,
      };
      if (delayed) d.delayMs = a.retryAfterMs!; // onLimit: delay: the wait rides in the retryAfterMs place
      if (a.text !== '') d.reason = a.text;
      // f64 fields can hold anything (NaN, fractions, a negative count): the same check as a JSON answer's
      const bad = decisionProblem(d);
      if (bad !== null) return this.errored(a.id, notADecision(`stream answer to check ${a.id}`, bad));
      degradedFromFlags(a.flags, d);
      return this.decided(a.id, d, (a.flags & ANSWER_SUBSCRIBED) !== 0);
    }
    if (a.kind === KIND_ERROR) {
      const err = remoteError({ code: a.name, detail: a.text, field: a.field, status: a.status });
      if ((a.flags & ANSWER_NO_ID) !== 0) return this.protocolError(`server refused a frame: ${err.message}`);
      return this.errored(a.id, err);
    }
    if (a.kind === KIND_READY) {
      const ev: ReadyEvent = { limit: a.limit, remaining: a.remaining, resetAfterMs: a.resetAfterMs, policy: a.name };
      degradedFromFlags(a.flags, ev);
      return this.ready(a.id, null, ev);
    }
    if (a.kind === KIND_ENDED) {
      const err = a.name === '' ? null : remoteError({ code: a.name, detail: a.text, field: a.field, status: a.status });
      return this.ended(a.id, err);
    }
  }

  private jsonAnswer(v: unknown): void {
    if (typeof v !== 'object' || v === null) return this.protocolError('answer is not an object');
    const a = v as Record<string, unknown>;
    if (typeof a.id !== 'number') {
      const e = a.error as Record<string, unknown> | undefined;
      return this.protocolError(`server refused a frame: ${typeof e?.detail === 'string' ? e.detail : 'no id'}`);
    }
    const id = a.id;
    if (a.ready === true) {
      const bad = readyProblem(a);
      if (bad !== null) return this.ended(id, notAReadyEvent(id, bad));
      const ev: ReadyEvent = {
        limit: a.limit as number, remaining: a.remaining as number, resetAfterMs: a.resetAfterMs as number, policy: a.policy as string,
      };
      degradedFromJson(a, ev);
      return this.ready(id, null, ev);
    }
    if (a.ready === false) return this.ended(id, remoteError((a.error ?? {}) as Record<string, unknown>));
    if (a.unsubscribed !== undefined) return this.ended(id, null);
    if (a.error !== undefined) {
      if (typeof a.error !== 'object' || a.error === null) return this.errored(id, notADecision(`stream answer to check ${id}`, 'error: must be an object'));
      return this.errored(id, remoteError(a.error as Record<string, unknown>));
    }
    const bad = decisionProblem(a);
    if (bad !== null) return this.errored(id, notADecision(`stream answer to check ${id}`, bad));
    const d: ClientDecision = {
      allowed: a.allowed as boolean, limit: a.limit as number, remaining: a.remaining as number,
      resetAfterMs: a.resetAfterMs as number, retryAfterMs: a.retryAfterMs as number | null, policy: a.policy as string,
    };
    if (typeof a.reason === 'string') d.reason = a.reason;
    if (typeof a.delayMs === 'number') d.delayMs = a.delayMs;
    degradedFromJson(a, d);
    this.decided(id, d, a.subscribed === true);
  }

  private take(id: number): Pending | undefined {
    const p = this.pending.get(id);
    if (p === undefined || p.done) return undefined; // timed out already, or a stale answer
    this.pending.delete(id);
    if (p.sentOn === this.gen && this.inFlight > 0) this.inFlight--;
    if (this.pending.size === 0) this.stopSweep();
    // refill the window in batches rather than one check per answer
    if (this.outHead < this.outbox.length && this.inFlight <= this.o.maxInFlight >> 1) this.scheduleFlush();
    return p;
  }

  private decided(id: number, d: ClientDecision, subscribed: boolean): void {
    const p = this.take(id);
    if (p === undefined) return;
    p.done = true;
    if (p.onReady !== undefined) {
      d.subscribed = subscribed;
      if (subscribed) this.subs.set(id, p.onReady);
    }
    try {
      this.o.observe?.(p.req, d, p.deadline - this.o.timeoutMs);
    } catch (e) {
      // the check is settled either way: a failing observer fails it rather than leave it pending
      return p.reject(asError(e));
    }
    p.resolve(d);
  }

  private errored(id: number, e: Error): void {
    const p = this.pending.get(id);
    if (p === undefined || p.done) return;
    const wait = RETRY_503_MS;
    if (isRetryable(e) && p.attempts < this.o.maxAttempts && performance.now() + wait < p.deadline) {
      // the server is overloaded or draining: ask again after what its HTTP front's Retry-After would say
      if (p.sentOn === this.gen && this.inFlight > 0) this.inFlight--;
      p.sentOn = 0;
      this.resent++;
      setTimeout(() => {
        if (p.done) return;
        this.outbox.push(p);
        this.scheduleFlush();
      }, wait).unref();
      return;
    }
    this.take(id);
    this.fail(p, e);
  }

  private ready(id: number, err: Error | null, ev: ReadyEvent): void {
    const cb = this.subs.get(id);
    if (cb === undefined) return;
    this.subs.delete(id);
    tell(cb, err, ev);
  }

  private ended(id: number, err: Error | null): void {
    const cb = this.subs.get(id);
    if (cb === undefined) return;
    this.subs.delete(id);
    if (err !== null) tell(cb, err);
  }

  /** The server sent something this client cannot match to a check: drop the connection and start over. */
  private protocolError(why: string): void {
    this.ws?.close(1002, why.slice(0, 120));
  }

  private fail(p: Pending, e: Error): void {
    if (p.done) return;
    p.done = true;
    p.reject(e);
  }

  // -- timeouts: one sweeping timer; creation order is deadline order -------------------------------

  private startSweep(): void {
    if (this.sweepTimer !== null) return;
    const every = Math.max(5, Math.min(100, Math.floor(this.o.timeoutMs / 10)));
    this.sweepTimer = setInterval(this.sweep, every);
  }

  private stopSweep(): void {
    if (this.sweepTimer === null) return;
    clearInterval(this.sweepTimer);
    this.sweepTimer = null;
  }

  private readonly sweep = (): void => {
    const now = performance.now();
    for (const p of this.pending.values()) {
      if (p.deadline > now) break;
      this.pending.delete(p.id);
      if (p.sentOn === this.gen && p.sentOn !== 0 && this.inFlight > 0) this.inFlight--;
      this.fail(p, new SluiceClientError('TIMEOUT', `no answer within ${this.o.timeoutMs} ms`));
    }
    if (this.pending.size === 0) this.stopSweep();
  };
}

/** A check as a JSON text frame item. */
function checkJson(id: number, r: CheckRequest, subscribe: boolean): string {
  const body = JSON.stringify(r);
  const head = subscribe ? `{"id":${id},"wait":0,"subscribe":true` : `{"id":${id},"wait":0`;
  return body === '{}' ? `${head}}` : `${head},${body.slice(1)}`;
}

function noop(): void {}

/** What a binary answer's flags say of a decision Redis did not make (bit 2, the rule in bits 3–4), onto `to`. */
function degradedFromFlags(flags: number, to: { degraded?: boolean; degradedBy?: ClientDecision['degradedBy'] }): void {
  if ((flags & ANSWER_DEGRADED) === 0) return;
  to.degraded = true;
  const rule = ANSWER_RULES[(flags >> ANSWER_RULE_SHIFT) & 3];
  if (rule !== undefined) to.degradedBy = rule;
}

/** What a JSON answer says of a decision Redis did not make (`degraded`, `degradedBy`), onto `to`. */
function degradedFromJson(a: Record<string, unknown>, to: { degraded?: boolean; degradedBy?: ClientDecision['degradedBy'] }): void {
  if (a.degraded !== true) return;
  to.degraded = true;
  if (a.degradedBy === 'open' || a.degradedBy === 'closed' || a.degradedBy === 'local') to.degradedBy = a.degradedBy;
}

/**
 * Calls the application's onReady callback. It runs inside the socket's message handler, where a throw would
 * be an uncaught exception (the process ends): it becomes a process warning instead.
 */
function tell(cb: ReadyCallback, err: Error | null, ev?: ReadyEvent): void {
  callSafely('sluice client: an onReady callback', () => cb(err, ev));
}
