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

  private constructor(private readonly redis: Redis, o: RedisOptions) {
    this.prefix = o.prefix ?? 'sluice:';
    this.useRedisTime = (o.clock ?? 'redis') === 'redis';
    redis.defineCommand('sluiceCheck', { lua: checkScript() });
    redis.defineCommand('sluiceSync', { lua: syncScript() });
    const sync = (redis as unknown as { sluiceSync: CheckCommand }).sluiceSync.bind(redis);
    this.mergeCall = (keys, args) => sync(keys.length, ...keys, ...args);
    const check = (redis as unknown as { sluiceCheck: CheckCommand }).sluiceCheck.bind(redis);
    const { breaker, state } = createBreaker(
      (keys: string[], args: number[]) => check(keys.length, ...keys, ...args), o.breaker);
    this.call = (keys, args) => breaker.fire(keys, args);
    this.breakerState = state;
  }

  /** Connects (without waiting for Redis to be up: until it is, decisions take their failure rule). */
  static create(o: RedisOptions = {}, log?: Logger): RedisStore {
    const redis = new Redis(o.url ?? 'redis://127.0.0.1:6379', {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: o.timeoutMs ?? 20,
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
    try {
      return await this.call(keys, [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args]);
    } catch (e) {
      this.errors++;
      throw e;
    }
  }

  /**
   * Sync mode: adds each key's delta (`args`: 5 numbers per key: algorithm, L, P, B, delta) to the shared
   * state and resolves to the merged states, 3 numbers per key (w0, w1, lastSeen). Rejects when Redis fails.
   */
  merge(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    return this.mergeCall(keys, [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args]);
  }

  /** True once connected. */
  get ready(): boolean {
    return this.redis.status === 'ready';
  }

  stats(): { storeErrors: number; breaker: BreakerState; connected: boolean } {
    return { storeErrors: this.errors, breaker: this.breakerState(), connected: this.ready };
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
