import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { followed } from './cluster-redirect.js';
import { quotaLeaseScript, scriptMissing } from './scripts.js';
import { deadline, Liveness } from './deadline.js';
import { createBreaker } from './breaker.js';
import { DEFAULT_TIMEOUT_MS, RedisStore, type StoreFailures } from './redis.js';
import { failureKind } from './failure-kind.js';
import type { Store } from './contract.js';

/** What one lease call asks (lua/lease.lua's ARGV, see there). Counts in tokens, times in ms. */
export interface LeaseCall {
  /** The key's lease state (a HASH; src/engine/lease/keys.ts). */
  stateKey: string;
  op: 'acquire' | 'return';
  /** Kernel algorithm code: 0 token bucket, 1 GCRA, 2 fixed window, 3 sliding window. */
  algorithm: number;
  limit: number;
  periodMs: number;
  burst: number;
  leaseId: string;
  /**
   * Tokens spent under this lease id so far, a running total that never goes down (not since the last report):
   * Redis settles what it adds to the total it settled last, so a report that reaches Redis twice (a call
   * given up on at its deadline that still ran, then the next call) counts once.
   */
  spentTotal: number;
  /** Fewest tokens worth granting (0: any amount, a renewal ahead of need). */
  need: number;
  /** Most tokens to grant. */
  want: number;
  ttlMs: number;
  /** Read the key's limit and burst from `<stateKey>:share` (regions, scope global). */
  shared?: boolean;
}

/** lua/lease.lua's reply. */
export interface LeaseReply {
  granted: number;
  /** The lease's outstanding tokens in Redis after the call (granted, not yet reported used). */
  count: number;
  /** Time until the lease ends, from the script's time, in ms. */
  ttlMs: number;
  remaining: number;
  /** When nothing was granted although `need` > 0: ms until it could be (−1: never); else 0. */
  retryAfterMs: number;
  resetAfterMs: number;
  /** Other instances' leases the call found expired (their tokens counted as used). */
  expired: number;
  /** The script's time (Unix ms). */
  now: number;
  returned: number;
  /**
   * A bucket's B·P − x after the call, in tokens·P: what it lacks with every outstanding lease token counted
   * as spent (0 for a window).
   */
  deficit: number;
  /** The bucket's refill rate L (tokens·P per ms; a region's share's when shared), 0 for a window. */
  rate: number;
}

/** One lease as it is stored (inspect). */
export interface StoredLease {
  id: string;
  count: number;
  /** Unix ms (Redis's clock, or the limiter's with `clock: 'limiter'`). */
  expiresAt: number;
}

/**
 * The lease calls (lua/lease.lua) on the limiter's Redis connection: one key per call, so each runs on the
 * key's own slot in a Redis Cluster. Calls have the store's deadline (slow is not down, src/store/deadline.ts)
 * and a circuit breaker of their own; a failed call rejects, and the lease decider applies the policy's
 * onStoreError once the tokens it holds are spent.
 */
export class LeaseStore {
  private readonly client: Redis | Cluster;
  private readonly store: RedisStore;
  private readonly lua = quotaLeaseScript();
  private readonly sha = createHash('sha1').update(this.lua).digest('hex');
  private readonly live = new Liveness();
  private readonly fire: (args: Array<string | number>) => Promise<number[]>;
  readonly useRedisTime: boolean;
  /** Lease calls made, and failed by kind (they add up to `failed`). */
  calls = 0;
  failed = 0;
  readonly failures: StoreFailures = { timeouts: 0, scriptErrors: 0, unavailable: 0, connectionErrors: 0, breakerRejections: 0 };

  /** Lease calls on `store` when it is a Redis store (the in-memory store has no lease script), else null. */
  static of(store: Store, timeoutMs?: number): LeaseStore | null {
    return store instanceof RedisStore ? new LeaseStore(store, timeoutMs) : null;
  }

  /** `timeoutMs`: the store's call deadline (RedisOptions.timeoutMs). */
  constructor(store: RedisStore, private readonly timeoutMs = DEFAULT_TIMEOUT_MS) {
    // the store's connection: one socket, and its reconnects, for every mode (inspect reads it the same way)
    this.client = store.connection;
    // its failures and late calls are the store's too (one connection, one set of store metrics)
    this.store = store;
    this.useRedisTime = store.useRedisTime;
    const { breaker } = createBreaker((args: Array<string | number>) => this.run(args), undefined, (e) => failureKind(e) === 'scriptErrors');
    this.fire = (args) => breaker.fire(args);
  }

  private async run(args: Array<string | number>): Promise<number[]> {
    const c = this.client;
    const once = async (to: Redis | Cluster): Promise<number[]> => {
      try {
        return (await to.evalsha(this.sha, 2, ...args)) as number[];
      } catch (e) {
        if (!scriptMissing(e)) throw e;
        return (await to.eval(this.lua, 2, ...args)) as number[];
      }
    };
    // on a Cluster, a redirection ioredis's auto-pipelining leaves unfollowed is followed (src/store/cluster-redirect.ts)
    const call = followed(c, once);
    // a call given up on that Redis runs later has done its work there (lua/lease.lua settles reports once)
    return deadline(call, this.timeoutMs, this.live, () => this.store.countLate());
  }

  /** One lease step; `nowMs` is the limiter's clock (used by the script when the store's clock is the limiter's). */
  async call(q: LeaseCall, nowMs: number): Promise<LeaseReply> {
    this.calls++;
    try {
      const r = await this.fire([
        q.stateKey, `${q.stateKey}:share`, this.useRedisTime ? 1 : 0, nowMs, q.op === 'acquire' ? 'a' : 'r',
        q.algorithm, q.limit, q.periodMs, q.burst, q.leaseId, q.spentTotal, q.need, q.want, q.ttlMs, q.shared === true ? '1' : '0',
      ]);
      return {
        granted: r[0], count: r[1], ttlMs: r[2], remaining: r[3], retryAfterMs: r[4], resetAfterMs: r[5], expired: r[6], now: r[7], returned: r[8],
        deficit: r[9], rate: r[10],
      };
    } catch (e) {
      this.failed++;
      this.failures[failureKind(e)]++;
      this.store.countFailure(e);
      throw e;
    }
  }

  /**
   * A lease state HASH as stored (inspect): its fields, empty when absent. Under the calls' deadline (a frozen
   * Redis fails it after `timeoutMs` of silence, not after ioredis's 60 s), redirections followed on a Cluster.
   */
  async read(stateKey: string): Promise<Record<string, string>> {
    return deadline(followed(this.client, (to) => to.hgetall(stateKey)), this.timeoutMs, this.live);
  }
}
