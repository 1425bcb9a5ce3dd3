/**
 * `/v1/stream` subscriptions: a denied check sent with `subscribe: true` arms a one-shot push at its retry time
 * (the limiter's clock), confirmed by a peek (cost 0) before it is sent. A peek that finds the key still short
 * re-arms at the engine's lower bound (src/engine/ready-after.ts, which also says when a peek admits). Due subscriptions wait in a min-heap by due
 * time; a timer (every `tickMs`) fires them within the instance bounds of sub-schedule.ts.
 */
import type { CheckRequest, Decision } from '../../types/decision.js';
import type { Limiter } from '../../types.js';
import type { ReadyAfter } from '../../engine/ready-after.js';
import { ANSWER_SUBSCRIBED, KIND_ENDED, KIND_READY } from '../../wire/binary-format.js';
import { errorItem } from '../problem.js';
import { SubscriptionScheduler } from './sub-schedule.js';
import { Sub, type Conn } from './state.js';
import { degradedFlags, type StreamConnections } from './conn.js';
import { degradedCode } from '../../engine/degraded.js';
import { degradedJson } from '../../wire/codec.js';
import type { StreamBounds } from './options.js';

/** The armed subscriptions of one `/v1/stream` route, over all its connections, and their timer. */
export class Subscriptions {
  /** Armed subscriptions. */
  count = 0;
  /** Pushes sent since start. */
  pushed = 0;
  readonly bounds: SubscriptionScheduler;
  private readonly heap = new SubHeap();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly o: StreamBounds,
    private readonly clock: () => number,
    private readonly limiter: Limiter,
    private readonly out: StreamConnections,
    private readonly ready: ReadyAfter,
  ) {
    this.bounds = new SubscriptionScheduler(o);
  }

  /** Arms a subscription for a denied check; false when the connection (or the instance) has no room for another. */
  arm(c: Conn, bin: boolean, id: number, idJson: string, policy: string, key: string | undefined,
    descriptors: CheckRequest['descriptors'], cost: number, retryAfterMs: number): boolean {
    const mapKey = bin ? 'b' + id : 'j' + idJson;
    const subs = (c.subs ??= new Map());
    const old = subs.get(mapKey);
    if (old !== undefined) this.kill(old);
    else if (subs.size >= this.o.maxSubscriptions) return false;
    if (!this.bounds.admit()) return false;
    const peek: CheckRequest = { policy, cost: 0 };
    if (key !== undefined) peek.key = key;
    if (descriptors !== undefined) peek.descriptors = descriptors;
    const s = new Sub(c, mapKey, bin, id, idJson, peek, cost);
    subs.set(mapKey, s);
    this.count++;
    s.due = this.clock() + retryAfterMs;
    this.heap.push(s);
    this.startTimer();
    return true;
  }

  /** Cancels the subscription of `c` under `key` ('j' + JSON id, 'b' + binary id); false when none was armed. */
  cancel(c: Conn, key: string): boolean {
    const s = c.subs?.get(key);
    if (s === undefined) return false;
    this.kill(s);
    return true;
  }

  /** Drops every subscription of a closed connection. */
  dropAll(c: Conn): void {
    if (c.subs !== null) for (const s of [...c.subs.values()]) this.kill(s);
  }

  /** Fires the subscriptions due by the clock, within this tick's budget. */
  tick(): void {
    const heap = this.heap;
    if (heap.size === 0) return;
    const now = this.clock();
    const bounds = this.bounds;
    bounds.startTick();
    while (heap.size > 0 && heap.top().due <= now) {
      if (heap.top().live && !bounds.takeFire()) break; // the rest of a herd goes in the next ticks
      const s = heap.pop();
      if (!s.live) {
        heap.dead--;
        continue;
      }
      this.limiter.check(s.peek).then((d) => this.fire(s, d), (e: unknown) => this.failed(s, e));
    }
    if (heap.dead > 1024 && heap.dead * 2 > heap.size) heap.compact();
    if (this.count === 0 && heap.size === 0) this.stopTimer();
  }

  /** Stops the timer for good (the server closes). */
  stop(): void {
    this.stopped = true;
    this.stopTimer();
  }

  private kill(s: Sub): void {
    if (!s.live) return;
    s.live = false;
    this.count--;
    this.bounds.release();
    s.conn.subs?.delete(s.mapKey);
    if (s.inHeap) this.heap.dead++;
  }

  /** A due subscription's peek: push when a check of its cost would be admitted now, else re-arm at the earliest it could. */
  private fire(s: Sub, d: Decision): void {
    if (!s.live) return;
    const c = s.conn;
    if (this.ready.admits(d, s.cost)) {
      this.kill(s);
      this.pushed++;
      // a peek Redis did not answer (a stall, under onStoreError: local or open) says so, as any decision does
      if (s.bin) this.out.writer(c).answer(s.id, KIND_READY, degradedFlags(degradedCode(d)), 0, d.limit, d.remaining, d.resetAfterMs, 0, d.policy, '', '');
      else {
        c.json.push(`{"id":${s.idJson},"ready":true,"limit":${d.limit},"remaining":${d.remaining},` +
          `"resetAfterMs":${d.resetAfterMs},"policy":${JSON.stringify(d.policy)}${degradedJson(d)}}`);
      }
      this.out.scheduleFlush(c);
      return;
    }
    s.due = this.clock() + this.ready.waitMs(d, s.cost);
    this.heap.push(s);
    this.startTimer();
  }

  private failed(s: Sub, e: unknown): void {
    if (!s.live) return;
    this.kill(s);
    const c = s.conn;
    const err = errorItem(e).error;
    if (s.bin) this.out.writer(c).answer(s.id, KIND_ENDED, ANSWER_SUBSCRIBED, err.status, 0, 0, 0, 0, err.code, err.field ?? '', err.detail);
    else c.json.push(`{"id":${s.idJson},"ready":false,"error":${JSON.stringify(err)}}`);
    this.out.scheduleFlush(c);
  }

  private startTimer(): void {
    if (this.timer !== null || this.o.tickMs === 0 || this.stopped) return;
    this.timer = setInterval(() => this.tick(), this.o.tickMs);
    this.timer.unref();
  }

  private stopTimer(): void {
    if (this.timer === null) return;
    clearInterval(this.timer);
    this.timer = null;
  }
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
