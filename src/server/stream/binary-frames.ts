/**
 * `/v1/stream` binary frames, the versioned format of src/wire/binary-format.ts: a frame's checks are read straight
 * into a column segment (a record that cannot be read is answered at once), queued as one run, handed to the
 * engine's batch path a run at a time, and answered straight from the outcome arrays into the connection's
 * answers frame. A frame of another version or type closes the connection with 1002, one of more than
 * `maxChecksPerFrame` records with 1009.
 */
import type { Logger } from 'pino';
import { ANSWER_DELAYED, ANSWER_SUBSCRIBED, CHECK_NO_WAIT, CHECK_SUBSCRIBE, FRAME_ANSWERS, FRAME_UNSUBSCRIBE, KIND_ALLOWED, KIND_DENIED, KIND_ENDED, readHeader } from '../../wire/binary-format.js';
import { readCheckColumns, readUnsubscribe } from '../../wire/binary-read.js';
import { OUTCOME_ALLOWED, OUTCOME_ERROR, type BatchOutcomes, type CheckBatch } from '../../engine/batch.js';
import { invalidArgument, isSluiceError } from '../../util/errors.js';
import { BinSeg, type Conn, type Item, type Segment } from './state.js';
import { SegmentFrames } from './segments.js';
import { HeldAnswers } from '../held.js';
import type { DelayPlaces } from '../../engine/delay.js';
import { degradedFlags, type StreamConnections } from './conn.js';
import type { OutcomePool } from './outcomes.js';
import type { Subscriptions } from './subscriptions.js';
import { CLOSE_PROTOCOL_ERROR, CLOSE_TOO_BIG, type StreamBounds, type StreamEngine } from './options.js';

/** The binary side of one `/v1/stream` route. */
export class BinaryFrames extends SegmentFrames<BinSeg> {
  /**
   * @param batch the engine's batch path (or a fallback through check() per check)
   * @param metrics where binary checks are counted, per batch; null when the limiter given counts them itself
   * @param outcomes the route's outcome arrays, reused
   */
  constructor(
    o: StreamBounds,
    out: StreamConnections,
    private readonly subs: Subscriptions,
    batch: CheckBatch,
    metrics: StreamEngine['metrics'] | null,
    outcomes: OutcomePool,
    /** onLimit: delay's wait places, freed by held answers whose connection closes (src/server/held.ts). */
    private readonly places: DelayPlaces | null,
    private readonly log?: Logger,
  ) {
    super(o, out, batch, metrics, outcomes);
  }

  onBinary(c: Conn, data: ArrayBuffer): void {
    const out = this.out;
    const o = this.o;
    const bytes = new Uint8Array(data);
    const h = readHeader(bytes);
    if (!h.ok) {
      out.closedProtocol++;
      const why = h.violation === 'short' ? 'binary frame: shorter than its 4-byte header'
        : h.violation === 'version' ? `binary frame: unsupported version ${bytes[0]} (this server speaks 1)`
          : `binary frame: unknown type ${bytes[1]}`;
      return out.end(c, CLOSE_PROTOCOL_ERROR, why);
    }
    if (h.type === FRAME_ANSWERS) {
      out.closedProtocol++;
      return out.end(c, CLOSE_PROTOCOL_ERROR, 'binary frame: type 2 (answers) goes from server to client');
    }
    if (h.count > o.maxChecksPerFrame) {
      out.closedTooBig++;
      return out.end(c, CLOSE_TOO_BIG, `frame: more than ${o.maxChecksPerFrame} records`);
    }
    if (h.type === FRAME_UNSUBSCRIBE) {
      const ids = readUnsubscribe(bytes, h.count);
      if (typeof ids === 'string') return out.answerError(c, true, null, null, invalidArgument('frame', ids));
      for (const id of ids) {
        const had = this.subs.cancel(c, 'b' + id);
        out.answered++;
        out.writer(c).answer(id, KIND_ENDED, had ? ANSWER_SUBSCRIBED : 0, 0, 0, 0, 0, 0, '', '', '');
      }
      return out.scheduleFlush(c);
    }
    // The frame's checks go straight into columns (a record that cannot be read is answered at once), then
    // into the queue as one run; the pump hands them to the engine as batches.
    const seg = this.segFor(c, h.count);
    const at = seg.n;
    const used = seg.used;
    const got = readCheckColumns(bytes, h.count, seg, at, seg.copy(bytes),
      (id, field, detail) => out.answerError(c, true, id, null, invalidArgument(field, detail)));
    if (typeof got === 'string') {
      seg.used = used;
      out.answerError(c, true, null, null, invalidArgument('frame', got));
      return this.spareIfIdle(c, seg);
    }
    this.admit(c, seg, at, got);
  }

  protected newSeg(capacity: number): BinSeg {
    return new BinSeg(capacity);
  }
  protected isSeg(entry: Item | Segment): entry is BinSeg {
    return entry instanceof BinSeg;
  }
  protected spareOf(c: Conn): BinSeg | null {
    return c.spare;
  }
  protected setSpare(c: Conn, seg: BinSeg | null): void {
    c.spare = seg;
  }
  protected answerAt(c: Conn, seg: BinSeg, i: number, e: Error): void {
    this.out.answerError(c, true, seg.ids[i], null, e);
  }

  /**
   * A binary batch's outcomes: counted in the metrics (per run of one policy), then answered straight from the
   * outcome arrays into the connection's answers frame, arming the subscriptions asked for.
   */
  protected decided(c: Conn, seg: BinSeg, from: number, to: number, out: BatchOutcomes, started: number): void {
    const conns = this.out;
    const metrics = this.metrics;
    const k = to - from;
    const ended = metrics === null ? 0 : metrics.now();
    conns.landed(c, k);
    seg.inFlight -= k;
    const w = c.closed ? null : conns.writer(c);
    let decisions = 0;
    for (let i = from; i < to; i++) {
      const j = i - from;
      const code = out.code[j];
      const policy = seg.policies[i];
      this.countOutcome(seg, i, out, j, started, ended);
      if (code === OUTCOME_ERROR) {
        const e = out.error[j]!;
        if (w === null) continue;
        if (!isSluiceError(e) || e.status >= 500) this.log?.warn({ err: e }, 'stream check failed');
        conns.answerError(c, true, seg.ids[i], null, e);
        continue;
      }
      const retry = out.retryAfterMs[j];
      if (w === null) continue;
      let flags = degradedFlags(out.degraded[j]);
      const delay = out.delayMs[j];
      if (delay > 0) {
        flags |= ANSWER_DELAYED;
        if ((seg.flags[i] & CHECK_NO_WAIT) === 0) {
          this.hold(c, seg.ids[i], flags, out, j, delay);
          continue;
        }
      }
      if ((seg.flags[i] & CHECK_SUBSCRIBE) !== 0 && code !== OUTCOME_ALLOWED && retry >= 0
        && this.subs.arm(c, true, seg.ids[i], '', policy, seg.key(i), undefined, seg.costs[i], retry)) flags |= ANSWER_SUBSCRIBED;
      w.decision(seg.ids[i], code === OUTCOME_ALLOWED ? KIND_ALLOWED : KIND_DENIED, flags, out.limit[j], out.remaining[j],
        out.resetAfterMs[j], delay > 0 ? delay : retry < 0 ? null : retry, out.name[j], out.reason[j]);
      decisions++;
    }
    this.countEnd(started, ended);
    this.outcomes.give(out);
    conns.answered += decisions;
    if (decisions > 0) conns.scheduleFlush(c);
    this.spareIfDone(c, seg);
    conns.settled();
  }

  /** Holds a binary delayed admission (outcome j of `out`, copied: `out` is reused) until it is due. */
  private hold(c: Conn, id: number, flags: number, out: BatchOutcomes, j: number, delay: number): void {
    const limit = out.limit[j], remaining = out.remaining[j], reset = out.resetAfterMs[j], name = out.name[j];
    const conns = this.out;
    (c.held ??= new HeldAnswers(this.places ?? undefined)).hold(delay, out.delayed[j], () => {
      if (c.closed) return;
      conns.answered++;
      conns.writer(c).decision(id, KIND_ALLOWED, flags, limit, remaining, reset, delay, name, '');
      conns.scheduleFlush(c);
    });
  }
}
