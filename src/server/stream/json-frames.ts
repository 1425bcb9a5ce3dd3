/**
 * `/v1/stream` text frames: JSON, a check `{id, policy, key | descriptors, cost?, subscribe?}`, an unsubscribe
 * `{op: "unsubscribe", id}`, an acquire or release of a concurrency lease (`{id, op, ...}`), or an array of
 * them. A frame of plain checks (`{id, policy, key, cost?}` only, src/wire/json-stream.ts) is read straight
 * into a column segment, queued as one run and decided through the engine's batch path a run at a time, as
 * binary frames are, its answers written from the outcome arrays into the connection's answers buffer. Any
 * other frame is parsed (JSON.parse) and read item by item: each check queued, decided through checkSync
 * where it can be, else `limiter.check`. Every answer carries its id and goes out in the connection's next
 * text frame. Bad input gets an error answer (with the id when it can be read); an array over
 * `maxChecksPerFrame` closes 1009.
 */
import type { Logger } from 'pino';
import type { CheckRequest, Decision } from '../../types/decision.js';
import type { Limiter } from '../../types.js';
import { checkFromStreamItem } from '../../wire/codec.js';
import { invalidArgument, isSluiceError, shuttingDown } from '../../util/errors.js';
import { isLeaseOp, leaseOp } from '../ws-leases.js';
import { Item, type Conn, type Segment } from './state.js';
import { SegmentFrames } from './segments.js';
import { HeldAnswers } from '../held.js';
import type { DelayPlaces } from '../../engine/delay.js';
import { takeWait } from '../../wire/delay.js';
import type { StreamConnections } from './conn.js';
import type { Subscriptions } from './subscriptions.js';
import { CLOSE_TOO_BIG, type StreamBounds, type StreamEngine } from './options.js';
import { maxPlainChecks, readPlainChecks } from '../../wire/json-stream.js';
import { OUTCOME_ALLOWED, OUTCOME_ERROR, type BatchOutcomes, type CheckBatch } from '../../engine/batch.js';
import { JsonSeg } from './state.js';
import type { OutcomePool } from './outcomes.js';

/** A stream item's own fields, beside a check's. */
const STREAM_FIELDS: ReadonlySet<string> = new Set(['id', 'subscribe']);

/** The JSON side of one `/v1/stream` route. */
export class JsonFrames extends SegmentFrames<JsonSeg> {
  /**
   * Policies whose checks checkSync refused as NOT_SYNCHRONOUS (strict ones), for the policy set they belong
   * to; `syncOff` once it refused the limiter (shards) or the limiter has none.
   */
  private syncRefused = new Set<string>();
  private syncRefusedOf: Limiter['policies'] | null = null;
  private syncOff: boolean;

  /**
   * @param limiter what a parsed frame's checks are decided by, one at a time
   * @param batch the engine's batch path (or a fallback through check() per check), for frames of plain checks
   * @param metrics where plain checks are counted, per batch; null when the batch path's limiter counts them itself
   * @param outcomes the route's outcome arrays, reused
   */
  constructor(
    o: StreamBounds,
    out: StreamConnections,
    private readonly subs: Subscriptions,
    private readonly limiter: Limiter,
    batch: CheckBatch,
    metrics: StreamEngine['metrics'] | null,
    outcomes: OutcomePool,
    /** onLimit: delay's wait places, freed by held answers whose connection closes (src/server/held.ts). */
    private readonly places: DelayPlaces | null,
    private readonly log?: Logger,
  ) {
    super(o, out, batch, metrics, outcomes);
    this.syncOff = typeof (limiter as Partial<Limiter>).checkSync !== 'function';
  }

  onText(c: Conn, data: ArrayBuffer): void {
    if (this.plain(c, new Uint8Array(data))) return;
    const out = this.out;
    let parsed: unknown;
    try {
      // uWS has already refused text frames that are not UTF-8.
      parsed = JSON.parse(Buffer.from(data).toString('utf8'));
    } catch (e) {
      return out.answerError(c, false, null, null, invalidArgument('frame', `is not valid JSON (${(e as Error).message})`));
    }
    if (Array.isArray(parsed)) {
      if (parsed.length === 0) return out.answerError(c, false, null, null, invalidArgument('frame', 'must not be an empty array'));
      if (parsed.length > this.o.maxChecksPerFrame) {
        out.closedTooBig++;
        return out.end(c, CLOSE_TOO_BIG, `frame: more than ${this.o.maxChecksPerFrame} checks`);
      }
      for (let i = 0; i < parsed.length; i++) if (!this.item(c, parsed[i])) return;
      return;
    }
    if (typeof parsed !== 'object' || parsed === null) {
      return out.answerError(c, false, null, null, invalidArgument('frame', 'must be a check object or an array of them'));
    }
    this.item(c, parsed);
  }

  /**
   * A frame of plain checks, read into the connection's column segment and queued as one run (true), or
   * false with nothing done when the frame is not all plain checks (it is then read the general way).
   */
  private plain(c: Conn, bytes: Uint8Array): boolean {
    const seg = this.segFor(c, Math.min(maxPlainChecks(bytes.byteLength), this.o.maxChecksPerFrame));
    const at = seg.n;
    const used = seg.used;
    const from = seg.copy(bytes);
    const got = readPlainChecks(seg.keyBytes, from, from + bytes.byteLength, seg, at, this.o.maxChecksPerFrame);
    if (got < 0) {
      seg.used = used;
      this.spareIfIdle(c, seg);
      return false;
    }
    this.admit(c, seg, at, got);
    return true;
  }

  protected newSeg(capacity: number): JsonSeg {
    return new JsonSeg(capacity);
  }
  protected isSeg(entry: Item | Segment): entry is JsonSeg {
    return entry instanceof JsonSeg;
  }
  protected spareOf(c: Conn): JsonSeg | null {
    return c.jsonSpare;
  }
  protected setSpare(c: Conn, seg: JsonSeg | null): void {
    c.jsonSpare = seg;
  }
  protected answerAt(c: Conn, seg: JsonSeg, i: number, e: Error): void {
    this.out.answerError(c, false, 0, seg.idJson(i), e);
  }

  /**
   * A plain batch's outcomes: counted in the metrics (per run of one policy), then answered into the
   * connection's answers buffer: a decision composed from the kernel's rows from its fields, one made as an
   * object (lists, the store, a delay...) from the object, as the one-at-a-time path answers it.
   */
  protected decided(c: Conn, seg: JsonSeg, from: number, to: number, res: BatchOutcomes, started: number): void {
    const conns = this.out;
    const metrics = this.metrics;
    const k = to - from;
    const ended = metrics === null ? 0 : metrics.now();
    conns.landed(c, k);
    seg.inFlight -= k;
    const w = c.closed ? null : c.json;
    let decisions = 0;
    for (let i = from; i < to; i++) {
      const j = i - from;
      const code = res.code[j];
      this.countOutcome(seg, i, res, j, started, ended);
      if (code === OUTCOME_ERROR) {
        const e = res.error[j]!;
        if (w === null) continue;
        if (!isSluiceError(e) || e.status >= 500) this.log?.warn({ err: e }, 'stream check failed');
        conns.answerError(c, false, 0, seg.idJson(i), e);
        continue;
      }
      const retry = res.retryAfterMs[j];
      if (w === null) continue;
      const d = res.decisions[j];
      if (d === null) {
        w.decision(seg.keyBytes, seg.idAt[i], seg.idLen[i], code === OUTCOME_ALLOWED, res.limit[j], res.remaining[j],
          res.resetAfterMs[j], retry < 0 ? null : retry, res.name[j], res.reason[j]);
      } else if (d.delayMs !== undefined) {
        // held until due (a plain check has no wait field: it waits), as the one-at-a-time path holds it
        const idJson = seg.idJson(i);
        (c.held ??= new HeldAnswers(this.places ?? undefined)).hold(d.delayMs, d, () => {
          if (c.closed) return;
          conns.answered++;
          c.json.decisionOf(idJson, d);
          conns.scheduleFlush(c);
        });
        continue;
      } else w.decisionOf(seg.idJson(i), d);
      decisions++;
    }
    this.countEnd(started, ended);
    this.outcomes.give(res);
    conns.answered += decisions;
    if (decisions > 0) conns.scheduleFlush(c);
    this.spareIfDone(c, seg);
    conns.settled();
  }

  /**
   * Hands a queued check to the engine (the pump has counted it in flight): at once through checkSync when the
   * limiter can (shards 0, a policy decided in this process: no promise per check), else through check().
   * checkSync decides the checks check() queued first, so the order of a connection's checks is kept either way.
   */
  decide(c: Conn, it: Item): void {
    if (!this.syncOff) {
      const set = this.limiter.policies;
      if (set !== this.syncRefusedOf) {
        this.syncRefused = new Set();
        this.syncRefusedOf = set;
      }
      if (!this.syncRefused.has(it.req.policy)) {
        let d: Decision;
        try {
          d = this.limiter.checkSync(it.req);
        } catch (err) {
          if (!isSluiceError(err) || err.code !== 'NOT_SYNCHRONOUS') return this.failed(c, it, err);
          if (err.field === 'shards') this.syncOff = true;
          else this.syncRefused.add(it.req.policy);
          this.limiter.check(it.req).then((x) => this.itemDecided(c, it, x), (x: unknown) => this.failed(c, it, x));
          return;
        }
        return this.itemDecided(c, it, d);
      }
    }
    this.limiter.check(it.req).then((d) => this.itemDecided(c, it, d), (err: unknown) => this.failed(c, it, err));
  }

  /** One JSON item. Returns false when the connection was closed. */
  private item(c: Conn, v: unknown): boolean {
    const out = this.out;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      out.answerError(c, false, null, null, invalidArgument('check', 'must be a JSON object'));
      return true;
    }
    const obj = v as Record<string, unknown>;
    const id = obj.id;
    let idJson: string;
    if (typeof id === 'string' && id.length > 0 && id.length <= 256) idJson = JSON.stringify(id);
    else if (typeof id === 'number' && Number.isSafeInteger(id)) idJson = String(id);
    else {
      out.answerError(c, false, null, null, invalidArgument('id', id === undefined
        ? 'is required (a string of 1 to 256 characters or a safe integer)'
        : 'must be a string of 1 to 256 characters or a safe integer'));
      return true;
    }
    if (isLeaseOp(obj.op)) return this.leaseItem(c, obj, idJson);
    if (obj.op !== undefined) {
      if (obj.op !== 'unsubscribe') {
        out.answerError(c, false, 0, idJson, invalidArgument('op', `must be "unsubscribe", "acquire" or "release" when present (got ${JSON.stringify(obj.op)})`));
        return true;
      }
      const extra = Object.keys(obj).find((k) => k !== 'op' && k !== 'id');
      if (extra !== undefined) {
        out.answerError(c, false, 0, idJson, invalidArgument(extra, 'is not a field of an unsubscribe (op, id)'));
        return true;
      }
      const had = this.subs.cancel(c, 'j' + idJson);
      out.answered++;
      c.json.push(`{"id":${idJson},"unsubscribed":${had}}`);
      out.scheduleFlush(c);
      return true;
    }
    let subscribe = false;
    if (obj.subscribe !== undefined) {
      if (typeof obj.subscribe !== 'boolean') {
        out.answerError(c, false, 0, idJson, invalidArgument('subscribe', 'must be a boolean'));
        return true;
      }
      subscribe = obj.subscribe;
    }
    let req: CheckRequest;
    let hold: boolean;
    try {
      req = checkFromStreamItem(obj, STREAM_FIELDS);
      hold = takeWait(req, this.limiter.policies);
    } catch (e) {
      out.answerError(c, false, 0, idJson, e);
      return true;
    }
    return out.enqueue(c, new Item(false, 0, idJson, req, subscribe, hold));
  }

  /** An acquire or release (src/server/ws-leases.ts): in flight like a check, answered when it lands. */
  private leaseItem(c: Conn, obj: Record<string, unknown>, idJson: string): boolean {
    const out = this.out;
    let p: Promise<string>;
    try {
      if (out.closing) throw shuttingDown();
      p = leaseOp(this.limiter, obj);
    } catch (e) {
      out.answerError(c, false, 0, idJson, e);
      return true;
    }
    out.took(c, 1);
    p.then((body) => {
      out.landed(c, 1);
      out.settled();
      if (c.closed) return;
      out.answered++;
      c.json.push(`{"id":${idJson},${body.slice(1)}`);
      out.scheduleFlush(c);
    }, (e: unknown) => {
      out.landed(c, 1);
      out.settled();
      if (c.closed) return;
      if (!isSluiceError(e) || e.status >= 500) this.log?.warn({ err: e }, 'stream lease failed');
      out.answerError(c, false, 0, idJson, e);
    });
    return true;
  }

  private itemDecided(c: Conn, it: Item, d: Decision): void {
    this.out.landed(c, 1);
    this.out.settled();
    if (c.closed) return;
    if (d.delayMs !== undefined && it.hold) {
      (c.held ??= new HeldAnswers(this.places ?? undefined)).hold(d.delayMs, d, () => {
        if (!c.closed) this.out.answerDecision(c, it, d, it.subscribe ? false : undefined);
      });
      return;
    }
    let subscribed: boolean | undefined;
    if (it.subscribe) {
      const r = it.req;
      subscribed = !d.allowed && d.retryAfterMs !== null
        && this.subs.arm(c, it.bin, it.id, it.idJson, r.policy, r.key, r.descriptors, r.cost, d.retryAfterMs);
    }
    this.out.answerDecision(c, it, d, subscribed);
  }

  private failed(c: Conn, it: Item, e: unknown): void {
    this.out.landed(c, 1);
    this.out.settled();
    if (c.closed) return;
    if (!isSluiceError(e) || e.status >= 500) this.log?.warn({ err: e }, 'stream check failed');
    this.out.answerError(c, it.bin, it.id, it.idJson, e);
  }
}
