import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { checkScript, syncScript } from './scripts.js';
import { splitChecks, splitKeys, type SlotPart } from './slots.js';
import { configError } from '../util/errors.js';
import { createBreaker, type BreakerOptions, type BreakerState } from './breaker.js';

/**
 * How a limiter reaches Redis (`createLimiter({ redis })`, `sluice serve --redis URL` or
 * `--redis-cluster host:port,...`): one server (`url`) or a Redis Cluster (`cluster`), not both.
 */
export interface RedisOptions {
  /** `redis://[user:pass@]host:port[/db]`. Default `redis://127.0.0.1:6379`. */
  url?: string;
  /**
   * Redis Cluster seed nodes, each `host:port` (`['10.0.0.1:6379', '10.0.0.2:6379']`; an IPv6 host in
   * brackets, `[::1]:6379`). One reachable node is enough: the client learns the other masters and the slot
   * map from it, and follows MOVED/ASK redirections. Scripts run on masters only. A batch is sent as one
   * script call per hash slot, the calls to one master in one pipeline; the checks of a guarded policy are
   * stored in its guard's slot, so a guarded check stays one atomic step. Throws a `CONFIG` SluiceError
   * (field `redis.cluster`) when empty, malformed, or given with `url`.
   */
  cluster?: readonly string[];
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
  private readonly mergeCall: (keys: string[], args: number[], ms: number) => Promise<number[]>;
  /** A merge call's deadline for `n` keys, in ms. */
  readonly mergeDeadlineMs: (n: number) => number;
  private readonly breakerState: () => BreakerState;
  private errors = 0;
  /** Call durations, for the store latency histogram: counts per bucket of STORE_LATENCY_BUCKETS (+Inf last). */
  private readonly latencyCounts = new Array<number>(STORE_LATENCY_BUCKETS.length + 1).fill(0);
  private latencySum = 0;
  /** {@link errors} by kind. */
  private readonly failures: StoreFailures = { timeouts: 0, scriptErrors: 0, connectionErrors: 0, breakerRejections: 0 };

  private constructor(private readonly redis: Redis | Cluster, o: RedisOptions) {
    this.prefix = o.prefix ?? 'sluice:';
    this.useRedisTime = (o.clock ?? 'redis') === 'redis';
    const timeoutMs = o.timeoutMs ?? 20;
    let check: (keys: string[], args: number[]) => Promise<number[]>;
    let sync: (keys: string[], args: number[]) => Promise<number[]>;
    let bounded = false;
    if (redis instanceof Cluster) {
      const c = clusterCalls(redis, this.prefix, timeoutMs, (e) => this.failed(e));
      check = c.check;
      sync = c.merge;
      bounded = true; // each slot's call has its own deadline
    } else {
      redis.defineCommand('sluiceCheck', { lua: checkScript() });
      redis.defineCommand('sluiceSync', { lua: syncScript() });
      const checkCmd = (redis as unknown as { sluiceCheck: CheckCommand }).sluiceCheck.bind(redis);
      const syncCmd = (redis as unknown as { sluiceSync: CheckCommand }).sluiceSync.bind(redis);
      check = (keys, args) => checkCmd(keys.length, ...keys, ...args);
      sync = (keys, args) => syncCmd(keys.length, ...keys, ...args);
    }
    this.mergeCall = (keys, args, ms) => deadline(sync(keys, args), ms);
    // A merge is not on a decision's path: its deadline grows with its keys (~8 µs of Redis time each
    // here), up to what ioredis would wait anyway.
    this.mergeDeadlineMs = (n) => Math.min(timeoutMs + MERGE_MS_PER_KEY * n, Math.max(1000, 10 * timeoutMs));
    const { breaker, state } = createBreaker(
      (keys: string[], args: number[]) => (bounded ? check(keys, args) : deadline(check(keys, args), timeoutMs)), o.breaker,
      // A script error (a key of the wrong type, say) is about that call's keys, not Redis's health: counting
      // it toward opening would let one poisoned key switch Redis off for every strict policy.
      (e) => failureKind(e) === 'scriptErrors');
    this.call = (keys, args) => breaker.fire(keys, args);
    this.breakerState = state;
  }

  /**
   * Connects (without waiting for Redis to be up: until it is, decisions take their failure rule). Throws a
   * `CONFIG` SluiceError for a bad `cluster` option.
   */
  static create(o: RedisOptions = {}, log?: Logger): RedisStore {
    // The decision's deadline is enforced by deadline() below; this only clears commands a frozen server
    // never answers from ioredis's queue.
    const commandTimeout = Math.max(1000, 10 * (o.timeoutMs ?? 20));
    // reconnect with exponential backoff and jitter, never giving up
    const backoff = (n: number): number => Math.round(Math.min(50 * 2 ** n, 2000) * (0.5 + Math.random()));
    // ioredis emits 'error' on every failed reconnect; unhandled, it would crash the process
    const onError = (e: Error): void => log?.debug({ err: e.message }, 'redis error');
    if (o.cluster !== undefined) {
      if (o.url !== undefined) throw configError('redis', 'redis.cluster', 'give either url or cluster, not both');
      const cluster = new Cluster(clusterNodes(o.cluster), {
        scaleReads: 'master', // the scripts write
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        // no retry per request: a command that failed with the connection, or met CLUSTERDOWN, fails at once
        // and the policy's onStoreError applies (a MOVED or ASK redirection is still followed: it ran nowhere)
        retryDelayOnFailover: 0,
        retryDelayOnClusterDown: 0,
        clusterRetryStrategy: backoff,
        slotsRefreshTimeout: 1000,
        // re-read the slot map every second: after a master was lost, auto-pipelined calls never follow a MOVED
        // nor reconnect to it, so without this its slots would keep failing after it is back (or failed over)
        slotsRefreshInterval: 1000,
        redisOptions: { maxRetriesPerRequest: 0, commandTimeout, connectTimeout: 1000 },
      });
      cluster.on('error', onError);
      cluster.on('node error', onError);
      return new RedisStore(cluster, o);
    }
    const redis = new Redis(o.url ?? 'redis://127.0.0.1:6379', {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout,
      enableAutoPipelining: true,
      connectTimeout: 1000,
      retryStrategy: backoff,
    });
    redis.on('error', onError);
    return new RedisStore(redis, o);
  }

  /**
   * Decides `keys.length` legs: `args` holds 6 numbers per leg (algorithm, L, P, B, cost, group length).
   * Resolves to 4 numbers per leg (code, remaining, resetAfterMs, retryAfterMs); rejects when Redis fails,
   * times out or the circuit is open. In a Cluster, when some slots' calls fail and others answer, it
   * resolves, with NaN in every row of the legs whose call failed (each failed call is counted as an error):
   * those checks take their failure rule, the others their decision.
   */
  async decide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const start = performance.now();
    try {
      return this.unreadable(await this.call(keys, [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args]));
    } catch (e) {
      this.failed(e);
      throw e;
    } finally {
      this.observe(start);
    }
  }

  /**
   * Rows the script marked UNREADABLE (a check whose state key holds another type or a malformed value)
   * become NaN rows, which take the policy's failure rule like a failed call's; one script error is counted
   * per call that had any. The rest of the call's checks keep their decisions.
   */
  private unreadable(rows: number[]): number[] {
    let bad = false;
    for (let r = 0; r < rows.length; r += 4) {
      if (rows[r] === UNREADABLE) {
        rows[r] = rows[r + 1] = rows[r + 2] = rows[r + 3] = NaN;
        bad = true;
      }
    }
    if (bad) this.failed(new ScriptStateError());
    return rows;
  }

  /** Counts a failed call, by kind (see {@link StoreFailures}). */
  private failed(e: unknown): void {
    this.errors++;
    this.failures[failureKind(e)]++;
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
  async merge(keys: string[], args: number[], nowMs: number, batchId: string, o: MergeOptions = {}): Promise<number[]> {
    const start = performance.now();
    try {
      // the markers' names are completed per slot in a Cluster (clusterCalls)
      const markers = [batchId, ...(o.parents ?? [])].map((id) => `${this.prefix}merged:${id}`);
      const ms = Math.max(1, Math.min(o.maxMs ?? Infinity, this.mergeDeadlineMs(keys.length)));
      return await this.mergeCall([...keys, ...markers], [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args], ms);
    } catch (e) {
      this.failed(e);
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

  stats(): { storeErrors: number; breaker: BreakerState; connected: boolean; latency: StoreLatency } & StoreFailures {
    return {
      storeErrors: this.errors, ...this.failures, breaker: this.breakerState(), connected: this.ready,
      latency: { bounds: STORE_LATENCY_BUCKETS, counts: [...this.latencyCounts], sumSeconds: this.latencySum },
    };
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

/** A script as EVALSHA needs it. */
interface Script {
  lua: string;
  sha: string;
}

function script(lua: string): Script {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** Host and port of each `host:port` seed; throws a CONFIG error naming `redis.cluster`. */
export function clusterNodes(nodes: readonly string[]): Array<{ host: string; port: number }> {
  if (!Array.isArray(nodes) || nodes.length === 0) {
    throw configError('redis', 'redis.cluster', 'must be a non-empty list of host:port');
  }
  return nodes.map((n) => {
    const m = typeof n === 'string' ? /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(n.trim()) : null;
    const port = m ? Number(m[2]) : 0;
    if (!m || port < 1 || port > 65535) {
      throw configError('redis', 'redis.cluster', `each node must be host:port with a port in 1..65535 (got ${JSON.stringify(n)})`);
    }
    return { host: m[1].startsWith('[') ? m[1].slice(1, -1) : m[1], port };
  });
}

/**
 * Script calls on a Redis Cluster. A script may touch keys of one slot only, so a batch goes out as one call
 * per slot it touches (lua/check.lua for each part: the groups of one check always stay in one part), and
 * the replies are put back in the batch's order; the call fails if any part fails. The calls are EVALSHA
 * issued directly: ioredis's auto-pipelining groups them per master by their first key, which it cannot
 * find in a defineCommand script's arguments. A NOSCRIPT (restart, failover, SCRIPT FLUSH) is answered by
 * resending that call as EVAL, which also caches the script on that master again.
 */
function clusterCalls(c: Cluster, prefix: string, timeoutMs: number, partFailed: (e: unknown) => void): {
  check: (keys: string[], args: number[]) => Promise<number[]>;
  merge: (keys: string[], args: number[]) => Promise<number[]>;
} {
  const checkLua = script(checkScript());
  const syncLua = script(syncScript());
  const run = async (s: Script, keys: string[], args: number[]): Promise<number[]> => {
    try {
      return (await c.evalsha(s.sha, keys.length, ...keys, ...args)) as number[];
    } catch (e) {
      if (!String((e as Error)?.message).includes('NOSCRIPT')) throw e;
      return (await c.eval(s.lua, keys.length, ...keys, ...args)) as number[];
    }
  };
  // without a slot map, ioredis would queue the call until connected: fail now instead
  const notReady = (): Promise<number[]> => Promise.reject(new Error(`redis cluster: ${c.status}, not ready`));
  const gather = async (parts: SlotPart[], calls: Array<Promise<number[]>>, width: number, n: number): Promise<number[]> => {
    const replies = await Promise.all(calls);
    const out = new Array<number>(n * width);
    parts.forEach((p, k) => p.legs.forEach((leg, i) => {
      for (let a = 0; a < width; a++) out[leg * width + a] = replies[k][i * width + a];
    }));
    return out;
  };
  return {
    // args: clock flag, now, n, then 6 per leg. Each slot's call has its own deadline, and the slots that
    // answered are decided even if another failed (a master lost): its legs' rows are NaN. All failed: rejects.
    async check(keys, args) {
      if (c.status !== 'ready') return notReady();
      const parts = splitChecks(prefix, keys, args.slice(3), 6, 5);
      const settled = await Promise.allSettled(parts.map((p) =>
        deadline(run(checkLua, p.keys, [args[0], args[1], p.keys.length, ...p.args]), timeoutMs)));
      const failed = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      // every failed slot call is one store error; when all failed, decide() counts the one it rethrows
      if (failed.length > 0 && failed.length === parts.length) {
        for (const r of failed.slice(1)) partFailed(r.reason);
        throw failed[0].reason;
      }
      for (const r of failed) partFailed(r.reason);
      const out = new Array<number>(keys.length * 4).fill(NaN);
      parts.forEach((p, k) => {
        const r = settled[k];
        if (r.status === 'fulfilled') p.legs.forEach((leg, i) => {
          for (let a = 0; a < 4; a++) out[leg * 4 + a] = r.value[i * 4 + a];
        });
      });
      return out;
    },
    // keys: the n state keys, then the batch's markers (its own, then its parents'); args: clock flag, now, n,
    // then 5 per key. Each part gets its own markers, in its slot: `<marker>:{<tag>}`; a retry splits the same
    // way, so it meets the same.
    merge(keys, args) {
      if (c.status !== 'ready') return notReady();
      const n = args[2];
      const parts = splitKeys(keys.slice(0, n), args.slice(3), 5);
      const markers = keys.slice(n);
      const calls = parts.map((p) =>
        run(syncLua, [...p.keys, ...markers.map((m) => `${m}:{${p.tag}}`)], [args[0], args[1], p.keys.length, ...p.args]));
      return gather(parts, calls, 3, n);
    },
  };
}

/** A sync merge's options: the ids it was split from (lua/sync.lua), and a cap on its deadline in ms. */
export interface MergeOptions {
  parents?: readonly string[];
  maxMs?: number;
}

/** Added to a merge's deadline per key, in ms. */
export const MERGE_MS_PER_KEY = 0.05;

/** Failed store calls by kind; they add up to `storeErrors`. */
export interface StoreFailures {
  /** Calls that got no answer within `timeoutMs` (a frozen or overloaded Redis, a lost network). */
  timeouts: number;
  /** Calls Redis answered with an error: the script failed (WRONGTYPE on a key it reads, OOM, a script error). */
  scriptErrors: number;
  /** Calls that could not be sent or lost their connection (Redis down, restarting, not yet connected). */
  connectionErrors: number;
  /** Calls not made because the circuit breaker was open. */
  breakerRejections: number;
}

/** Redis replies that say it cannot serve now (cluster or server state), not that the script failed. */
const UNAVAILABLE_REPLY = /^(CLUSTERDOWN|LOADING|MASTERDOWN|TRYAGAIN|BUSY)\b/;

function failureKind(e: unknown): keyof StoreFailures {
  const err = e as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (err?.code === 'EOPENBREAKER') return 'breakerRejections';
  if (err instanceof StoreTimeoutError || err?.message === 'Command timed out') return 'timeouts';
  if (err?.name === 'ReplyError' && !UNAVAILABLE_REPLY.test(String(err.message))) return 'scriptErrors';
  return 'connectionErrors';
}

/** The script's code for a leg whose stored state cannot be read (lua/lib.lua UNREADABLE). */
const UNREADABLE = 4;

/** A check whose state key holds something that is not a state (counted as a script error). */
class ScriptStateError extends Error {
  override name = 'ReplyError';
  constructor() {
    super('a state key holds another type or a malformed value');
  }
}

/** A store call that got no answer within its deadline. */
export class StoreTimeoutError extends Error {
  constructor(ms: number) {
    super(`redis: no answer within ${ms} ms`);
    this.name = 'StoreTimeoutError';
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
      reject(new StoreTimeoutError(ms));
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
