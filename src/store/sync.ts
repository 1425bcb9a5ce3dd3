import { randomUUID } from 'node:crypto';
import { StoreTimeoutError } from './deadline.js';
import type { Store } from './contract.js';
import { debitState } from '../util/debit.js';

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
  /**
   * Most bytes the writer holds for the keys it knows (each key's Redis key, plus {@link LEG_BYTES} of
   * bookkeeping); past it a new key's delta is dropped and counted, as past maxKeys. Default 128 MiB.
   */
  maxBytes?: number;
  /** Where the writer says it dropped deltas (at most one line a second) or could not merge before a deadline. */
  warn?: (obj: object, msg: string) => void;
}

/** What {@link SyncWriter.close} could not merge before its deadline. */
export interface SyncUnmerged {
  /** Distinct keys (Redis keys) whose deltas were never merged. */
  keys: number;
  /** Tokens those deltas held (admitted here, missing from Redis). */
  tokens: number;
}

/** A merge as sent (and, if its outcome is unknown, as sent again): its legs and each one's delta. */
interface Batch {
  id: string;
  legs: SyncLeg[];
  deltas: number[];
  /**
   * The ids of the merges this one was split from, oldest first: each may still run in Redis, so the
   * script applies this part only if none of them did (and marks them, so none will later). See lua/sync.lua.
   */
  parents: string[];
}

/**
 * Most legs in one merge call; more pending go as several calls, each under its own id. (One call's keys and
 * numbers are spread into function arguments on their way to Redis: past about 100,000 of them, V8 throws.)
 */
export const MAX_MERGE = 4096;

/** A merge that timed out is split in two (each part retried under its own id) while it has at least this many legs. */
export const MIN_SPLIT = 64;

/** The longest wait between two attempts of a failing merge, in ms (the wait doubles from intervalMs). */
export const MAX_BACKOFF_MS = 1000;

/** Bytes counted per known leg beyond its Redis key: the SyncLeg object, its slot and cells. */
export const LEG_BYTES = 200;

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
 * outage therefore loses nothing and counts nothing twice (up to maxKeys distinct keys, maxBytes, waiting).
 * A merge's deadline grows with its size (RedisStore.merge), a failing merge is retried after a wait that
 * doubles up to MAX_BACKOFF_MS, and a merge that timed out is split in halves (each still applied once:
 * see {@link Batch.parents}), so one merge too big for the deadline cannot stall the writer for good.
 * Installing a merged state debits what was admitted here while that merge was in flight ({@link debitState}).
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
  private readonly maxBytes: number;
  /** Bytes held for the known legs (their Redis keys plus LEG_BYTES each). */
  private bytes = 0;
  private readonly warn: ((obj: object, msg: string) => void) | null;
  /** Consecutive failed merge attempts: the next waits intervalMs·2^streak (at most MAX_BACKOFF_MS). */
  private streak = 0;
  /** Drops since the last warning, and when (Date.now()) that was. */
  private dropsUnreported = 0;
  private warnedAt = 0;
  /** Set by close(): no timer is armed from then on. */
  private closed = false;
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
    private readonly store: Store,
    private readonly clock: () => number,
    private readonly install: Install,
    o: SyncOptions = {},
  ) {
    this.intervalMs = o.intervalMs ?? 20;
    this.maxKeys = o.maxKeys ?? 1_000_000;
    this.maxBytes = o.maxBytes ?? 128 * 1024 * 1024;
    this.warn = o.warn ?? null;
    this.lastMerge = clock();
  }

  /**
   * Adds `cost` to the delta of the leg (hashLo, hashHi, limitId, ns: unsigned 32-bit integers) and returns true (also when the delta is
   * dropped: maxKeys legs already pending). Returns false when the writer does not know the leg: call
   * {@link add} with its description.
   */
  bump(hashLo: number, hashHi: number, limitId: number, ns: number, cost: number): boolean {
    this.arm();
    const i = this.find(hashLo, hashHi, limitId, ns);
    if (i >= 0) {
      this.touch(i, cost);
      return true;
    }
    if (this.pending.length < this.maxKeys && this.bytes < this.maxBytes) return false;
    this.drop();
    return true;
  }

  /** Arms the merge timer if nothing armed it (never after close()). */
  private arm(): void {
    if (this.timer === null && !this.closed) this.timer = setTimeout(this.tick, this.intervalMs);
  }

  /** Counts a dropped delta, and says so at most once a second. */
  private drop(): void {
    this.dropped++;
    this.dropsUnreported++;
    const now = Date.now();
    if (this.warn !== null && now - this.warnedAt >= 1000) {
      this.warn({ dropped: this.dropsUnreported, droppedTotal: this.dropped, maxKeys: this.maxKeys, maxBytes: this.maxBytes },
        'sync: too many keys waiting to be merged; deltas dropped (those admissions are not shared)');
      this.dropsUnreported = 0;
      this.warnedAt = now;
    }
  }

  /** Adds `cost` to the delta of `leg`, which {@link bump} did not know. */
  add(leg: SyncLeg, cost: number): void {
    this.arm();
    let i = this.find(leg.hashLo, leg.hashHi, leg.limitId, leg.ns);
    if (i < 0) {
      if (this.pending.length >= this.maxKeys || this.bytes >= this.maxBytes) {
        this.drop();
        return;
      }
      this.bytes += leg.redisKey.length + LEG_BYTES;
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
      this.drop();
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
   * sweep (and every 256 intervals, and whenever they hold half of maxBytes): the legs kept stay within a
   * few times the keys touched per interval. Nothing is pending when it runs.
   */
  private sweep(): void {
    const n = this.legs.length;
    if (n <= MIN_LEGS || (n <= 2 * this.kept && this.interval % 256 !== 0 && 2 * this.bytes < this.maxBytes)) return;
    const since = this.interval - 2;
    const kept: SyncLeg[] = [];
    const c = this.cells;
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      if (c[2 * i] >= since) {
        c[2 * kept.length] = c[2 * i];
        kept.push(this.legs[i]);
        bytes += this.legs[i].redisKey.length + LEG_BYTES;
      }
    }
    this.bytes = bytes;
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

  /** The kernel limit ids of the legs with a delta waiting (pending or queued): ids not to free yet. */
  limitIdsHeld(): Set<number> {
    const ids = new Set<number>();
    for (const i of this.pending) ids.add(this.legs[i].limitId);
    for (const b of this.queue) for (const l of b.legs) ids.add(l.limitId);
    return ids;
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

  /**
   * Merges what is pending now (and waits for a merge already running). Resolves even if Redis fails; what
   * is left is tried again after intervalMs, or after the backoff while merges fail.
   * @param maxMs the longest any merge call of this flush may take, in ms (close()'s deadline)
   */
  async flush(maxMs = Infinity): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.running) await this.running;
    if (this.pending.length === 0 && this.queue.length === 0) return;
    this.running = this.step(maxMs).finally(() => {
      this.running = null;
      if (!this.closed && (this.pending.length > 0 || this.queue.length > 0)) this.timer ??= setTimeout(this.tick, this.retryDelay());
    });
    await this.running;
  }

  /** The wait before the next attempt: intervalMs, doubled per consecutive failure up to MAX_BACKOFF_MS, ±25%. */
  private retryDelay(): number {
    if (this.streak === 0) return this.intervalMs;
    const ms = Math.min(this.intervalMs * 2 ** Math.min(this.streak, 20), Math.max(MAX_BACKOFF_MS, this.intervalMs));
    return Math.round(ms * (0.75 + Math.random() / 2));
  }

  /** Settles the merges queued (the one in doubt first), if any; then sends what is pending. */
  private async step(maxMs: number): Promise<void> {
    if (!(await this.drain(maxMs))) return;
    const n = this.pending.length;
    if (n === 0) return;
    for (let at = 0; at < n; at += MAX_MERGE) {
      const m = Math.min(MAX_MERGE, n - at);
      const batch: Batch = { id: this.nextId(), legs: new Array<SyncLeg>(m), deltas: new Array<number>(m), parents: [] };
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
    await this.drain(maxMs);
  }

  private nextId(): string {
    return `${this.instance}:${++this.seq}`;
  }

  /**
   * Sends the queued merges in order; false when one's outcome is unknown (it stays first). Once every one
   * has merged, the view is as fresh as the time this began (read before the first call).
   */
  private async drain(maxMs: number): Promise<boolean> {
    if (this.queue.length === 0) return true;
    const start = this.clock();
    while (this.queue.length > 0) {
      if (!(await this.merge(this.queue[0], maxMs))) return false;
      this.queue.shift();
    }
    this.lastMerge = start;
    return true;
  }

  /**
   * Replaces the first queued merge (which timed out) by its two halves, each under a new id that names it
   * as a parent: whichever of them Redis runs first decides, so its deltas still count once.
   */
  private split(): void {
    const b = this.queue[0];
    const half = b.legs.length >>> 1;
    const parents = [...b.parents, b.id];
    this.queue.splice(0, 1,
      { id: this.nextId(), legs: b.legs.slice(0, half), deltas: b.deltas.slice(0, half), parents },
      { id: this.nextId(), legs: b.legs.slice(half), deltas: b.deltas.slice(half), parents });
  }

  /** One merge call; false if its outcome is unknown (then it is split if it timed out and is large). */
  private async merge(batch: Batch, maxMs: number): Promise<boolean> {
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
      states = await this.store.merge(keys, args, now, batch.id, { parents: batch.parents, maxMs });
    } catch (e) {
      this.failures++;
      this.streak++;
      if (e instanceof StoreTimeoutError && n >= 2 * MIN_SPLIT) this.split();
      return false;
    }
    this.merges++;
    this.streak = 0;
    // Admissions made since this merge was taken are pending now: Redis has not seen them, so the state
    // installed must not give them back. install() writes this thread's kernel before its first await.
    for (let k = 0; k < n; k++) {
      const l = batch.legs[k];
      const i = this.find(l.hashLo, l.hashHi, l.limitId, l.ns);
      if (i < 0 || this.cells[2 * i] !== this.interval) continue;
      const d = this.cells[2 * i + 1];
      if (d > 0) debitState(l.algorithmCode, l.limit, l.periodMs, states[3 * k], states[3 * k + 1], states[3 * k + 2], d, states, 3 * k);
    }
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
    for (const { id, legs, deltas, parents } of this.queue) {
      const keep: Batch = { id, legs: [], deltas: [], parents };
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

  /**
   * Merges everything pending, retrying (with the backoff) until `deadlineMs` from now, then stops: no timer
   * is armed after it returns. What could not be merged by then is counted, said through `warn`, and returned;
   * the deltas themselves are dropped. Each merge call is cut to the time left, so close() takes at most
   * `deadlineMs` (plus one event-loop turn).
   * @param deadlineMs the drain deadline, in ms (default 10,000)
   */
  async close(deadlineMs = 10_000): Promise<SyncUnmerged> {
    this.closed = true;
    const end = Date.now() + deadlineMs;
    for (;;) {
      const left = end - Date.now();
      if (left <= 0) break;
      // bounded by the deadline even when a merge the timer started before close() (with its own, longer
      // deadline) is still running: past the deadline its batch is still queued, so it is counted as lost
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.flush(left), new Promise<void>((r) => (timer = setTimeout(r, left)))]);
      clearTimeout(timer);
      if (this.pending.length === 0 && this.queue.length === 0) break;
      const wait = Math.min(this.retryDelay(), end - Date.now());
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    // a key can have a delta in doubt and a newer one pending: count it once
    const keys = new Set<string>();
    const lost: SyncUnmerged = { keys: 0, tokens: 0 };
    for (const i of this.pending) {
      keys.add(this.legs[i].redisKey);
      lost.tokens += this.cells[2 * i + 1];
    }
    for (const b of this.queue) {
      for (const l of b.legs) keys.add(l.redisKey);
      for (const d of b.deltas) lost.tokens += d;
    }
    lost.keys = keys.size;
    if (lost.keys > 0) {
      this.warn?.({ ...lost, deadlineMs }, 'sync: deltas not merged into Redis before the drain deadline (those admissions are lost to the other instances)');
    }
    return lost;
  }
}

/** A leg's first slot (before masking): the hash's low half is already uniform; the rest is mixed in. */
function slotOf(lo: number, hi: number, limitId: number, ns: number): number {
  const h = Math.imul(lo ^ Math.imul(hi, 0x85ebca6b) ^ Math.imul(limitId + 1, 0xc2b2ae35) ^ Math.imul(ns + 1, 0x27d4eb2f), 0x9e3779b1);
  return h ^ (h >>> 15);
}
