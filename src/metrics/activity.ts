/**
 * What each policy has been doing lately, for the status page (`/v1/status`), `GET /v1/hot` and the hot-key
 * metrics: per policy, a ring of per-second counts (admitted, denied, degraded) over the last
 * `windowSeconds`, the checks that left less than 20 % of the limit (near-limit, as envoyproxy/ratelimit
 * counts them), and a Space-Saving sketch of its hot keys (src/metrics/hot-keys.ts).
 *
 * Fed where the server counts decisions (src/metrics/registry.ts). Per check: one Map lookup, a few
 * increments and the sketch's update; no clock read (a one-second timer moves the ring on) and no allocation
 * (a descriptor check's joined key is built only while the sketch is on).
 */
import { SpaceSaving, type HotKey } from './hot-keys.js';

/** A check left less than this share of its limit: it counts as near-limit. */
export const NEAR_LIMIT_SHARE = 0.2;

export interface ActivityOptions {
  /** Keys the hot-key sketch monitors per policy (K: counts overstate by at most checks / K); 0 turns it off. Default 100. */
  hotKeys?: number;
  /** Seconds of per-second counts kept per policy. Default 300. */
  windowSeconds?: number;
  /** Whether a timer moves the ring on each second (tests call {@link Activity.tick} themselves). Default true. */
  timer?: boolean;
  /** Unix ms, for the snapshot's time stamps. Default Date.now. */
  clock?: () => number;
}

/** One policy's counts, as {@link Activity.snapshot} gives them. */
export interface PolicyActivity {
  /** Per second, oldest first, the last entry the second in progress: admitted, denied and degraded checks. */
  admitted: number[];
  denied: number[];
  /** Degraded decisions (the store failed and onStoreError decided), admitted or not: also in the two above. */
  degraded: number[];
  /** Since start: checks seen, denied, admitted leaving less than 20 % of the limit. */
  checks: number;
  deniedTotal: number;
  nearLimit: number;
}

export interface ActivitySnapshot {
  /** Unix ms of the start of the ring's last (current) second. */
  at: number;
  /** Width of one ring entry, ms. */
  intervalMs: number;
  policies: Record<string, PolicyActivity>;
}

const ADMITTED = 0;
const DENIED = 1;
const DEGRADED = 2;

class Entry {
  /** windowSeconds x (admitted, denied, degraded). */
  readonly ring: Float64Array;
  checks = 0;
  denied = 0;
  nearLimit = 0;
  readonly hot: SpaceSaving | null;
  constructor(window: number, hotKeys: number) {
    this.ring = new Float64Array(window * 3);
    this.hot = hotKeys > 0 ? new SpaceSaving(hotKeys) : null;
  }
}

export class Activity {
  readonly hotKeys: number;
  readonly windowSeconds: number;
  private readonly entries = new Map<string, Entry>();
  /** Ring position of the second in progress. */
  private slot = 0;
  /** Unix ms when the second in progress began. */
  private since: number;
  private readonly clock: () => number;
  private readonly timer: NodeJS.Timeout | null;

  /**
   * @param isPolicy whether a name is a configured policy: only those get counts (bounded memory and labels).
   * @throws RangeError for `hotKeys` or `windowSeconds` out of range.
   */
  constructor(private readonly isPolicy: (name: string) => boolean, o: ActivityOptions = {}) {
    this.hotKeys = o.hotKeys ?? 100;
    this.windowSeconds = o.windowSeconds ?? 300;
    if (!Number.isSafeInteger(this.hotKeys) || this.hotKeys < 0 || this.hotKeys > 100_000) {
      throw new RangeError(`hotKeys: must be an integer from 0 to 100000 (got ${this.hotKeys})`);
    }
    if (!Number.isSafeInteger(this.windowSeconds) || this.windowSeconds < 2 || this.windowSeconds > 3600) {
      throw new RangeError(`windowSeconds: must be an integer from 2 to 3600 (got ${this.windowSeconds})`);
    }
    this.clock = o.clock ?? Date.now;
    this.since = this.clock();
    this.timer = o.timer === false ? null : setInterval(() => this.tick(), 1000);
    this.timer?.unref();
  }

  /**
   * Counts one decision under `policy`: `key` (the check's key, or undefined when not known: then only the
   * counts), whether it was admitted, degraded, and what it left (`remaining` of `limit`, in tokens).
   */
  record(policy: string, key: string | undefined, allowed: boolean, degraded: boolean, remaining: number, limit: number): void {
    const e = this.entries.get(policy) ?? this.add(policy);
    if (e === undefined) return;
    const at = this.slot * 3;
    e.checks++;
    if (allowed) {
      e.ring[at + ADMITTED]++;
      // a decision Redis did not make says nothing of what is left (`open` admits with remaining 0)
      if (!degraded && remaining < limit * NEAR_LIMIT_SHARE) e.nearLimit++;
    } else {
      e.ring[at + DENIED]++;
      e.denied++;
    }
    if (degraded) e.ring[at + DEGRADED]++;
    if (key !== undefined && e.hot !== null) e.hot.add(key, !allowed);
  }

  /** Whether the hot-key sketch is on: callers skip building a key they do not have otherwise. */
  wantsKeys(): boolean {
    return this.hotKeys > 0;
  }

  /** Starts the next second: its counts start at 0. */
  tick(): void {
    this.slot = (this.slot + 1) % this.windowSeconds;
    this.since = this.clock();
    const at = this.slot * 3;
    for (const e of this.entries.values()) e.ring.fill(0, at, at + 3);
  }

  /** The `limit` hottest keys of `policy` (undefined for a policy with no counts: unknown or not checked yet). */
  hot(policy: string, limit: number): HotKey[] | undefined {
    const e = this.entries.get(policy);
    if (e === undefined) return this.isPolicy(policy) ? [] : undefined;
    return e.hot === null ? [] : e.hot.top(limit);
  }

  /** Checks seen by `policy`'s sketch, and its error bound now (the smallest monitored count). */
  hotTotals(policy: string): { checks: number; errorBound: number } {
    const h = this.entries.get(policy)?.hot;
    return h == null ? { checks: 0, errorBound: 0 } : { checks: h.total, errorBound: h.minCount() };
  }

  /** Policies with counts, in the order they were first counted. */
  policies(): string[] {
    return [...this.entries.keys()];
  }

  /** Near-limit counts since start, per policy. */
  nearLimit(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [name, e] of this.entries) out.set(name, e.nearLimit);
    return out;
  }

  /** Every policy's counts: the rings unrolled oldest first (the last entry the second in progress). */
  snapshot(): ActivitySnapshot {
    const policies: Record<string, PolicyActivity> = {};
    const w = this.windowSeconds;
    for (const [name, e] of this.entries) {
      const admitted = new Array<number>(w);
      const denied = new Array<number>(w);
      const degraded = new Array<number>(w);
      for (let i = 0; i < w; i++) {
        const at = ((this.slot + 1 + i) % w) * 3;
        admitted[i] = e.ring[at + ADMITTED];
        denied[i] = e.ring[at + DENIED];
        degraded[i] = e.ring[at + DEGRADED];
      }
      policies[name] = { admitted, denied, degraded, checks: e.checks, deniedTotal: e.denied, nearLimit: e.nearLimit };
    }
    return { at: this.since, intervalMs: 1000, policies };
  }

  /** Stops the timer. */
  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
  }

  /** A policy checked for the first time (a configured one only: names stay bounded). */
  private add(policy: string): Entry | undefined {
    if (!this.isPolicy(policy)) return undefined;
    const e = new Entry(this.windowSeconds, this.hotKeys);
    this.entries.set(policy, e);
    return e;
  }
}
