import { randomUUID } from 'node:crypto';
import { StoreTimeoutError } from './deadline.js';
import type { Store } from './contract.js';
import { debitState } from '../util/debit.js';
import { DeltaTable, type SyncLeg } from './sync-deltas.js';

/** Installs merged states: 3 numbers per leg (w0, w1, lastSeen), at the merge's time. */
export type Install = (legs: SyncLeg[], states: number[], nowMs: number) => Promise<void> | void;

export interface SyncOptions {
  /** How often touched keys are merged, in ms. Default 20. */
  intervalMs?: number;
  /** Most distinct keys waiting to be merged; past it a delta is dropped and counted. Default 1,000,000. */
  maxKeys?: number;
  /**
   * Most bytes the writer holds for the keys it knows (each key's Redis key, plus `LEG_BYTES` (sync-deltas.ts) of
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
 * Per admitted check the caller calls {@link bump} per leg, with the leg's kernel hash: the delta table
 * (src/store/sync-deltas.ts) finds the leg, and its delta is added to, with no allocation and no string. Only a
 * leg the writer does not know (new, or untouched for a while) is described by the caller ({@link add}),
 * Redis key included; legs touched again and again keep their description from merge to merge.
 */
export class SyncWriter {
  /** The legs known and their deltas pending in this interval. */
  private readonly deltas: DeltaTable;
  private timer: NodeJS.Timeout | null = null;
  private readonly tick = (): void => void this.flush();
  private running: Promise<void> | null = null;
  private readonly intervalMs: number;
  private readonly maxKeys: number;
  private readonly maxBytes: number;
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
    this.deltas = new DeltaTable(this.maxKeys, this.maxBytes);
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
    const i = this.deltas.find(hashLo, hashHi, limitId, ns);
    if (i >= 0) {
      if (!this.deltas.touch(i, cost)) this.drop();
      return true;
    }
    if (!this.deltas.full()) return false;
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
    let i = this.deltas.find(leg.hashLo, leg.hashHi, leg.limitId, leg.ns);
    if (i < 0) {
      if (this.deltas.full()) {
        this.drop();
        return;
      }
      i = this.deltas.insert(leg);
    }
    if (!this.deltas.touch(i, cost)) this.drop();
  }

  /** The kernel limit ids of the legs with a delta waiting (pending or queued): ids not to free yet. */
  limitIdsHeld(): Set<number> {
    const ids = new Set<number>();
    this.deltas.forEachPending((l) => ids.add(l.limitId));
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
      pendingKeys: this.deltas.size + queued, lagMs: this.staleness(this.clock()),
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
    if (this.deltas.size === 0 && this.queue.length === 0) return;
    this.running = this.step(maxMs).finally(() => {
      this.running = null;
      if (!this.closed && (this.deltas.size > 0 || this.queue.length > 0)) this.timer ??= setTimeout(this.tick, this.retryDelay());
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
    if (this.deltas.size === 0) return;
    for (const { legs, deltas } of this.deltas.take(MAX_MERGE)) this.queue.push({ id: this.nextId(), legs, deltas, parents: [] });
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
      const d = this.deltas.pendingDelta(l);
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
    let n = this.deltas.forget(drop);
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
      if (this.deltas.size === 0 && this.queue.length === 0) break;
      const wait = Math.min(this.retryDelay(), end - Date.now());
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    // a key can have a delta in doubt and a newer one pending: count it once
    const keys = new Set<string>();
    const lost: SyncUnmerged = { keys: 0, tokens: 0 };
    this.deltas.forEachPending((l, d) => {
      keys.add(l.redisKey);
      lost.tokens += d;
    });
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
