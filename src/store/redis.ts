import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { checkScript, syncScript } from './scripts.js';
import { createBreaker, type BreakerOptions, type BreakerState } from './breaker.js';

/** How a limiter reaches Redis (`createLimiter({ redis })`, `sluice serve --redis URL`). */
export interface RedisOptions {
  /** `redis://[user:pass@]host:port[/db]`. Default `redis://127.0.0.1:6379`. */
  url?: string;
  /** Prefix of every key sluice writes. Default `sluice:`. */
  prefix?: string;
  /** Bound on every decision's Redis call, in ms; past it the policy's onStoreError applies. Default 20. */
  timeoutMs?: number;
  /** Sync mode: how often each touched key's consumed delta is merged into Redis, in ms. Default 20. */
  syncIntervalMs?: number;
  /**
   * The time decisions use: `redis` (Redis's TIME, so instances with skewed clocks agree; the default) or
   * `limiter` (the limiter's own clock: replays and tests with a controlled clock).
   */
  clock?: 'redis' | 'limiter';
  breaker?: BreakerOptions;
}

/** Upper bounds, in seconds, of the store call latency histogram's buckets. */
export const STORE_LATENCY_BUCKETS: readonly number[] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1];

/** Script call durations (decisions and merges, failed ones included): counts per bucket, +Inf last. */
export interface StoreLatency {
  bounds: readonly number[];
  counts: number[];
  sumSeconds: number;
}

type CheckCommand = (numKeys: number, ...keysAndArgs: Array<string | number>) => Promise<number[]>;

/**
 * Decides batches of legs with one atomic script call each (lua/check.lua), through ioredis with no offline
 * queue, no retries, a command timeout, auto-pipelining and a circuit breaker: a call either answers within
 * the timeout or fails, and the caller applies the policy's failure rule. The script is sent by EVALSHA; after
 * a NOSCRIPT (restart, failover, SCRIPT FLUSH) ioredis resends it once by EVAL on that connection.
 */
export class RedisStore {
  readonly prefix: string;
  readonly useRedisTime: boolean;
  private readonly call: (keys: string[], args: number[]) => Promise<number[]>;
  private readonly mergeCall: (keys: string[], args: number[]) => Promise<number[]>;
  private readonly breakerState: () => BreakerState;
  private errors = 0;
  /** Call durations, for the store latency histogram: counts per bucket of STORE_LATENCY_BUCKETS (+Inf last). */
  private readonly latencyCounts = new Array<number>(STORE_LATENCY_BUCKETS.length + 1).fill(0);
  private latencySum = 0;

  private constructor(private readonly redis: Redis, o: RedisOptions) {
    this.prefix = o.prefix ?? 'sluice:';
    this.useRedisTime = (o.clock ?? 'redis') === 'redis';
    redis.defineCommand('sluiceCheck', { lua: checkScript() });
    redis.defineCommand('sluiceSync', { lua: syncScript() });
    const sync = (redis as unknown as { sluiceSync: CheckCommand }).sluiceSync.bind(redis);
    this.mergeCall = (keys, args) => deadline(sync(keys.length, ...keys, ...args), o.timeoutMs ?? 20);
    const check = (redis as unknown as { sluiceCheck: CheckCommand }).sluiceCheck.bind(redis);
    const timeoutMs = o.timeoutMs ?? 20;
    const { breaker, state } = createBreaker(
      (keys: string[], args: number[]) => deadline(check(keys.length, ...keys, ...args), timeoutMs), o.breaker);
    this.call = (keys, args) => breaker.fire(keys, args);
    this.breakerState = state;
  }

  /** Connects (without waiting for Redis to be up: until it is, decisions take their failure rule). */
  static create(o: RedisOptions = {}, log?: Logger): RedisStore {
    const redis = new Redis(o.url ?? 'redis://127.0.0.1:6379', {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      // The decision's deadline is enforced by deadline() below; this only clears commands a frozen server
      // never answers from ioredis's queue.
      commandTimeout: Math.max(1000, 10 * (o.timeoutMs ?? 20)),
      enableAutoPipelining: true,
      connectTimeout: 1000,
      // reconnect with exponential backoff and jitter, never giving up
      retryStrategy: (n) => Math.round(Math.min(50 * 2 ** n, 2000) * (0.5 + Math.random())),
    });
    // ioredis emits 'error' on every failed reconnect; unhandled, it would crash the process
    redis.on('error', (e: Error) => log?.debug({ err: e.message }, 'redis error'));
    return new RedisStore(redis, o);
  }

  /**
   * Decides `keys.length` legs: `args` holds 6 numbers per leg (algorithm, L, P, B, cost, group length).
   * Resolves to 4 numbers per leg (code, remaining, resetAfterMs, retryAfterMs); rejects when Redis fails,
   * times out or the circuit is open.
   */
  async decide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const start = performance.now();
    try {
      return await this.call(keys, [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args]);
    } catch (e) {
      this.errors++;
      throw e;
    } finally {
      this.observe(start);
    }
  }

  private observe(start: number): void {
    const seconds = (performance.now() - start) / 1000;
    let i = 0;
    while (i < STORE_LATENCY_BUCKETS.length && seconds > STORE_LATENCY_BUCKETS[i]) i++;
    this.latencyCounts[i]++;
    this.latencySum += seconds;
  }

  /**
   * Sync mode: adds each key's delta (`args`: 5 numbers per key: algorithm, L, P, B, delta) to the shared
   * state and resolves to the merged states, 3 numbers per key (w0, w1, lastSeen). Rejects when Redis fails.
   * `batchId` makes it idempotent: a second call with the same id (a retry after a timeout whose first call
   * ran late) adds nothing. Marker keys expire after 10 minutes.
   */
  async merge(keys: string[], args: number[], nowMs: number, batchId: string): Promise<number[]> {
    const start = performance.now();
    try {
      return await this.mergeCall([...keys, `${this.prefix}merged:${batchId}`], [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args]);
    } catch (e) {
      this.errors++;
      throw e;
    } finally {
      this.observe(start);
    }
  }

  /** Waits until connected, at most `ms`; resolves whether or not it connected (decisions cope either way). */
  async connected(ms: number): Promise<boolean> {
    if (this.ready) return true;
    return new Promise((resolve) => {
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.redis.off('ready', onReady);
        resolve(ok);
      };
      const onReady = (): void => done(true);
      const timer = setTimeout(() => done(this.ready), ms);
      this.redis.once('ready', onReady);
    });
  }

  /** True once connected. */
  get ready(): boolean {
    return this.redis.status === 'ready';
  }

  stats(): { storeErrors: number; breaker: BreakerState; connected: boolean; latency: StoreLatency } {
    return {
      storeErrors: this.errors, breaker: this.breakerState(), connected: this.ready,
      latency: { bounds: STORE_LATENCY_BUCKETS, counts: [...this.latencyCounts], sumSeconds: this.latencySum },
    };
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

/**
 * Rejects when `ms` pass without an answer, but only after the loop's next poll phase: a timer is run before
 * sockets are read, so after a turn that blocked longer than `ms`, a reply already waiting in the socket would
 * otherwise lose to the timer, and a decision Redis made and counted would be replaced by the failure rule.
 */
export function deadline<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => setImmediate(() => {
      if (settled) return;
      settled = true;
      reject(new Error(`redis: no answer within ${ms} ms`));
    }), ms);
    p.then((v) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(v);
    }, (e: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(e);
    });
  });
}
