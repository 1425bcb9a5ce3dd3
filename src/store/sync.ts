import { randomUUID } from 'node:crypto';
import type { RedisStore } from './redis.js';

/**
 * One leg as the caller describes it the first time the writer sees it: its Redis key and limit, and where its
 * kernel state lives. The writer keeps it (and its key string) while the leg keeps being touched.
 */
export interface SyncLeg {
  redisKey: string;
  algorithmCode: number;
  limit: number;
  periodMs: number;
  burst: number;
  /** Kernel limit id, leg hash (lo, hi) and owning shard (−1: this thread), to install the merged state. */
  limitId: number;
  hashLo: number;
  hashHi: number;
  shard: number;
  /**
   * The caller's number for the rest of what the Redis key is made of (its policy and version): a leg is
   * identified by (hashLo, hashHi, limitId, ns), so two legs with one identity must have one Redis key.
   */
  ns: number;
}

/** Installs merged states: 3 numbers per leg (w0, w1, lastSeen), at the merge's time. */
export type Install = (legs: SyncLeg[], states: number[], nowMs: number) => Promise<void> | void;

export interface SyncOptions {
  /** How often touched keys are merged, in ms. Default 20. */
  intervalMs?: number;
  /** Most distinct keys waiting to be merged; past it a delta is dropped and counted. Default 1,000,000. */
  maxKeys?: number;
}

/** A merge as sent (and, if its outcome is unknown, as sent again): its legs and each one's delta. */
interface Batch {
  id: string;
  legs: SyncLeg[];
  deltas: number[];
}

/**
 * Most legs in one merge call; more pending go as several calls, each under its own id. (One call's keys and
 * numbers are spread into function arguments on their way to Redis: past about 100,000 of them, V8 throws.)
 */
export const MAX_MERGE = 4096;

/** Slots of the leg table: (hashLo, hashHi, limitId, ns, index + 1), 0 in the last for an empty slot. */
const STRIDE = 5;
/** Legs the table has room for before it first grows, and below which it is never swept. */
const MIN_LEGS = 1024;

/**
 * Write-behind for `sync` policies, coalescing by key (as gubernator and envoy's ratelimit do): admitted
 * costs are summed per key, and a timer armed by the first one sends every touched key's delta in one script
 * call (lua/sync.lua; one per MAX_MERGE keys), whose merged states then replace the local ones. One merge is in flight at a time, so
 * deltas reach Redis in order. A merge that fails or times out may still run in Redis later, so it is retried
 * as it was, under the same id, which the script applies at most once; newer deltas wait behind it. An
 * outage therefore loses nothing and counts nothing twice (up to maxKeys distinct keys waiting).
 *
 * Per admitted check the caller calls {@link bump} per leg, with the leg's kernel hash: an open-addressing
 * table of typed arrays finds the leg, and its delta is added to, with no allocation and no string. Only a
 * leg the writer does not know (new, or untouched for a while) is described by the caller ({@link add}),
 * Redis key included; legs touched again and again keep their description from merge to merge.
 */
export class SyncWriter {
  /** Known legs, by index. */
  private legs: SyncLeg[] = [];
  /**
   * Two numbers per known leg (one cache line): the interval it was last made pending in ({@link interval}:
   * pending now; 0: never, or forgotten), and its delta while pending.
   */
  private cells = new Float64Array(2 * MIN_LEGS);
  /** Indexes of the legs pending in this interval. */
  private pending: number[] = [];
  /** Numbers the intervals: one per batch of pending legs taken for a merge. */
  private interval = 1;
  /** The open-addressing table from a leg's identity to its index; capacity a power of 2, at most half full. */
  private slots = new Uint32Array(2 * MIN_LEGS * STRIDE);
  private mask = 2 * MIN_LEGS - 1;
  /** Legs kept by the last sweep. */
  private kept = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly tick = (): void => void this.flush();
  private running: Promise<void> | null = null;
  private readonly intervalMs: number;
  private readonly maxKeys: number;
  /** Limiter-clock time of the last merge that succeeded (or of start). */
  private lastMerge: number;
  private failures = 0;
  private dropped = 0;
  private merges = 0;
  /** Names this writer's merges: `<instance>:<sequence>`. */
  private readonly instance = randomUUID();
  private seq = 0;
  /**
   * Merges taken from the pending legs, sent one at a time in order. The first may be in doubt (it failed or
   * timed out, but may yet run in Redis): it is retried as it is, under the same id, before anything newer is
   * sent, so its deltas count exactly once.
   */
  private queue: Batch[] = [];

  constructor(
    private readonly store: RedisStore,
    private readonly clock: () => number,
    private readonly install: Install,
    o: SyncOptions = {},
  ) {
    this.intervalMs = o.intervalMs ?? 20;
    this.maxKeys = o.maxKeys ?? 1_000_000;
    this.lastMerge = clock();
  }

  /**
   * Adds `cost` to the delta of the leg (hashLo, hashHi, limitId, ns: unsigned 32-bit integers) and returns true (also when the delta is
   * dropped: maxKeys legs already pending). Returns false when the writer does not know the leg: call
   * {@link add} with its description.
   */
  bump(hashLo: number, hashHi: number, limitId: number, ns: number, cost: number): boolean {
    if (this.timer === null) this.timer = setTimeout(this.tick, this.intervalMs);
    const i = this.find(hashLo, hashHi, limitId, ns);
    if (i >= 0) {
      this.touch(i, cost);
      return true;
    }
    if (this.pending.length < this.maxKeys) return false;
    this.dropped++;
    return true;
  }

  /** Adds `cost` to the delta of `leg`, which {@link bump} did not know. */
  add(leg: SyncLeg, cost: number): void {
    if (this.timer === null) this.timer = setTimeout(this.tick, this.intervalMs);
    let i = this.find(leg.hashLo, leg.hashHi, leg.limitId, leg.ns);
    if (i < 0) {
      if (this.pending.length >= this.maxKeys) {
        this.dropped++;
        return;
      }
      i = this.legs.length;
      if (2 * (i + 1) > this.mask + 1) this.resize(2 * (this.mask + 1));
      this.legs.push(leg);
      if (2 * i >= this.cells.length) {
        const cells = new Float64Array(2 * this.cells.length);
        cells.set(this.cells);
        this.cells = cells;
      }
      this.cells[2 * i] = 0;
      this.put(leg, i);
    }
    this.touch(i, cost);
  }

  /** Adds `cost` to leg i's delta, making it pending (delta 0) first if it is not. */
  private touch(i: number, cost: number): void {
    const c = this.cells;
    if (c[2 * i] === this.interval) {
      c[2 * i + 1] += cost;
    } else if (this.pending.length >= this.maxKeys) {
      this.dropped++;
    } else {
      c[2 * i] = this.interval;
      c[2 * i + 1] = cost;
      this.pending.push(i);
    }
  }

  /** The index of a leg, or −1. */
  private find(lo: number, hi: number, limitId: number, ns: number): number {
    const s = this.slots, mask = this.mask;
    // as the table holds them (a caller's signed or fractional number would never be found)
    lo >>>= 0;
    hi >>>= 0;
    limitId >>>= 0;
    ns >>>= 0;
    for (let p = slotOf(lo, hi, limitId, ns) & mask; ; p = (p + 1) & mask) {
      const o = p * STRIDE;
      const v = s[o + 4];
      if (v === 0) return -1;
      if (s[o] === lo && s[o + 1] === hi && s[o + 2] === limitId && s[o + 3] === ns) return v - 1;
    }
  }

  /** Puts leg `i` (not in the table) in the table. */
  private put(leg: SyncLeg, i: number): void {
    const s = this.slots, mask = this.mask;
    let p = slotOf(leg.hashLo, leg.hashHi, leg.limitId, leg.ns) & mask;
    while (s[p * STRIDE + 4] !== 0) p = (p + 1) & mask;
    const o = p * STRIDE;
    s[o] = leg.hashLo;
    s[o + 1] = leg.hashHi;
    s[o + 2] = leg.limitId;
    s[o + 3] = leg.ns;
    s[o + 4] = i + 1;
  }

  /** A table of `cap` slots (a power of 2) holding every known leg. */
  private resize(cap: number): void {
    this.slots = new Uint32Array(cap * STRIDE);
    this.mask = cap - 1;
    for (let i = 0; i < this.legs.length; i++) this.put(this.legs[i], i);
  }

  /**
   * Forgets the legs untouched in the last two intervals, when the legs known have doubled since the last
   * sweep (and every 256 intervals): the legs kept stay within a few times the keys touched per interval.
   * Nothing is pending when it runs.
   */
  private sweep(): void {
    const n = this.legs.length;
    if (n <= MIN_LEGS || (n <= 2 * this.kept && this.interval % 256 !== 0)) return;
    const since = this.interval - 2;
    const kept: SyncLeg[] = [];
    const c = this.cells;
    for (let i = 0; i < n; i++) {
      if (c[2 * i] >= since) {
        c[2 * kept.length] = c[2 * i];
        kept.push(this.legs[i]);
      }
    }
    this.legs = kept;
    this.kept = kept.length;
    c.fill(0, 2 * kept.length);
    let len = MIN_LEGS;
    while (len < kept.length) len *= 2;
    if (2 * len < c.length) this.cells = c.slice(0, 2 * len);
    let cap = 2 * MIN_LEGS;
    while (cap < 2 * kept.length) cap *= 2;
    this.resize(cap);
  }

  /** Ms since the last successful merge: how old this instance's view of other instances' spending is. */
  staleness(nowMs: number): number {
    return Math.max(0, nowMs - this.lastMerge);
  }

  stats(): { merges: number; failures: number; dropped: number; pendingKeys: number; lagMs: number } {
    let queued = 0;
    for (const b of this.queue) queued += b.legs.length;
    return {
      merges: this.merges, failures: this.failures, dropped: this.dropped,
      pendingKeys: this.pending.length + queued, lagMs: this.staleness(this.clock()),
    };
  }

  /** Merges what is pending now (and waits for a merge already running). Resolves even if Redis fails. */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.running) await this.running;
    if (this.pending.length === 0 && this.queue.length === 0) return;
    this.running = this.step().finally(() => {
      this.running = null;
      if (this.pending.length > 0 || this.queue.length > 0) this.timer ??= setTimeout(this.tick, this.intervalMs);
    });
    await this.running;
  }

  /** Settles the merges queued (the one in doubt first), if any; then sends what is pending. */
  private async step(): Promise<void> {
    if (!(await this.drain())) return;
    const n = this.pending.length;
    if (n === 0) return;
    for (let at = 0; at < n; at += MAX_MERGE) {
      const m = Math.min(MAX_MERGE, n - at);
      const batch: Batch = { id: `${this.instance}:${++this.seq}`, legs: new Array<SyncLeg>(m), deltas: new Array<number>(m) };
      for (let k = 0; k < m; k++) {
        const i = this.pending[at + k];
        batch.legs[k] = this.legs[i];
        batch.deltas[k] = this.cells[2 * i + 1];
      }
      this.queue.push(batch);
    }
    this.pending.length = 0; // copied into the batches: the array (and its capacity) is reused
    this.interval++;
    this.sweep();
    await this.drain();
  }

  /**
   * Sends the queued merges in order; false when one's outcome is unknown (it stays first). Once every one
   * has merged, the view is as fresh as the time this began (read before the first call).
   */
  private async drain(): Promise<boolean> {
    if (this.queue.length === 0) return true;
    const start = this.clock();
    while (this.queue.length > 0) {
      if (!(await this.merge(this.queue[0]))) return false;
      this.queue.shift();
    }
    this.lastMerge = start;
    return true;
  }

  /** One merge call; false if its outcome is unknown. */
  private async merge(batch: Batch): Promise<boolean> {
    const now = this.clock();
    const n = batch.legs.length;
    const keys = new Array<string>(n);
    const args = new Array<number>(5 * n);
    for (let k = 0; k < n; k++) {
      const l = batch.legs[k];
      keys[k] = l.redisKey;
      args[5 * k] = l.algorithmCode;
      args[5 * k + 1] = l.limit;
      args[5 * k + 2] = l.periodMs;
      args[5 * k + 3] = l.burst;
      args[5 * k + 4] = batch.deltas[k];
    }
    let states: number[];
    try {
      states = await this.store.merge(keys, args, now, batch.id);
    } catch {
      this.failures++;
      return false;
    }
    this.merges++;
    await this.install(batch.legs, states, now);
    return true;
  }

  /**
   * Drops the deltas of `redisKeys` not merged yet (a key reset: src/engine/inspect.ts), after waiting for a
   * merge in flight, so that no later merge brings the key's old spending back. A merge in doubt keeps its id
   * and its other keys (as do merges queued behind it): if it already ran, Redis holds those deltas, which the caller deletes next. Returns
   * how many keys had deltas dropped.
   */
  async forget(redisKeys: readonly string[]): Promise<number> {
    while (this.running) await this.running;
    const drop = new Set(redisKeys);
    let n = 0;
    const kept: number[] = [];
    for (const i of this.pending) {
      if (drop.has(this.legs[i].redisKey)) {
        this.cells[2 * i] = 0;
        this.cells[2 * i + 1] = 0;
        n++;
      } else {
        kept.push(i);
      }
    }
    this.pending = kept;
    const queue: Batch[] = [];
    for (const { id, legs, deltas } of this.queue) {
      const keep: Batch = { id, legs: [], deltas: [] };
      for (let k = 0; k < legs.length; k++) {
        if (drop.has(legs[k].redisKey)) n++;
        else {
          keep.legs.push(legs[k]);
          keep.deltas.push(deltas[k]);
        }
      }
      if (keep.legs.length > 0) queue.push(keep);
    }
    this.queue = queue;
    return n;
  }

  /** Stops the timer after a last merge of everything pending (one attempt). */
  async close(): Promise<void> {
    await this.flush();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}

/** A leg's first slot (before masking): the hash's low half is already uniform; the rest is mixed in. */
function slotOf(lo: number, hi: number, limitId: number, ns: number): number {
  const h = Math.imul(lo ^ Math.imul(hi, 0x85ebca6b) ^ Math.imul(limitId + 1, 0xc2b2ae35) ^ Math.imul(ns + 1, 0x27d4eb2f), 0x9e3779b1);
  return h ^ (h >>> 15);
}
