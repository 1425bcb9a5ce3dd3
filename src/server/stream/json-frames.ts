/**
 * `/v1/stream` text frames: JSON, a check `{id, policy, key | descriptors, cost?, subscribe?}`, an unsubscribe
 * `{op: "unsubscribe", id}`, an acquire or release of a concurrency lease (`{id, op, ...}`), or an array of them. Each check is read here and queued; the engine decides it
 * (checkSync where it can, else `limiter.check`), and its answer (carrying its id) goes out in the connection's next text frame. Bad
 * input gets an error answer (with the id when it can be read); an array over `maxChecksPerFrame` closes 1009.
 */
import type { Logger } from 'pino';
import type { CheckRequest, Decision, Limiter } from '../../types.js';
import { checkFromStreamItem } from '../../wire/codec.js';
import { invalidArgument, isSluiceError, shuttingDown } from '../../util/errors.js';
import { isLeaseOp, leaseOp } from '../ws-leases.js';
import { Item, type Conn } from './state.js';
import { HeldAnswers } from '../held.js';
import type { DelayPlaces } from '../../engine/delay.js';
import { takeWait } from '../../wire/delay.js';
import type { StreamConnections } from './conn.js';
import type { Subscriptions } from './subscriptions.js';
import { CLOSE_TOO_BIG, type StreamBounds } from './options.js';

/** A stream item's own fields, beside a check's. */
const STREAM_FIELDS: ReadonlySet<string> = new Set(['id', 'subscribe']);

/** The JSON side of one `/v1/stream` route. */
export class JsonFrames {
  /**
   * Policies whose checks checkSync refused as NOT_SYNCHRONOUS (strict ones), for the policy set they belong
   * to; `syncOff` once it refused the limiter (shards) or the limiter has none.
   */
  private syncRefused = new Set<string>();
  private syncRefusedOf: Limiter['policies'] | null = null;
  private syncOff: boolean;

  constructor(
    private readonly o: StreamBounds,
    private readonly out: StreamConnections,
    private readonly subs: Subscriptions,
    private readonly limiter: Limiter,
    /** onLimit: delay's wait places, freed by held answers whose connection closes (src/server/held.ts). */
    private readonly places: DelayPlaces | null,
    private readonly log?: Logger,
  ) {
    this.syncOff = typeof (limiter as Partial<Limiter>).checkSync !== 'function';
  }

  onText(c: Conn, data: ArrayBuffer): void {
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
          this.limiter.check(it.req).then((x) => this.decided(c, it, x), (x: unknown) => this.failed(c, it, x));
          return;
        }
        return this.decided(c, it, d);
      }
    }
    this.limiter.check(it.req).then((d) => this.decided(c, it, d), (err: unknown) => this.failed(c, it, err));
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

  private decided(c: Conn, it: Item, d: Decision): void {
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
