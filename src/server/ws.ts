/**
 * `/v1/stream`: decisions streamed over one WebSocket (uWebSockets.js).
 *
 * - Text frames carry JSON: a check `{id, policy, key | descriptors, cost?, subscribe?}`, an unsubscribe
 *   `{op: "unsubscribe", id}`, or an array of them. Binary frames carry the versioned format of `binary.ts`.
 *   Each check gets exactly one answer, carrying its id, in the encoding it came in; answers may arrive out of
 *   order and several may share a frame (a text frame from the server is one answer object or an array).
 * - Backpressure: uWS 20.30 cannot stop reading one socket, so sluice stops *processing* it instead: checks
 *   wait in a bounded per-connection queue, at most `maxInFlight` go to the engine at once, and none go while
 *   the socket's unsent output is above `highWaterBytes` (until a drain brings it under `lowWaterBytes`). A
 *   connection whose queue overflows while it is not reading its answers is closed with 1008; one that reads
 *   but outpaces the engine gets OVERLOADED answers for the overflow.
 * - Subscriptions: a denied check sent with `subscribe: true` arms a one-shot push at its retry time (the
 *   limiter's clock), confirmed by a peek (cost 0) before it is sent.
 * - Bad input gets an error answer (with the id when it can be read) and the connection stays open; a frame over
 *   `maxFrameBytes` or `maxChecksPerFrame` closes it with 1009, a binary frame of another version or type with 1002.
 */
import { degradedCode } from '../engine/degraded.js';
import uWS from 'uWebSockets.js';
import type { TemplatedApp, WebSocket } from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { CheckRequest, Decision, Limiter } from '../types.js';
import type { CompiledLimit } from '../config/policies.js';
import { checkFromStreamItem, decisionJson } from '../wire/codec.js';

/** A stream item's own fields, beside a check's. */
const STREAM_FIELDS: ReadonlySet<string> = new Set(['id', 'subscribe']);
import { errorItem } from './problem.js';
import { invalidArgument, isSluiceError, overloaded, shuttingDown } from '../util/errors.js';
import {
  ANSWER_DEGRADED, ANSWER_RULE_SHIFT, ANSWER_NO_ID, ANSWER_SUBSCRIBED, CHECK_SUBSCRIBE, FRAME_ANSWERS, FRAME_UNSUBSCRIBE,
  FrameWriter, KIND_ALLOWED, KIND_DENIED, KIND_ENDED, KIND_ERROR, KIND_READY, readCheckColumns, readHeader, readUnsubscribe, readUtf8,
  type CheckColumns,
} from '../wire/binary.js';
import { isLeaseOp, leaseOp } from './ws-leases.js';
import { SubscriptionScheduler, SUBSCRIPTION_DEFAULTS, type SubscriptionBounds } from './sub-schedule.js';
import {
  BatchOutcomes, CHECK_BATCH, OUTCOME_ALLOWED, OUTCOME_ERROR, type BatchInput, type CheckBatch,
} from '../engine/batch.js';
import type { ServerMetrics } from '../metrics/registry.js';

/** WebSocket close codes sluice sends (RFC 6455 §7.4.1). */
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_PROTOCOL_ERROR = 1002;
export const CLOSE_POLICY_VIOLATION = 1008;
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_INTERNAL_ERROR = 1011;

/** The optional WebSocket subprotocol; a client that offers it gets it back. */
export const STREAM_SUBPROTOCOL = 'sluice.v1';

/** Limits of `/v1/stream`. Every bound is per connection unless it says otherwise. */
export interface StreamOptions {
  /** Largest frame in bytes; a larger one closes the connection with 1009. Default 1,048,576 (1 MiB). */
  maxFrameBytes?: number;
  /** Most checks in one frame (a JSON array or a binary batch); more closes with 1009. Default 4,096. */
  maxChecksPerFrame?: number;
  /** Most checks handed to the engine and not yet answered. Default 4,096. */
  maxInFlight?: number;
  /** Most checks received and waiting for the engine. Past it: OVERLOADED answers, or close 1008 while paused. Default 65,536. */
  maxQueued?: number;
  /** Stop processing a connection while its unsent output is above this many bytes. Default 1,048,576. */
  highWaterBytes?: number;
  /** Resume once a drain brings the unsent output under this many bytes. Default 262,144. */
  lowWaterBytes?: number;
  /** Unsent output beyond which uWS drops a message; sluice then closes with 1008. Default 8,388,608 (8 MiB). */
  maxBufferedBytes?: number;
  /** Most armed subscriptions; past it a check asking to subscribe is answered with `subscribed: false`. Default 1,024. */
  maxSubscriptions?: number;
  /** The instance-wide subscription bounds (src/server/sub-schedule.ts). */
  maxInstanceSubscriptions?: SubscriptionBounds['maxInstanceSubscriptions'];
  maxFiresPerTick?: SubscriptionBounds['maxFiresPerTick'];
  /** Seconds without traffic before uWS closes the connection (it pings first). 0 disables. Default 120. */
  idleTimeoutSeconds?: number;
  /** Period of the subscription timer in ms. 0: no timer; call {@link StreamEndpoint.tick} yourself (tests). Default 10. */
  tickMs?: number;
  /** The limiter's clock (Unix-epoch ms), for subscription due times. Default Date.now (the limiter's default). */
  clock?: () => number;
}

/** Counters of `/v1/stream`, all connections together. */
export interface StreamStats {
  /** Open connections. */
  connections: number;
  /** Connections not being processed because their unsent output is above the high-water mark. */
  paused: number;
  /** Checks received and waiting for the engine. */
  queued: number;
  /** Checks handed to the engine and not answered yet. */
  inFlight: number;
  /** Armed subscriptions. */
  subscriptions: number;
  /** Checks answered (decisions and errors) since start. */
  answered: number;
  /** Subscription pushes sent since start. */
  pushed: number;
  /** Checks refused a subscription by `maxInstanceSubscriptions`, and ticks that spread a herd, since start. */
  subscriptionsRefused: number;
  deferredTicks: number;
  /** Connections closed for backpressure (1008), oversize frames (1009) and protocol violations (1002) since start. */
  closedBackpressure: number;
  closedTooBig: number;
  closedProtocol: number;
}

/** The `/v1/stream` endpoint of a server. */
export interface StreamEndpoint {
  stats(): StreamStats;
  /** Fires the subscriptions that are due by the clock. The timer calls it every `tickMs`; with `tickMs: 0`, call it yourself. */
  tick(): void;
  /**
   * Refuses new connections, answers queued checks with CLOSED, waits for the checks in flight to be answered,
   * then closes every connection with 1001. The HTTP server's close() calls it.
   */
  close(): Promise<void>;
}

const DEFAULTS = {
  maxFrameBytes: 1 << 20,
  maxChecksPerFrame: 4096,
  maxInFlight: 4096,
  maxQueued: 65_536,
  highWaterBytes: 1 << 20,
  lowWaterBytes: 256 << 10,
  maxBufferedBytes: 8 << 20,
  maxSubscriptions: 1024,
  ...SUBSCRIPTION_DEFAULTS,
  idleTimeoutSeconds: 120,
  tickMs: 10,
};

/** One check waiting for, or being decided by, the engine. */
class Item {
  constructor(
    readonly bin: boolean,
    /** Binary: the u32 id. */
    readonly id: number,
    /** JSON: the id as JSON text. */
    readonly idJson: string,
    readonly req: CheckRequest,
    readonly subscribe: boolean,
  ) {}
}

/**
 * Binary checks of a connection, as columns: [head, n) wait for the engine, [0, head) were handed to it.
 * A frame's checks go in whole; a segment with checks in flight is not reused until they land.
 */
class BinSeg implements CheckColumns, BatchInput {
  n = 0;
  head = 0;
  /** Checks of this segment handed to the engine and not answered yet. */
  inFlight = 0;
  /** In its connection's queue (it may take more checks, or still has some waiting). */
  inQueue = false;
  readonly ids: Uint32Array;
  readonly costs: Float64Array;
  readonly flags: Uint8Array;
  readonly policies: string[];
  readonly keys: Array<string | null>;
  readonly keyAt: Int32Array;
  readonly keyLen: Uint16Array;
  /** Copies of the frames the checks came in (keys are read from here), `used` bytes of it. */
  keyBytes: Uint8Array;
  used = 0;
  constructor(readonly capacity: number) {
    this.ids = new Uint32Array(capacity);
    this.costs = new Float64Array(capacity);
    this.flags = new Uint8Array(capacity);
    this.policies = new Array<string>(capacity).fill('');
    this.keys = new Array<string | null>(capacity).fill(null);
    this.keyAt = new Int32Array(capacity);
    this.keyLen = new Uint16Array(capacity);
    this.keyBytes = new Uint8Array(capacity * 32);
  }

  /** Copies a frame in (uWS reuses its memory after the callback); returns where it starts. */
  copy(frame: Uint8Array): number {
    const at = this.used;
    if (at + frame.byteLength > this.keyBytes.byteLength) {
      let size = this.keyBytes.byteLength * 2;
      while (size < at + frame.byteLength) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.keyBytes.subarray(0, at));
      this.keyBytes = next;
    }
    this.keyBytes.set(frame, at);
    this.used = at + frame.byteLength;
    return at;
  }

  /** Key i as a string. */
  key(i: number): string {
    return (this.keys[i] ??= readUtf8(this.keyBytes, this.keyAt[i], this.keyLen[i]) ?? '');
  }

  /** Empties the segment for reuse. */
  reset(): void {
    this.n = this.head = this.used = 0;
  }
}

/** What the server hands the stream besides the (instrumented) limiter: the bare limiter and the metrics it counts in. */
export interface StreamEngine {
  /** The limiter without the metrics wrapper; binary checks are counted per batch in `metrics` instead. */
  raw: Limiter;
  metrics: Pick<ServerMetrics, 'now' | 'tally' | 'failed' | 'observe' | 'activity'>;
}

/** An armed (or firing) subscription. */
class Sub {
  due = 0;
  /** False once fired, cancelled or its connection closed; a dead entry stays in the heap until popped. */
  live = true;
  inHeap = false;
  constructor(
    readonly conn: Conn,
    readonly mapKey: string,
    readonly bin: boolean,
    readonly id: number,
    readonly idJson: string,
    /** The same check with cost 0. */
    readonly peek: CheckRequest,
    readonly cost: number,
  ) {}
}

/**
 * A connection's state (uWS user data). A plain object: uWS copies the user data's own properties into an
 * object of its own at upgrade, so nothing may live on a prototype.
 */
interface Conn {
  ws: WebSocket<Conn> | null;
  /** Waiting checks: JSON ones one by one, binary ones by segment. */
  queue: Array<Item | BinSeg | undefined>;
  /** Index of the first entry in `queue` with waiting checks. */
  head: number;
  /** Checks waiting in `queue`. */
  queued: number;
  /** A binary segment out of the queue with nothing in flight, for the next frame. */
  spare: BinSeg | null;
  inFlight: number;
  paused: boolean;
  closed: boolean;
  /** JSON answers not yet sent. */
  json: string[];
  /** Binary answers not yet sent (created on the first binary answer). */
  bin: FrameWriter | null;
  flushScheduled: boolean;
  pumpScheduled: boolean;
  subs: Map<string, Sub> | null;
}

function newConn(): Conn {
  return {
    ws: null, queue: [], head: 0, queued: 0, spare: null, inFlight: 0, paused: false, closed: false, json: [], bin: null,
    flushScheduled: false, pumpScheduled: false, subs: null,
  };
}

/** Checks received on a connection and waiting for the engine. */
function queuedOf(c: Conn): number {
  return c.queued;
}

/**
 * Registers `/v1/stream` on a uWS app (call before listen) and returns its endpoint.
 * @throws RangeError on an option that is not a positive integer (or 0 where allowed).
 */
export function registerStream(app: TemplatedApp, limiter: Limiter, options: StreamOptions = {}, log?: Logger, engine?: StreamEngine): StreamEndpoint {
  const o = { ...DEFAULTS, ...definedOnly(options) };
  for (const k of Object.keys(DEFAULTS) as Array<keyof typeof DEFAULTS>) {
    const v = o[k];
    const min = k === 'idleTimeoutSeconds' || k === 'tickMs' ? 0 : 1;
    if (!Number.isSafeInteger(v) || v < min) throw new RangeError(`stream.${k}: must be an integer ≥ ${min} (got ${String(v)})`);
  }
  if (o.lowWaterBytes > o.highWaterBytes) throw new RangeError('stream.lowWaterBytes: must not exceed highWaterBytes');
  const clock = options.clock ?? Date.now;
  const conns = new Set<Conn>();
  // Binary checks are decided a batch at a time: through the bare limiter's batch path (Front.checkBatch: no
  // promise or object per check with shards 0, one promise per batch otherwise), counted per batch in the
  // server's metrics. Without it (no engine given, or a Limiter of another make), through check() per check.
  const metrics = engine?.metrics ?? null;
  const decider: Limiter = engine?.raw ?? limiter;
  const batch: CheckBatch = (engine === undefined ? undefined : (decider as unknown as { [CHECK_BATCH]?: CheckBatch })[CHECK_BATCH])
    ?? ((src, from, to, out) => {
      const all: Array<Promise<void>> = [];
      for (let i = from; i < to; i++) {
        const at = i - from;
        all.push(decider.check({ policy: src.policies[i], key: src.key(i), cost: src.costs[i] })
          .then((d) => out.put(at, d), (e: unknown) => out.fail(at, e as Error)));
      }
      return Promise.all(all).then(() => undefined);
    });
  /** Outcome arrays by size class (2^k entries), reused: a batch decided at once gives its own back before the next. */
  const spareOutcomes: BatchOutcomes[][] = [];
  const takeOutcomes = (n: number): BatchOutcomes => {
    const k = 32 - Math.clz32(n - 1);
    const list = spareOutcomes[k];
    return list !== undefined && list.length > 0 ? list.pop()! : new BatchOutcomes(2 ** k);
  };
  const giveOutcomes = (out: BatchOutcomes): void => {
    const list = (spareOutcomes[31 - Math.clz32(out.capacity)] ??= []);
    if (list.length < 4) list.push(out);
  };
  /** Limits by name for the policy set in force, rebuilt when a reload replaces the set. */
  let limitsByName = new Map<string, CompiledLimit>();
  let limitsOf: Limiter['policies'] | null = null;
  const limitNamed = (name: string): CompiledLimit | undefined => {
    const set = limiter.policies;
    if (set !== limitsOf) {
      limitsByName = new Map();
      for (const p of set.values()) for (const l of p.limits) limitsByName.set(l.name, l);
      limitsOf = set;
    }
    return limitsByName.get(name);
  };

  let closing = false;
  let inFlightTotal = 0;
  let onIdle: (() => void) | null = null;
  let answered = 0, pushed = 0, closedBackpressure = 0, closedTooBig = 0, closedProtocol = 0;
  let subCount = 0;
  const subsAll = new SubscriptionScheduler(o);
  const heap = new SubHeap();
  let timer: NodeJS.Timeout | null = null;

  // ------------------------------------------------------------------------------------------------------
  // Output: answers are appended per connection and sent once per microtask checkpoint, JSON and binary in
  // one frame each, inside cork.
  // ------------------------------------------------------------------------------------------------------

  const scheduleFlush = (c: Conn): void => {
    if (c.flushScheduled) return;
    c.flushScheduled = true;
    queueMicrotask(() => flush(c));
  };

  const flush = (c: Conn): void => {
    c.flushScheduled = false;
    const ws = c.ws;
    if (c.closed || ws === null) {
      c.json.length = 0;
      return;
    }
    const n = c.json.length;
    const text = n === 0 ? null : n === 1 ? c.json[0] : `[${c.json.join(',')}]`;
    c.json.length = 0;
    const frame = c.bin?.finishView() ?? null; // uWS copies what it sends
    // Never let uWS drop an answer: a connection whose unsent output would pass the limit is closed instead,
    // while the close frame still fits, so a client that reads again finds its answers and then a 1008.
    const size = (text === null ? 0 : Buffer.byteLength(text)) + (frame === null ? 0 : frame.byteLength);
    if (ws.getBufferedAmount() + size > o.maxBufferedBytes) {
      closedBackpressure++;
      return end(c, CLOSE_POLICY_VIOLATION, 'backpressure: output over the limit, client not reading');
    }
    let dropped = false;
    ws.cork(() => {
      if (text !== null && ws.send(text, false) === 2) dropped = true;
      if (frame !== null && ws.send(frame, true) === 2) dropped = true;
    });
    if (dropped) {
      closedBackpressure++;
      return end(c, CLOSE_POLICY_VIOLATION, 'backpressure: output over the limit, client not reading');
    }
    if (!c.paused && ws.getBufferedAmount() > o.highWaterBytes) c.paused = true;
    if (queuedOf(c) > 0 && !c.paused) schedulePump(c);
  };

  const end = (c: Conn, code: number, reason: string): void => {
    if (c.closed || c.ws === null) return;
    log?.info({ code, reason }, 'closing stream connection');
    c.ws.end(code, reason); // runs the close handler synchronously
  };

  const answerDecision = (c: Conn, it: Item, d: Decision, subscribed: boolean | undefined): void => {
    answered++;
    if (it.bin) {
      const flags = (subscribed ? ANSWER_SUBSCRIBED : 0) | degradedFlags(degradedCode(d));
      writer(c).answer(it.id, d.allowed ? KIND_ALLOWED : KIND_DENIED, flags, 0, d.limit, d.remaining, d.resetAfterMs,
        d.retryAfterMs, d.policy, '', d.reason ?? '');
    } else {
      const sub = subscribed === undefined ? '' : `"subscribed":${subscribed},`;
      c.json.push(`{"id":${it.idJson},${sub}${decisionJson(d).slice(1)}`);
    }
    scheduleFlush(c);
  };

  /** An error answer; `it` null or an id of null means the id could not be read. */
  const answerError = (c: Conn, bin: boolean, id: number | null, idJson: string | null, e: unknown): void => {
    answered++;
    const err = errorItem(e).error;
    if (bin) {
      writer(c).answer(id ?? 0, KIND_ERROR, id === null ? ANSWER_NO_ID : 0, err.status, 0, 0, 0, 0, err.code, err.field ?? '', err.detail);
    } else {
      c.json.push(idJson === null ? `{"error":${JSON.stringify(err)}}` : `{"id":${idJson},"error":${JSON.stringify(err)}}`);
    }
    scheduleFlush(c);
  };

  const writer = (c: Conn): FrameWriter => (c.bin ??= new FrameWriter(FRAME_ANSWERS));

  // ------------------------------------------------------------------------------------------------------
  // Input: every check goes through the queue; the pump hands them to the engine within the bounds.
  // ------------------------------------------------------------------------------------------------------

  /** Queues a check. Returns false when the connection was closed for overflowing while paused. */
  const enqueue = (c: Conn, it: Item): boolean => {
    if (closing) {
      answerError(c, it.bin, it.id, it.idJson, shuttingDown());
      return true;
    }
    if (queuedOf(c) >= o.maxQueued) {
      if (c.paused) {
        closedBackpressure++;
        end(c, CLOSE_POLICY_VIOLATION, `backpressure: more than ${o.maxQueued} checks queued, client not reading`);
        return false;
      }
      answerError(c, it.bin, it.id, it.idJson,
        overloaded(`more than ${o.maxQueued} checks queued on this connection`));
      return true;
    }
    c.queue.push(it);
    c.queued++;
    return true;
  };

  const schedulePump = (c: Conn): void => {
    if (c.pumpScheduled) return;
    c.pumpScheduled = true;
    // The next turn, not a microtask: a connection with a long queue yields to the others between rounds.
    setImmediate(() => {
      c.pumpScheduled = false;
      pump(c);
    });
  };

  const pump = (c: Conn): void => {
    if (c.closed || c.ws === null) return;
    if (!c.paused && c.ws.getBufferedAmount() > o.highWaterBytes) c.paused = true;
    if (c.paused) return;
    const q = c.queue;
    // At most maxInFlight checks go to the engine per round, whether decided at once or not: a connection with
    // a long queue yields to the others between rounds (the flush of its answers schedules the next).
    let budget = o.maxInFlight;
    while (c.head < q.length && c.inFlight < o.maxInFlight && budget > 0) {
      const e = q[c.head]!;
      if (e instanceof BinSeg) {
        const from = e.head;
        const k = Math.min(e.n - from, o.maxInFlight - c.inFlight, budget);
        e.head += k;
        if (e.head === e.n) {
          q[c.head++] = undefined;
          e.inQueue = false;
        }
        if (k === 0) continue;
        c.queued -= k;
        budget -= k;
        decideBinary(c, e, from, from + k);
        continue;
      }
      q[c.head++] = undefined;
      c.queued--;
      budget--;
      c.inFlight++;
      inFlightTotal++;
      decideJson(c, e);
    }
    if (c.head === q.length) {
      q.length = 0;
      c.head = 0;
    } else if (c.head > 4096 && c.head * 2 > q.length) {
      c.queue = q.slice(c.head);
      c.head = 0;
    }
  };

  /**
   * Policies whose checks checkSync refused as NOT_SYNCHRONOUS (strict ones), for the policy set they belong
   * to; `syncOff` once it refused the limiter (shards) or the limiter has none.
   */
  let syncRefused = new Set<string>();
  let syncRefusedOf: Limiter['policies'] | null = null;
  let syncOff = typeof (limiter as Partial<Limiter>).checkSync !== 'function';

  /**
   * Decides one JSON check: at once through checkSync when the limiter can (shards 0, a policy decided in this
   * process: no promise per check), else through check(). checkSync decides the checks check() queued first,
   * so the order of a connection's checks is kept either way.
   */
  const decideJson = (c: Conn, e: Item): void => {
    if (!syncOff) {
      const set = limiter.policies;
      if (set !== syncRefusedOf) {
        syncRefused = new Set();
        syncRefusedOf = set;
      }
      if (!syncRefused.has(e.req.policy)) {
        let d: Decision;
        try {
          d = limiter.checkSync(e.req);
        } catch (err) {
          if (!isSluiceError(err) || err.code !== 'NOT_SYNCHRONOUS') return failed(c, e, err);
          if (err.field === 'shards') syncOff = true;
          else syncRefused.add(e.req.policy);
          limiter.check(e.req).then((x) => decided(c, e, x), (x: unknown) => failed(c, e, x));
          return;
        }
        return decided(c, e, d);
      }
    }
    limiter.check(e.req).then((d) => decided(c, e, d), (err: unknown) => failed(c, e, err));
  };

  /** Hands checks [from, to) of a binary segment to the engine as one batch. */
  const decideBinary = (c: Conn, seg: BinSeg, from: number, to: number): void => {
    const k = to - from;
    c.inFlight += k;
    inFlightTotal += k;
    seg.inFlight += k;
    const out = takeOutcomes(k);
    const started = metrics === null ? 0 : metrics.now();
    let p: Promise<void> | null;
    try {
      p = batch(seg, from, to, out);
    } catch (e) {
      for (let j = 0; j < k; j++) out.fail(j, e as Error);
      p = null;
    }
    if (p === null) binaryDecided(c, seg, from, to, out, started);
    else {
      p.then(() => binaryDecided(c, seg, from, to, out, started), (e: unknown) => {
        for (let j = 0; j < k; j++) out.fail(j, e as Error);
        binaryDecided(c, seg, from, to, out, started);
      });
    }
  };

  /**
   * A binary batch's outcomes: counted in the metrics (per run of one policy), then answered straight from the
   * outcome arrays into the connection's answers frame, arming the subscriptions asked for.
   */
  const binaryDecided = (c: Conn, seg: BinSeg, from: number, to: number, out: BatchOutcomes, started: number): void => {
    const k = to - from;
    const ended = metrics === null ? 0 : metrics.now();
    c.inFlight -= k;
    inFlightTotal -= k;
    seg.inFlight -= k;
    const w = c.closed ? null : writer(c);
    let run: string | null = null;
    let allowed = 0, denied = 0, never = 0;
    let decisions = 0;
    for (let i = from; i < to; i++) {
      const j = i - from;
      const code = out.code[j];
      const policy = seg.policies[i];
      if (code === OUTCOME_ERROR) {
        const e = out.error[j]!;
        metrics?.failed(policy, e, started, ended);
        if (w === null) continue;
        if (!isSluiceError(e) || e.status >= 500) log?.warn({ err: e }, 'stream check failed');
        answerError(c, true, seg.ids[i], null, e);
        continue;
      }
      const retry = out.retryAfterMs[j];
      if (metrics !== null) {
        if (policy !== run) {
          if (run !== null) metrics.tally(run, allowed, denied, never, started, ended);
          run = policy;
          allowed = denied = never = 0;
        }
        if (code === OUTCOME_ALLOWED) allowed++;
        else if (retry < 0) never++;
        else denied++;
        if (metrics.activity !== null) {
          metrics.observe(policy, seg.key(i), code === OUTCOME_ALLOWED, out.degraded[j] === 1, out.remaining[j], out.limit[j]);
        }
      }
      if (w === null) continue;
      let flags = degradedFlags(out.degraded[j]);
      if ((seg.flags[i] & CHECK_SUBSCRIBE) !== 0 && code !== OUTCOME_ALLOWED && retry >= 0
        && arm(c, true, seg.ids[i], '', policy, seg.key(i), undefined, seg.costs[i], retry)) flags |= ANSWER_SUBSCRIBED;
      w.decision(seg.ids[i], code === OUTCOME_ALLOWED ? KIND_ALLOWED : KIND_DENIED, flags, out.limit[j], out.remaining[j],
        out.resetAfterMs[j], retry < 0 ? null : retry, out.name[j], out.reason[j]);
      decisions++;
    }
    if (run !== null) metrics!.tally(run, allowed, denied, never, started, ended);
    giveOutcomes(out);
    answered += decisions;
    if (decisions > 0) scheduleFlush(c);
    if (seg.inFlight === 0 && !seg.inQueue && seg.head === seg.n && !c.closed) c.spare = seg;
    if (inFlightTotal === 0 && onIdle !== null) onIdle();
  };

  const landed = (c: Conn): void => {
    c.inFlight--;
    inFlightTotal--;
    if (inFlightTotal === 0 && onIdle !== null) onIdle();
  };

  const decided = (c: Conn, it: Item, d: Decision): void => {
    landed(c);
    if (c.closed) return;
    let subscribed: boolean | undefined;
    if (it.subscribe) {
      const r = it.req;
      subscribed = !d.allowed && d.retryAfterMs !== null && arm(c, it.bin, it.id, it.idJson, r.policy, r.key, r.descriptors, r.cost, d.retryAfterMs);
    }
    answerDecision(c, it, d, subscribed);
  };

  const failed = (c: Conn, it: Item, e: unknown): void => {
    landed(c);
    if (c.closed) return;
    if (!isSluiceError(e) || e.status >= 500) log?.warn({ err: e }, 'stream check failed');
    answerError(c, it.bin, it.id, it.idJson, e);
  };

  // Text frames ------------------------------------------------------------------------------------------

  const onText = (c: Conn, data: ArrayBuffer): void => {
    let parsed: unknown;
    try {
      // uWS has already refused text frames that are not UTF-8.
      parsed = JSON.parse(Buffer.from(data).toString('utf8'));
    } catch (e) {
      return answerError(c, false, null, null, invalidArgument('frame', `is not valid JSON (${(e as Error).message})`));
    }
    if (Array.isArray(parsed)) {
      if (parsed.length === 0) return answerError(c, false, null, null, invalidArgument('frame', 'must not be an empty array'));
      if (parsed.length > o.maxChecksPerFrame) {
        closedTooBig++;
        return end(c, CLOSE_TOO_BIG, `frame: more than ${o.maxChecksPerFrame} checks`);
      }
      for (let i = 0; i < parsed.length; i++) if (!jsonItem(c, parsed[i])) return;
      return;
    }
    if (typeof parsed !== 'object' || parsed === null) {
      return answerError(c, false, null, null, invalidArgument('frame', 'must be a check object or an array of them'));
    }
    jsonItem(c, parsed);
  };

  /** One JSON item. Returns false when the connection was closed. */
  const jsonItem = (c: Conn, v: unknown): boolean => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      answerError(c, false, null, null, invalidArgument('check', 'must be a JSON object'));
      return true;
    }
    const obj = v as Record<string, unknown>;
    const id = obj.id;
    let idJson: string;
    if (typeof id === 'string' && id.length > 0 && id.length <= 256) idJson = JSON.stringify(id);
    else if (typeof id === 'number' && Number.isSafeInteger(id)) idJson = String(id);
    else {
      answerError(c, false, null, null, invalidArgument('id', id === undefined
        ? 'is required (a string of 1 to 256 characters or a safe integer)'
        : 'must be a string of 1 to 256 characters or a safe integer'));
      return true;
    }
    if (isLeaseOp(obj.op)) return leaseItem(c, obj, idJson);
    if (obj.op !== undefined) {
      if (obj.op !== 'unsubscribe') {
        answerError(c, false, 0, idJson, invalidArgument('op', `must be "unsubscribe", "acquire" or "release" when present (got ${JSON.stringify(obj.op)})`));
        return true;
      }
      const extra = Object.keys(obj).find((k) => k !== 'op' && k !== 'id');
      if (extra !== undefined) {
        answerError(c, false, 0, idJson, invalidArgument(extra, 'is not a field of an unsubscribe (op, id)'));
        return true;
      }
      const had = cancel(c, 'j' + idJson);
      answered++;
      c.json.push(`{"id":${idJson},"unsubscribed":${had}}`);
      scheduleFlush(c);
      return true;
    }
    let subscribe = false;
    if (obj.subscribe !== undefined) {
      if (typeof obj.subscribe !== 'boolean') {
        answerError(c, false, 0, idJson, invalidArgument('subscribe', 'must be a boolean'));
        return true;
      }
      subscribe = obj.subscribe;
    }
    let req: CheckRequest;
    try {
      req = checkFromStreamItem(obj, STREAM_FIELDS);
    } catch (e) {
      answerError(c, false, 0, idJson, e);
      return true;
    }
    return enqueue(c, new Item(false, 0, idJson, req, subscribe));
  };

  /** An acquire or release (src/server/ws-leases.ts): in flight like a check, answered when it lands. */
  const leaseItem = (c: Conn, obj: Record<string, unknown>, idJson: string): boolean => {
    let p: Promise<string>;
    try {
      if (closing) throw shuttingDown();
      p = leaseOp(limiter, obj);
    } catch (e) {
      answerError(c, false, 0, idJson, e);
      return true;
    }
    c.inFlight++;
    inFlightTotal++;
    p.then((body) => {
      landed(c);
      if (c.closed) return;
      answered++;
      c.json.push(`{"id":${idJson},${body.slice(1)}`);
      scheduleFlush(c);
    }, (e: unknown) => {
      landed(c);
      if (c.closed) return;
      if (!isSluiceError(e) || e.status >= 500) log?.warn({ err: e }, 'stream lease failed');
      answerError(c, false, 0, idJson, e);
    });
    return true;
  };

  // Binary frames ----------------------------------------------------------------------------------------

  const onBinary = (c: Conn, data: ArrayBuffer): void => {
    const bytes = new Uint8Array(data);
    const h = readHeader(bytes);
    if (!h.ok) {
      closedProtocol++;
      const why = h.violation === 'short' ? 'binary frame: shorter than its 4-byte header'
        : h.violation === 'version' ? `binary frame: unsupported version ${bytes[0]} (this server speaks 1)`
          : `binary frame: unknown type ${bytes[1]}`;
      return end(c, CLOSE_PROTOCOL_ERROR, why);
    }
    if (h.type === FRAME_ANSWERS) {
      closedProtocol++;
      return end(c, CLOSE_PROTOCOL_ERROR, 'binary frame: type 2 (answers) goes from server to client');
    }
    if (h.count > o.maxChecksPerFrame) {
      closedTooBig++;
      return end(c, CLOSE_TOO_BIG, `frame: more than ${o.maxChecksPerFrame} records`);
    }
    if (h.type === FRAME_UNSUBSCRIBE) {
      const ids = readUnsubscribe(bytes, h.count);
      if (typeof ids === 'string') return answerError(c, true, null, null, invalidArgument('frame', ids));
      for (const id of ids) {
        const had = cancel(c, 'b' + id);
        answered++;
        writer(c).answer(id, KIND_ENDED, had ? ANSWER_SUBSCRIBED : 0, 0, 0, 0, 0, 0, '', '', '');
      }
      return scheduleFlush(c);
    }
    // The frame's checks go straight into columns (a record that cannot be read is answered at once), then
    // into the queue as one run; the pump hands them to the engine as batches.
    const seg = segFor(c, h.count);
    const at = seg.n;
    const used = seg.used;
    const got = readCheckColumns(bytes, h.count, seg, at, seg.copy(bytes),
      (id, field, detail) => answerError(c, true, id, null, invalidArgument(field, detail)));
    if (typeof got === 'string') {
      seg.used = used;
      answerError(c, true, null, null, invalidArgument('frame', got));
      return spareIfIdle(c, seg);
    }
    admit(c, seg, at, got);
  };

  /** A segment with room for `count` more checks: the queue's last one, the connection's spare, or a new one. */
  const segFor = (c: Conn, count: number): BinSeg => {
    const q = c.queue;
    const tail = q.length > c.head ? q[q.length - 1] : undefined;
    if (tail instanceof BinSeg && tail.capacity - tail.n >= count) return tail;
    const spare = c.spare;
    if (spare !== null && spare.capacity >= count) {
      c.spare = null;
      spare.reset();
      return spare;
    }
    return new BinSeg(count <= 16 ? 16 : 2 ** (32 - Math.clz32(count - 1)));
  };

  /** Keeps a segment that holds nothing waiting or in flight for the connection's next frame. */
  const spareIfIdle = (c: Conn, seg: BinSeg): void => {
    if (!seg.inQueue && seg.inFlight === 0 && !c.closed && (c.spare === null || c.spare.capacity < seg.capacity)) {
      seg.reset();
      c.spare = seg;
    }
  };

  /**
   * Queues the `m` checks just read into `seg` at `at`, within the connection's bound: past it, OVERLOADED
   * answers for the excess, or, on a paused connection, a close with 1008. While the server closes: CLOSED.
   */
  const admit = (c: Conn, seg: BinSeg, at: number, m: number): void => {
    let keep = m;
    if (closing) {
      const shutdown = shuttingDown();
      for (let i = at; i < at + m; i++) answerError(c, true, seg.ids[i], null, shutdown);
      keep = 0;
    } else if (c.queued + m > o.maxQueued) {
      if (c.paused) {
        closedBackpressure++;
        end(c, CLOSE_POLICY_VIOLATION, `backpressure: more than ${o.maxQueued} checks queued, client not reading`);
        return;
      }
      keep = Math.max(0, o.maxQueued - c.queued);
      const over = overloaded(`more than ${o.maxQueued} checks queued on this connection`);
      for (let i = at + keep; i < at + m; i++) answerError(c, true, seg.ids[i], null, over);
    }
    seg.n = at + keep;
    if (keep === 0) return spareIfIdle(c, seg);
    c.queued += keep;
    if (!seg.inQueue) {
      seg.inQueue = true;
      c.queue.push(seg);
    }
  };

  // Subscriptions ----------------------------------------------------------------------------------------

  /** Arms a subscription for a denied check; false when the connection has no room for another. */
  const arm = (c: Conn, bin: boolean, id: number, idJson: string, policy: string, key: string | undefined,
    descriptors: CheckRequest['descriptors'], cost: number, retryAfterMs: number): boolean => {
    const mapKey = bin ? 'b' + id : 'j' + idJson;
    const subs = (c.subs ??= new Map());
    const old = subs.get(mapKey);
    if (old !== undefined) kill(old);
    else if (subs.size >= o.maxSubscriptions) return false;
    if (!subsAll.admit()) return false;
    const peek: CheckRequest = { policy, cost: 0 };
    if (key !== undefined) peek.key = key;
    if (descriptors !== undefined) peek.descriptors = descriptors;
    const s = new Sub(c, mapKey, bin, id, idJson, peek, cost);
    subs.set(mapKey, s);
    subCount++;
    s.due = clock() + retryAfterMs;
    heap.push(s);
    startTimer();
    return true;
  };

  const kill = (s: Sub): void => {
    if (!s.live) return;
    s.live = false;
    subCount--;
    subsAll.release();
    s.conn.subs?.delete(s.mapKey);
    if (s.inHeap) heap.dead++;
  };

  const cancel = (c: Conn, key: string): boolean => {
    const s = c.subs?.get(key);
    if (s === undefined) return false;
    kill(s);
    return true;
  };

  const tick = (): void => {
    if (heap.size === 0) return;
    const now = clock();
    subsAll.startTick();
    while (heap.size > 0 && heap.top().due <= now) {
      if (heap.top().live && !subsAll.takeFire()) break; // the rest of a herd goes in the next ticks
      const s = heap.pop();
      if (!s.live) {
        heap.dead--;
        continue;
      }
      limiter.check(s.peek).then((d) => fire(s, d), (e: unknown) => subFailed(s, e));
    }
    if (heap.dead > 1024 && heap.dead * 2 > heap.size) heap.compact();
    if (subCount === 0 && heap.size === 0) stopTimer();
  };

  /** A due subscription's peek: push when the key now admits the cost, else re-arm at the earliest it could. */
  const fire = (s: Sub, d: Decision): void => {
    if (!s.live) return;
    const c = s.conn;
    if (d.remaining >= s.cost) {
      kill(s);
      pushed++;
      if (s.bin) writer(c).answer(s.id, KIND_READY, 0, 0, d.limit, d.remaining, d.resetAfterMs, 0, d.policy, '', '');
      else {
        c.json.push(`{"id":${s.idJson},"ready":true,"limit":${d.limit},"remaining":${d.remaining},` +
          `"resetAfterMs":${d.resetAfterMs},"policy":${JSON.stringify(d.policy)}}`);
      }
      scheduleFlush(c);
      return;
    }
    s.due = clock() + rearmAfter(d, s.cost);
    heap.push(s);
    startTimer();
  };

  /**
   * A lower bound on the wait before the peeked key could admit `cost` (so a push is never late by more than
   * a tick and is never sent early: each is confirmed by a peek). `remaining` is whole tokens, the state is up
   * to one token more. Fixed windows only free tokens at the window's end; buckets and sliding windows free at
   * most L tokens per period.
   */
  const rearmAfter = (d: Decision, cost: number): number => {
    const l = limitNamed(d.policy);
    if (l === undefined || l.limit === 0) return 1000;
    if (l.algorithm === 'fixed_window') return Math.max(1, d.resetAfterMs);
    const missing = cost - d.remaining - 1;
    return Math.max(1, Math.floor((missing * l.periodMs) / l.limit));
  };

  const subFailed = (s: Sub, e: unknown): void => {
    if (!s.live) return;
    kill(s);
    const c = s.conn;
    const err = errorItem(e).error;
    if (s.bin) writer(c).answer(s.id, KIND_ENDED, ANSWER_SUBSCRIBED, err.status, 0, 0, 0, 0, err.code, err.field ?? '', err.detail);
    else c.json.push(`{"id":${s.idJson},"ready":false,"error":${JSON.stringify(err)}}`);
    scheduleFlush(c);
  };

  const startTimer = (): void => {
    if (timer !== null || o.tickMs === 0 || closing) return;
    timer = setInterval(tick, o.tickMs);
    timer.unref();
  };
  const stopTimer = (): void => {
    if (timer === null) return;
    clearInterval(timer);
    timer = null;
  };

  // ------------------------------------------------------------------------------------------------------
  // The route
  // ------------------------------------------------------------------------------------------------------

  app.ws<Conn>('/v1/stream', {
    // uWS drops a frame over its own limit without a close frame (the client sees 1006); frames between
    // maxFrameBytes and twice that reach the handler and get a proper 1009.
    maxPayloadLength: o.maxFrameBytes * 2,
    maxBackpressure: o.maxBufferedBytes + 4096, // room for the close frame of a connection closed at the limit
    idleTimeout: o.idleTimeoutSeconds,
    sendPingsAutomatically: true,
    compression: uWS.DISABLED,
    upgrade: (res, req, context) => {
      if (closing) {
        res.writeStatus('503 Service Unavailable').writeHeader('Retry-After', '1').end();
        return;
      }
      const offered = req.getHeader('sec-websocket-protocol');
      const protocol = offered.split(',').some((p) => p.trim() === STREAM_SUBPROTOCOL) ? STREAM_SUBPROTOCOL : '';
      res.upgrade(newConn(), req.getHeader('sec-websocket-key'), protocol, req.getHeader('sec-websocket-extensions'), context);
    },
    open: (ws) => {
      const c = ws.getUserData();
      c.ws = ws;
      conns.add(c);
    },
    message: (ws, data, isBinary) => {
      const c = ws.getUserData();
      if (data.byteLength > o.maxFrameBytes) {
        closedTooBig++;
        return end(c, CLOSE_TOO_BIG, `frame: larger than ${o.maxFrameBytes} bytes`);
      }
      if (isBinary) onBinary(c, data);
      else onText(c, data);
      pump(c);
    },
    drain: (ws) => {
      const c = ws.getUserData();
      if (c.paused && ws.getBufferedAmount() < o.lowWaterBytes) {
        c.paused = false;
        pump(c);
      }
    },
    close: (ws) => {
      const c = ws.getUserData();
      c.closed = true;
      c.ws = null;
      conns.delete(c);
      c.queue.length = 0;
      c.head = 0;
      c.queued = 0;
      c.spare = null;
      c.json.length = 0;
      if (c.subs !== null) for (const s of [...c.subs.values()]) kill(s);
    },
  });

  // A plain request (no Upgrade) on the stream's path.
  app.any('/v1/stream', (res) => {
    res.cork(() => {
      res.writeStatus('426 Upgrade Required').writeHeader('Upgrade', 'websocket').writeHeader('Content-Type', 'application/problem+json')
        .end(JSON.stringify({
          type: 'about:blank', title: 'Upgrade Required', status: 426,
          detail: 'upgrade: /v1/stream is a WebSocket endpoint (send Upgrade: websocket)', field: 'upgrade',
        }));
    });
  });

  return {
    tick,
    stats: (): StreamStats => {
      let paused = 0, queued = 0;
      for (const c of conns) {
        if (c.paused) paused++;
        queued += queuedOf(c);
      }
      return {
        connections: conns.size, paused, queued, inFlight: inFlightTotal, subscriptions: subCount, answered, pushed,
        subscriptionsRefused: subsAll.refused, deferredTicks: subsAll.deferredTicks,
        closedBackpressure, closedTooBig, closedProtocol,
      };
    },
    async close(): Promise<void> {
      if (closing) return;
      closing = true;
      stopTimer();
      const shutdown = shuttingDown();
      for (const c of conns) {
        for (let i = c.head; i < c.queue.length; i++) {
          const e = c.queue[i]!;
          if (e instanceof BinSeg) {
            for (let j = e.head; j < e.n; j++) answerError(c, true, e.ids[j], null, shutdown);
            e.head = e.n;
            e.inQueue = false;
          } else answerError(c, e.bin, e.id, e.idJson, shutdown);
        }
        c.queue.length = 0;
        c.head = 0;
        c.queued = 0;
      }
      if (inFlightTotal > 0) await new Promise<void>((r) => (onIdle = r));
      for (const c of [...conns]) {
        flush(c);
        end(c, CLOSE_GOING_AWAY, 'server shutting down');
      }
    },
  };
}

/** A binary min-heap of subscriptions by due time; dead entries are skipped when popped or dropped by compact(). */
class SubHeap {
  private a: Sub[] = [];
  /** Entries in the heap whose subscription is no longer live. */
  dead = 0;

  get size(): number {
    return this.a.length;
  }

  top(): Sub {
    return this.a[0];
  }

  push(s: Sub): void {
    s.inHeap = true;
    const a = this.a;
    let i = a.length;
    a.push(s);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p].due <= s.due) break;
      a[i] = a[p];
      i = p;
    }
    a[i] = s;
  }

  pop(): Sub {
    const a = this.a;
    const top = a[0];
    const last = a.pop()!;
    if (a.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= a.length) break;
        const r = l + 1;
        const m = r < a.length && a[r].due < a[l].due ? r : l;
        if (a[m].due >= last.due) break;
        a[i] = a[m];
        i = m;
      }
      a[i] = last;
    }
    top.inHeap = false;
    return top;
  }

  /** Rebuilds the heap from its live entries. */
  compact(): void {
    const live = this.a.filter((s) => s.live);
    for (const s of this.a) if (!s.live) s.inHeap = false;
    this.a = [];
    this.dead = 0;
    for (const s of live) this.push(s);
  }
}

function definedOnly<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined && k !== 'clock') (out as Record<string, unknown>)[k] = v;
  return out;
}

/** A binary answer's flag bits for a degraded rule code (degradedCode): bit 2, and the rule in bits 3–4. */
function degradedFlags(code: number): number {
  return code === 0 ? 0 : ANSWER_DEGRADED | (code << ANSWER_RULE_SHIFT);
}
