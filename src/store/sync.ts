import { randomUUID } from 'node:crypto';
import type { RedisStore } from './redis.js';

/** One key's write-behind record: the leg it belongs to and the tokens consumed since the last sync. */
export interface SyncEntry {
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
  delta: number;
}

/** Installs merged states: 3 numbers per entry (w0, w1, lastSeen), at the merge's time. */
export type Install = (entries: SyncEntry[], states: number[], nowMs: number) => Promise<void> | void;

export interface SyncOptions {
  /** How often touched keys are merged, in ms. Default 20. */
  intervalMs?: number;
  /** Most distinct keys waiting to be merged; past it a delta is dropped and counted. Default 1,000,000. */
  maxKeys?: number;
}

/**
 * Write-behind for `sync` policies, coalescing by key (as gubernator and envoy's ratelimit do): admitted
 * costs are summed per key, and a timer armed by the first one sends every touched key's delta in one script
 * call (lua/sync.lua), whose merged states then replace the local ones. One merge is in flight at a time, so
 * deltas reach Redis in order. A merge that fails or times out may still run in Redis later, so it is retried
 * as it was, under the same id, which the script applies at most once; newer deltas wait behind it. An
 * outage therefore loses nothing and counts nothing twice (up to maxKeys distinct keys waiting).
 */
export class SyncWriter {
  private pending = new Map<string, SyncEntry>();
  private timer: NodeJS.Timeout | null = null;
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
   * A merge whose outcome is unknown (it failed or timed out, but may yet run in Redis). It is retried as it
   * is, under the same id, before anything newer is sent, so its deltas count exactly once.
   */
  private inDoubt: { id: string; entries: SyncEntry[] } | null = null;

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

  /** Adds `cost` to a leg's delta; `make` describes the leg the first time it is seen. */
  record(redisKey: string, cost: number, make: () => Omit<SyncEntry, 'delta' | 'redisKey'>): void {
    const e = this.pending.get(redisKey);
    if (e !== undefined) e.delta += cost;
    else if (this.pending.size >= this.maxKeys) this.dropped++;
    else this.pending.set(redisKey, { ...make(), redisKey, delta: cost });
    this.timer ??= setTimeout(() => void this.flush(), this.intervalMs);
  }

  /** Ms since the last successful merge: how old this instance's view of other instances' spending is. */
  staleness(nowMs: number): number {
    return Math.max(0, nowMs - this.lastMerge);
  }

  stats(): { merges: number; failures: number; dropped: number; pendingKeys: number; lagMs: number } {
    const inDoubt = this.inDoubt?.entries.length ?? 0;
    return {
      merges: this.merges, failures: this.failures, dropped: this.dropped,
      pendingKeys: this.pending.size + inDoubt, lagMs: this.staleness(this.clock()),
    };
  }

  /** Merges what is pending now (and waits for a merge already running). Resolves even if Redis fails. */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.running) await this.running;
    if (this.pending.size === 0 && this.inDoubt === null) return;
    this.running = this.step().finally(() => {
      this.running = null;
      if (this.pending.size > 0 || this.inDoubt !== null) this.timer ??= setTimeout(() => void this.flush(), this.intervalMs);
    });
    await this.running;
  }

  /** Settles the merge in doubt, if any; then sends what is pending. */
  private async step(): Promise<void> {
    if (this.inDoubt !== null && !(await this.merge(this.inDoubt))) return;
    this.inDoubt = null;
    if (this.pending.size === 0) return;
    const batch = { id: `${this.instance}:${++this.seq}`, entries: [...this.pending.values()] };
    this.pending = new Map();
    if (!(await this.merge(batch))) this.inDoubt = batch;
  }

  /** One merge call; false if its outcome is unknown. */
  private async merge(batch: { id: string; entries: SyncEntry[] }): Promise<boolean> {
    const now = this.clock();
    const keys: string[] = [];
    const args: number[] = [];
    for (const e of batch.entries) {
      keys.push(e.redisKey);
      args.push(e.algorithmCode, e.limit, e.periodMs, e.burst, e.delta);
    }
    let states: number[];
    try {
      states = await this.store.merge(keys, args, now, batch.id);
    } catch {
      this.failures++;
      return false;
    }
    this.merges++;
    this.lastMerge = now;
    await this.install(batch.entries, states, now);
    return true;
  }

  /**
   * Drops the deltas of `redisKeys` not merged yet (a key reset: src/engine/inspect.ts), after waiting for a
   * merge in flight, so that no later merge brings the key's old spending back. A merge in doubt keeps its id
   * and its other keys: if it already ran, Redis holds those deltas, which the caller deletes next. Returns
   * how many keys had deltas dropped.
   */
  async forget(redisKeys: readonly string[]): Promise<number> {
    while (this.running) await this.running;
    const drop = new Set(redisKeys);
    let n = 0;
    for (const k of drop) if (this.pending.delete(k)) n++;
    if (this.inDoubt !== null) {
      const kept = this.inDoubt.entries.filter((e) => !drop.has(e.redisKey));
      n += this.inDoubt.entries.length - kept.length;
      this.inDoubt = kept.length === 0 ? null : { id: this.inDoubt.id, entries: kept };
    }
    return n;
  }

  /** Stops the timer after a last merge of everything pending (one attempt). */
  async close(): Promise<void> {
    await this.flush();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
