/**
 * `/v1/stream` connections and backpressure: the open connections, their answers (appended per connection and
 * sent once per microtask checkpoint, JSON and binary in one frame each, inside cork), their queues of checks
 * and the pump that hands those to the engine within the bounds.
 *
 * uWS 20.30 cannot stop reading one socket, so sluice stops *processing* it instead: checks wait in a bounded
 * per-connection queue, at most `maxInFlight` go to the engine at once, and none go while the socket's unsent
 * output is above `highWaterBytes` (until a drain brings it under `lowWaterBytes`). A connection whose queue
 * overflows while it is not reading its answers is closed with 1008; one that reads but outpaces the engine
 * gets OVERLOADED answers for the overflow. Nothing here decides: the frames' parts hand checks to the engine
 * through {@link StreamDeciders}.
 */
import type { Logger } from 'pino';
import type { Decision } from '../../types/decision.js';
import { degradedCode } from '../../engine/degraded.js';
import { decisionJson } from '../../wire/codec.js';
import { ANSWER_DEGRADED, ANSWER_DELAYED, ANSWER_RULE_SHIFT, ANSWER_NO_ID, ANSWER_SUBSCRIBED, FRAME_ANSWERS, KIND_ALLOWED, KIND_DENIED, KIND_ERROR } from '../../wire/binary-format.js';
import { FrameWriter } from '../../wire/binary-write.js';
import { errorItem } from '../problem.js';
import { overloaded, shuttingDown } from '../../util/errors.js';
import { BinSeg, JsonSeg, Segment, type Conn, type Item } from './state.js';
import { CLOSE_GOING_AWAY, CLOSE_POLICY_VIOLATION, type StreamBounds } from './options.js';

/** How queued checks reach the engine: the JSON part decides items, each part its own segments. */
export interface StreamDeciders {
  /** Decides one JSON check (counted in flight by the pump already) and answers it when it lands. */
  item(c: Conn, it: Item): void;
  /** Decides checks [from, to) of a segment (binary or plain JSON) as one batch and answers them when they land. */
  segment(c: Conn, seg: Segment, from: number, to: number): void;
}

/** The open connections of one `/v1/stream` route, their output, their queues and the counters over them all. */
export class StreamConnections {
  readonly conns = new Set<Conn>();
  /** Set by close(): new connections and checks are refused. */
  closing = false;
  /** Checks handed to the engine and not answered yet, over every connection. */
  inFlightTotal = 0;
  /** Called when the last check in flight lands while close() waits for it. */
  onIdle: (() => void) | null = null;
  answered = 0;
  closedBackpressure = 0;
  closedTooBig = 0;
  closedProtocol = 0;

  constructor(readonly o: StreamBounds, private readonly deciders: StreamDeciders, private readonly log?: Logger) {}

  // Output -------------------------------------------------------------------------------------------------

  scheduleFlush(c: Conn): void {
    if (c.flushScheduled) return;
    c.flushScheduled = true;
    queueMicrotask(() => this.flush(c));
  }

  flush(c: Conn): void {
    c.flushScheduled = false;
    const ws = c.ws;
    if (c.closed || ws === null) {
      c.json.clear();
      return;
    }
    const o = this.o;
    const text = c.json.finish(); // the UTF-8 of one text frame; uWS copies what it sends
    const frame = c.bin?.finishView() ?? null;
    // Never let uWS drop an answer: a connection whose unsent output would pass the limit is closed instead,
    // while the close frame still fits, so a client that reads again finds its answers and then a 1008.
    const size = (text === null ? 0 : text.byteLength) + (frame === null ? 0 : frame.byteLength);
    if (ws.getBufferedAmount() + size > o.maxBufferedBytes) {
      this.closedBackpressure++;
      return this.end(c, CLOSE_POLICY_VIOLATION, 'backpressure: output over the limit, client not reading');
    }
    let dropped = false;
    ws.cork(() => {
      if (text !== null && ws.send(text, false) === 2) dropped = true;
      if (frame !== null && ws.send(frame, true) === 2) dropped = true;
    });
    if (dropped) {
      this.closedBackpressure++;
      return this.end(c, CLOSE_POLICY_VIOLATION, 'backpressure: output over the limit, client not reading');
    }
    if (!c.paused && ws.getBufferedAmount() > o.highWaterBytes) c.paused = true;
    if (c.queued > 0 && !c.paused) this.schedulePump(c);
  }

  end(c: Conn, code: number, reason: string): void {
    if (c.closed || c.ws === null) return;
    this.log?.info({ code, reason }, 'closing stream connection');
    c.ws.end(code, reason); // runs the close handler synchronously
  }

  answerDecision(c: Conn, it: Item, d: Decision, subscribed: boolean | undefined): void {
    this.answered++;
    if (it.bin) {
      const flags = (subscribed ? ANSWER_SUBSCRIBED : 0) | degradedFlags(degradedCode(d)) | (d.delayMs !== undefined ? ANSWER_DELAYED : 0);
      this.writer(c).answer(it.id, d.allowed ? KIND_ALLOWED : KIND_DENIED, flags, 0, d.limit, d.remaining, d.resetAfterMs,
        d.delayMs ?? d.retryAfterMs, d.policy, '', d.reason ?? '');
    } else {
      const sub = subscribed === undefined ? '' : `"subscribed":${subscribed},`;
      c.json.push(`{"id":${it.idJson},${sub}${decisionJson(d).slice(1)}`);
    }
    this.scheduleFlush(c);
  }

  /** An error answer; an id of null means the id could not be read. */
  answerError(c: Conn, bin: boolean, id: number | null, idJson: string | null, e: unknown): void {
    this.answered++;
    const err = errorItem(e).error;
    if (bin) {
      this.writer(c).answer(id ?? 0, KIND_ERROR, id === null ? ANSWER_NO_ID : 0, err.status, 0, 0, 0, 0, err.code, err.field ?? '', err.detail);
    } else {
      c.json.push(idJson === null ? `{"error":${JSON.stringify(err)}}` : `{"id":${idJson},"error":${JSON.stringify(err)}}`);
    }
    this.scheduleFlush(c);
  }

  /** The connection's binary answers frame, begun on its first binary answer. */
  writer(c: Conn): FrameWriter {
    return (c.bin ??= new FrameWriter(FRAME_ANSWERS));
  }

  // Input: every check goes through the queue; the pump hands them to the engine within the bounds. ---------

  /** Queues a check. Returns false when the connection was closed for overflowing while paused. */
  enqueue(c: Conn, it: Item): boolean {
    const o = this.o;
    if (this.closing) {
      this.answerError(c, it.bin, it.id, it.idJson, shuttingDown());
      return true;
    }
    if (c.queued >= o.maxQueued) {
      if (c.paused) {
        this.closedBackpressure++;
        this.end(c, CLOSE_POLICY_VIOLATION, `backpressure: more than ${o.maxQueued} checks queued, client not reading`);
        return false;
      }
      this.answerError(c, it.bin, it.id, it.idJson,
        overloaded(`more than ${o.maxQueued} checks queued on this connection`));
      return true;
    }
    c.queue.push(it);
    c.queued++;
    return true;
  }

  schedulePump(c: Conn): void {
    if (c.pumpScheduled) return;
    c.pumpScheduled = true;
    // The next turn, not a microtask: a connection with a long queue yields to the others between rounds.
    setImmediate(() => {
      c.pumpScheduled = false;
      this.pump(c);
    });
  }

  pump(c: Conn): void {
    if (c.closed || c.ws === null) return;
    const o = this.o;
    if (!c.paused && c.ws.getBufferedAmount() > o.highWaterBytes) c.paused = true;
    if (c.paused) return;
    const q = c.queue;
    // At most maxInFlight checks go to the engine per round, whether decided at once or not: a connection with
    // a long queue yields to the others between rounds (the flush of its answers schedules the next).
    let budget = o.maxInFlight;
    while (c.head < q.length && c.inFlight < o.maxInFlight && budget > 0) {
      const e = q[c.head]!;
      if (e instanceof Segment) {
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
        this.deciders.segment(c, e, from, from + k);
        continue;
      }
      q[c.head++] = undefined;
      c.queued--;
      budget--;
      c.inFlight++;
      this.inFlightTotal++;
      this.deciders.item(c, e);
    }
    if (c.head === q.length) {
      q.length = 0;
      c.head = 0;
    } else if (c.head > 4096 && c.head * 2 > q.length) {
      c.queue = q.slice(c.head);
      c.head = 0;
    }
  }

  /** `k` checks of `c` handed to the engine. */
  took(c: Conn, k: number): void {
    c.inFlight += k;
    this.inFlightTotal += k;
  }

  /** `k` checks of `c` answered by the engine (or failed); call {@link settled} once they are answered. */
  landed(c: Conn, k: number): void {
    c.inFlight -= k;
    this.inFlightTotal -= k;
  }

  /** Wakes close() once nothing is in flight. */
  settled(): void {
    if (this.inFlightTotal === 0 && this.onIdle !== null) this.onIdle();
  }

  // Lifecycle ----------------------------------------------------------------------------------------------

  opened(c: Conn): void {
    this.conns.add(c);
  }

  /** The close handler's part: the connection's queue and answers go. */
  dropped(c: Conn): void {
    c.closed = true;
    c.ws = null;
    this.conns.delete(c);
    c.queue.length = 0;
    c.head = 0;
    c.queued = 0;
    c.spare = null;
    c.jsonSpare = null;
    c.json.clear();
  }

  /** Counts the paused connections and the checks queued over all. */
  load(): { paused: number; queued: number } {
    let paused = 0, queued = 0;
    for (const c of this.conns) {
      if (c.paused) paused++;
      queued += c.queued;
    }
    return { paused, queued };
  }

  /** Answers every queued check with CLOSED, waits for those in flight, then closes each connection with 1001. */
  async close(): Promise<void> {
    this.closing = true;
    const shutdown = shuttingDown();
    for (const c of this.conns) {
      for (let i = c.head; i < c.queue.length; i++) {
        const e = c.queue[i]!;
        if (e instanceof BinSeg) {
          for (let j = e.head; j < e.n; j++) this.answerError(c, true, e.ids[j], null, shutdown);
          e.head = e.n;
          e.inQueue = false;
        } else if (e instanceof Segment) {
          const s = e as JsonSeg; // the only other kind
          for (let j = s.head; j < s.n; j++) this.answerError(c, false, 0, s.idJson(j), shutdown);
          s.head = s.n;
          s.inQueue = false;
        } else this.answerError(c, e.bin, e.id, e.idJson, shutdown);
      }
      c.queue.length = 0;
      c.head = 0;
      c.queued = 0;
    }
    if (this.inFlightTotal > 0) await new Promise<void>((r) => (this.onIdle = r));
    for (const c of [...this.conns]) {
      this.flush(c);
      this.end(c, CLOSE_GOING_AWAY, 'server shutting down');
    }
  }
}

/** A binary answer's flag bits for a degraded rule code (degradedCode): bit 2, and the rule in bits 3–4. */
export function degradedFlags(code: number): number {
  return code === 0 ? 0 : ANSWER_DEGRADED | (code << ANSWER_RULE_SHIFT);
}
