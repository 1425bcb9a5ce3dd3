import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { checkScript, syncScript } from './scripts.js';
import { splitChecks, splitKeys, type SlotPart } from './slots.js';
import { configError } from '../util/errors.js';
import { createBreaker, type BreakerOptions, type BreakerState } from './breaker.js';
import { deadline, Liveness, StoreTimeoutError } from './deadline.js';
import { LEG_WIDE, spentBy, unpackReply, widen } from './reply.js';
import { checkCaller } from './check-call.js';
import { followSwitches, hostPorts, sentinelOptions, type SentinelTarget } from './sentinel.js';
import { leaseCaller } from './lease-call.js';
import type { MergeOptions, Store, StoreChannel, StoreFailures, StoreLatency, StoreStats, StoredValues } from './contract.js';
import { hashTag, placedKey } from './slots.js';
import { openChannel, type ChannelTarget } from './pubsub.js';
import { reconnectBackoff } from './backoff.js';
import { LatencyHistogram } from './latency.js';

export { deadline, Liveness, StoreTimeoutError } from './deadline.js';
export type { MergeOptions, StoreFailures, StoreLatency } from './contract.js';

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
  /**
   * Redis Sentinel: the sentinels' addresses and the master's name (src/store/sentinel.ts); the client follows
   * the master through failovers. Excludes `url` and `cluster` (a `CONFIG` SluiceError, field `redis.sentinel`).
   */
  sentinel?: SentinelTarget;
  /** Prefix of every key sluice writes. Default `sluice:`. */
  prefix?: string;
  /**
   * How long a call waits while Redis sends nothing on its connection, in ms; past it the policy's
   * onStoreError applies. A call queued behind others that Redis is answering keeps waiting (slow is not
   * down: see src/store/deadline.ts), up to max(1000, 10 × this) after it was issued. Default 200
   * ({@link DEFAULT_TIMEOUT_MS}).
   */
  timeoutMs?: number;
  /** Sync mode: how often each touched key's consumed delta is merged into Redis, in ms. Default 20. */
  syncIntervalMs?: number;
  /**
   * The time decisions use: `redis` (Redis's TIME, so instances with skewed clocks agree; the default) or
   * `limiter` (the limiter's own clock: replays and tests with a controlled clock).
   */
  clock?: 'redis' | 'limiter';
  breaker?: BreakerOptions;
  /**
   * Strict script calls kept in flight on the connection: while fewer are out, a turn's strict checks are
   * split into calls of at least 16 (a turn of 64 checks into 3), so Redis runs one while this thread builds
   * the next and reads the answers of the one before; 1 sends each turn's checks as one call (up to 64).
   * Smaller calls cost Redis more per decision. Default 3; 1 on a Redis Cluster (its calls are split by slot).
   */
  pipelineCalls?: number;
  /**
   * Answer strict checks Redis is known to deny (a denial of a cost at most theirs, not refilled since) without
   * calling it: src/engine/strict-cache.ts. Default true; false sends every check to Redis.
   */
  overLimitCache?: boolean;
}

/**
 * The default {@link RedisOptions.timeoutMs}: how long Redis may send nothing on a connection with calls
 * waiting before it is taken for down. 20 ms of silence is no evidence on a busy host (on 2 shared cores,
 * Redis itself is descheduled for that long; 4 instances then over-admitted by 2 %), 200 ms is: each check
 * of a stall waits at most that, and only until the breaker opens (5 calls).
 */
export const DEFAULT_TIMEOUT_MS = 200;

export { STORE_LATENCY_BUCKETS } from './latency.js';

type CheckCommand = (numKeys: number, ...keysAndArgs: Array<string | number | Buffer>) => Promise<number[]>;
/** A check call: `args` holds 6 numbers per leg (from 0), `flag` 1 for Redis's clock, `now` the caller's. */
type CheckCall = (keys: string[], args: number[], flag: number, now: number) => Promise<number[]>;

/** lua/check.lua's ARGV[4]: the numbers of `args` from `from` as little-endian doubles. */
function packLegs(args: readonly number[], from: number): Buffer {
  const b = Buffer.allocUnsafe((args.length - from) * 8);
  for (let i = from; i < args.length; i++) b.writeDoubleLE(args[i], (i - from) * 8);
  return b;
}

/**
 * Decides batches of legs with one atomic script call each (lua/check.lua), through ioredis with no offline
 * queue, no retries, the deadline of src/store/deadline.ts (slow is not down) and a circuit breaker: a call
 * either answers while Redis makes progress or fails, and the caller applies the policy's failure rule. Calls
 * are pipelined on one connection: each is written when made, several in flight, answered in order. The script is sent by EVALSHA; after
 * a NOSCRIPT (restart, failover, SCRIPT FLUSH) ioredis resends it once by EVAL on that connection.
 */
export class RedisStore implements Store {
  readonly prefix: string;
  readonly useRedisTime: boolean;
  /** {@link RedisOptions.overLimitCache}. */
  readonly overLimitCache: boolean;
  /**
   * Strict checks per script call: each call is written to the socket as soon as it is full (the client does
   * not auto-pipeline), so Redis runs one while this thread still issues the next, and answers come back
   * staggered. Each key's checks still reach Redis in order: one connection, answered in order. 64: smaller
   * calls cost Redis more per decision (measured: 16 a call, +25 % script time), larger ones pipeline less.
   */
  readonly checksPerCall = 64;
  /** {@link RedisOptions.pipelineCalls}. */
  readonly pipelineCalls: number;
  private readonly call: CheckCall;
  private readonly mergeCall: (keys: string[], args: number[], ms: number) => Promise<number[]>;
  /** A merge call's deadline for `n` keys, in ms. */
  readonly mergeDeadlineMs: (n: number) => number;
  private readonly breakerState: () => BreakerState;
  /** lua/concurrency.lua on one key (src/store/lease-call.ts). */
  private readonly leaseCall: (key: string, args: Array<string | number>) => Promise<number[]>;
  private errors = 0;
  /** Call durations, for the store latency histogram. */
  private readonly latency = new LatencyHistogram();
  /** {@link errors} by kind. */
  private readonly failures: StoreFailures = { timeouts: 0, scriptErrors: 0, unavailable: 0, connectionErrors: 0, breakerRejections: 0 };

  /** Calls answered after they had timed out (their script ran late), and the tokens they spent. */
  private late = { calls: 0, tokens: 0 };

  private constructor(private readonly redis: Redis | Cluster, o: RedisOptions, private readonly target: ChannelTarget,
    private readonly log: Logger | undefined) {
    this.prefix = o.prefix ?? 'sluice:';
    this.useRedisTime = (o.clock ?? 'redis') === 'redis';
    this.overLimitCache = o.overLimitCache ?? true;
    // a Cluster splits every call by slot already, over several masters' connections
    this.pipelineCalls = Math.max(1, Math.floor(o.pipelineCalls ?? (redis instanceof Cluster ? 1 : 3)));
    const timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const lateSpend = (raw: number[], args: readonly number[], from: number): void => {
      this.late.calls++;
      this.late.tokens += spentBy(raw, args, from);
    };
    let check: CheckCall;
    let sync: (keys: string[], args: number[], capMs: number) => Promise<number[]>;
    if (redis instanceof Cluster) {
      const c = clusterCalls(redis, this.prefix, timeoutMs, (e) => this.failed(e), lateSpend);
      check = c.check;
      sync = c.merge;
    } else {
      redis.defineCommand('sluiceSync', { lua: syncScript() });
      // the check request is encoded whole (src/store/check-call.ts); its reply is one string of packed doubles
      const checkCmd = checkCaller(redis, checkScript());
      const syncCmd = (redis as unknown as { sluiceSync: CheckCommand }).sluiceSync.bind(redis);
      const live = new Liveness();
      check = async (keys, args, flag, now) => {
        const raw = await deadline(checkCmd(keys, flag, now, args, 0).then(unpackReply), timeoutMs, live, (r) => lateSpend(r, args, 0));
        return widen(raw, args, 0);
      };
      sync = (keys, args, capMs) => deadline(syncCmd(keys.length, ...keys, ...args), Math.min(timeoutMs, capMs), live, undefined, capMs);
    }
    this.mergeCall = sync;
    // A merge is not on a decision's path: beyond the silence rule (deadline.ts), its cap grows with its keys
    // (~8 µs of Redis time each here), and close() may cut it to the time its drain has left.
    this.mergeDeadlineMs = (n) => Math.max(1000, 10 * timeoutMs, timeoutMs + MERGE_MS_PER_KEY * n);
    const { breaker, state } = createBreaker(check, o.breaker,
      // A script error (a key of the wrong type, say) is about that call's keys, not Redis's health: counting
      // it toward opening would let one poisoned key switch Redis off for every strict policy. Redis saying it
      // cannot serve (OOM, BUSY, LOADING, READONLY...) is about its health, and counts.
      (e) => failureKind(e) === 'scriptErrors');
    this.call = (keys, args, flag, now) => breaker.fire(keys, args, flag, now);
    this.breakerState = state;
    this.leaseCall = leaseCaller(redis, timeoutMs);
  }

  /**
   * Connects (without waiting for Redis to be up: until it is, decisions take their failure rule). Throws a
   * `CONFIG` SluiceError for a bad `cluster` option.
   */
  static create(o: RedisOptions = {}, log?: Logger): RedisStore {
    // The decision's deadline is enforced by deadline() (src/store/deadline.ts); this only clears commands a
    // frozen server never answers from ioredis's queue. It is long so that a call given up on by its deadline
    // still sees its reply if Redis runs it late (a stall of up to a minute): its spend is then counted.
    const commandTimeout = 60_000;
    // reconnect with exponential backoff and jitter, never giving up
    const backoff = reconnectBackoff;
    // ioredis emits 'error' on every failed reconnect; unhandled, it would crash the process
    const onError = (e: Error): void => log?.debug({ err: e.message }, 'redis error');
    if (o.cluster !== undefined) {
      if (o.url !== undefined || o.sentinel !== undefined) throw configError('redis', 'redis.cluster', `give either ${o.url !== undefined ? 'url' : 'sentinel'} or cluster, not both`);
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
      return new RedisStore(cluster, o, { cluster: o.cluster }, log);
    }
    const own = {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout,
      // each script call is written when it is made: they are sized by checksPerCall,
      // and a call written at once runs in Redis while the next is being built
      enableAutoPipelining: false,
      connectTimeout: 1000,
      retryStrategy: backoff,
    };
    if (o.sentinel !== undefined && o.url !== undefined) throw configError('redis', 'redis.sentinel', 'give either url or sentinel, not both');
    const redis = o.sentinel !== undefined
      ? new Redis({ ...own, ...sentinelOptions(o.sentinel, backoff) })
      : new Redis(o.url ?? 'redis://127.0.0.1:6379', own);
    redis.on('error', onError);
    if (o.sentinel !== undefined) followSwitches(redis, o.sentinel);
    return new RedisStore(redis, o, o.sentinel !== undefined ? { sentinel: o.sentinel } : { url: o.url ?? 'redis://127.0.0.1:6379' }, log);
  }

  /**
   * Decides `keys.length` legs: `args` holds 6 numbers per leg (algorithm, L, P, B, cost, group length).
   * Resolves to 4 numbers per leg (code, remaining, resetAfterMs, retryAfterMs); rejects when Redis fails,
   * times out or the circuit is open. In a Cluster, when some slots' calls fail and others answer, it
   * resolves, with NaN in every row of the legs whose call failed (each failed call is counted as an error):
   * those checks take their failure rule, the others their decision.
   */
  async decide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const wide = await this.decideWide(keys, args, nowMs);
    const out = new Array<number>(keys.length * 4);
    for (let j = 0; j < keys.length; j++) for (let a = 0; a < 4; a++) out[j * 4 + a] = wide[j * LEG_WIDE + a];
    return out;
  }

  /**
   * {@link decide}, with {@link LEG_WIDE} numbers per leg: code, remaining, resetAfterMs, retryAfterMs, then
   * the Redis time the leg was decided at (Unix ms), then for a leg of a denied check the state it was decided
   * on (w0, w1, lastSeen; lastSeen −1: absent), else NaN NaN NaN (src/store/reply.ts).
   */
  async decideWide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const start = performance.now();
    try {
      return this.unreadable(await this.call(keys, args, this.useRedisTime ? 1 : 0, nowMs));
    } catch (e) {
      this.failed(e);
      throw e;
    } finally {
      this.latency.observe(start);
    }
  }

  /**
   * One acquire or release of a concurrency lease (src/engine/leases.ts, Store.concurrency): lua/concurrency.lua
   * on `key` with `args` (op, lease id, limit, TTL ms). While the circuit breaker is open it fails at once, as
   * checks do; a failure is counted as a store error.
   */
  async concurrency(key: string, args: Array<string | number>, nowMs: number): Promise<number[]> {
    const start = performance.now();
    try {
      if (this.breakerState() === 'open') throw Object.assign(new Error('breaker is open'), { code: 'EOPENBREAKER' });
      return await this.leaseCall(key, [this.useRedisTime ? 1 : 0, nowMs, ...args]);
    } catch (e) {
      this.failed(e);
      throw e;
    } finally {
      this.latency.observe(start);
    }
  }

  /**
   * Rows the script marked UNREADABLE (a check whose state key holds another type or a malformed value)
   * become NaN rows, which take the policy's failure rule like a failed call's; one script error is counted
   * per call that had any. The rest of the call's checks keep their decisions.
   */
  private unreadable(rows: number[]): number[] {
    let bad = false;
    for (let r = 0; r < rows.length; r += LEG_WIDE) {
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


  /**
   * Sync mode: adds each key's delta (`args`: 5 numbers per key: algorithm, L, P, B, delta) to the shared
   * state and resolves to the merged states, 3 numbers per key (w0, w1, lastSeen). Rejects when Redis fails.
   * `batchId` makes it idempotent: a second call with the same id (a retry after a timeout whose first call
   * ran late) adds nothing. Marker keys expire after 10 minutes.
   */
  async merge(keys: string[], args: number[], nowMs: number, batchId: string, o: MergeOptions = {}): Promise<number[]> {
    const start = performance.now();
    try {
      // the markers' names are completed per slot in a Cluster (clusterCalls); a merge is idempotent by its
      // batch id (and its parents'), so a late one is harmless: no late-spend accounting
      const markers = [batchId, ...(o.parents ?? [])].map((id) => `${this.prefix}merged:${id}`);
      const cap = Math.max(1, Math.min(o.maxMs ?? Infinity, this.mergeDeadlineMs(keys.length)));
      return await this.mergeCall([...keys, ...markers], [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args], cap);
    } catch (e) {
      this.failed(e);
      throw e;
    } finally {
      this.latency.observe(start);
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

  /**
   * Calls `fn` each time the connection (re)opens: Redis may have restarted without its data or failed over,
   * so what was learned from it (src/engine/strict-cache.ts) may no longer hold.
   */
  onConnect(fn: () => void): void {
    this.redis.on('ready', fn);
  }

  /** True once connected. */
  get ready(): boolean {
    return this.redis.status === 'ready';
  }

  /**
   * The names under which `keys` are held: in a Cluster, a guarded policy's keys live in its guard's slot
   * (slots.ts), under a placed name unless they share the guard's hash tag already.
   */
  private placed(keys: readonly string[], guardKey: string | null): string[] {
    if (!(this.redis instanceof Cluster) || guardKey === null) return [...keys];
    const tag = hashTag(guardKey);
    return keys.map((k) => (hashTag(k) === tag ? k : placedKey(this.prefix, tag, k)));
  }

  read(keys: readonly string[], guardKey: string | null): Promise<StoredValues> {
    return Promise.all(this.placed(keys, guardKey).map((k) => this.redis.getBuffer(k)));
  }

  async remove(keys: readonly string[], guardKey: string | null): Promise<number> {
    // in a Cluster, a guarded policy's keys may be held under both names (before and after placement): delete both
    const names = this.redis instanceof Cluster && guardKey !== null ? [...keys, ...this.placed(keys, guardKey)] : keys;
    const counts = await Promise.all(names.map((k) => this.redis.del(k)));
    return counts.reduce((a, c) => a + c, 0);
  }

  async clock(): Promise<number> {
    const time = await this.redis.time();
    return Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  }

  /** Opens a channel on connections of its own (a subscriber cannot run other commands), to the same Redis. */
  channel(name: string, onMessage: (message: string) => void): StoreChannel {
    return openChannel(this.target, name, onMessage, this.log);
  }

  stats(): StoreStats {
    return {
      storeErrors: this.errors, ...this.failures, breaker: this.breakerState(), connected: this.ready,
      lateCalls: this.late.calls, lateSpentTokens: this.late.tokens,
      latency: this.latency.snapshot(),
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
  return hostPorts(nodes, 'redis.cluster');
}

/**
 * Script calls on a Redis Cluster. A script may touch keys of one slot only, so a batch goes out as one call
 * per slot it touches (lua/check.lua for each part: the groups of one check always stay in one part), and
 * the replies are put back in the batch's order. The calls are EVALSHA issued directly: ioredis's
 * auto-pipelining groups them per master by their first key, which it cannot find in a defineCommand
 * script's arguments. A NOSCRIPT (restart, failover, SCRIPT FLUSH) is answered by resending that call as EVAL,
 * which also caches the script on that master again. Each master has its own {@link Liveness}: a frozen
 * master fails its slots' calls while the others keep answering.
 */
function clusterCalls(c: Cluster, prefix: string, timeoutMs: number, partFailed: (e: unknown) => void,
  lateSpend: (raw: number[], args: readonly number[], from: number) => void): {
  check: CheckCall;
  merge: (keys: string[], args: number[], capMs: number) => Promise<number[]>;
} {
  const checkLua = script(checkScript());
  const syncLua = script(syncScript());
  const lives = new Map<string, Liveness>();
  const liveOf = (slot: number): Liveness => {
    const node = (c.slots[slot] as string[] | undefined)?.[0] ?? '?';
    let l = lives.get(node);
    if (l === undefined) lives.set(node, (l = new Liveness()));
    return l;
  };
  const run = async (s: Script, keys: string[], args: Array<number | Buffer>): Promise<number[]> => {
    try {
      return (await c.evalsha(s.sha, keys.length, ...keys, ...args)) as number[];
    } catch (e) {
      if (!String((e as Error)?.message).includes('NOSCRIPT')) throw e;
      return (await c.eval(s.lua, keys.length, ...keys, ...args)) as number[];
    }
  };
  // the check script answers one string of packed doubles (src/store/reply.ts unpackReply): read as bytes
  // (ioredis has evalshaBuffer and evalBuffer on a Cluster, untyped; its callBuffer drops the command name there)
  const bytes = c as unknown as {
    evalshaBuffer(sha: string, n: number, ...a: Array<string | number | Buffer>): Promise<Buffer>;
    evalBuffer(lua: string, n: number, ...a: Array<string | number | Buffer>): Promise<Buffer>;
  };
  const runCheck = async (keys: string[], args: Array<number | Buffer>): Promise<number[]> => {
    try {
      return unpackReply(await bytes.evalshaBuffer(checkLua.sha, keys.length, ...keys, ...args));
    } catch (e) {
      if (!String((e as Error)?.message).includes('NOSCRIPT')) throw e;
      return unpackReply(await bytes.evalBuffer(checkLua.lua, keys.length, ...keys, ...args));
    }
  };
  // without a slot map, ioredis would queue the call until connected: fail now instead
  const notReady = (): Promise<number[]> => Promise.reject(new Error(`redis cluster: ${c.status}, not ready`));
  return {
    // args: 6 per leg. Each slot's call has its own deadline, and the slots that answered are decided even if
    // another failed (a master lost): its legs' rows are NaN. All failed: rejects.
    async check(keys, args, flag, now) {
      if (c.status !== 'ready') return notReady();
      const parts = splitChecks(prefix, keys, args, 6, 5);
      const settled = await Promise.allSettled(parts.map((p) => deadline(runCheck(p.keys, [flag, now, p.keys.length, packLegs(p.args, 0)]),
        timeoutMs, liveOf(p.slot), (r) => lateSpend(r, p.args, 0))));
      const failed = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      // every failed slot call is one store error; when all failed, decide() counts the one it rethrows
      if (failed.length > 0 && failed.length === parts.length) {
        for (const r of failed.slice(1)) partFailed(r.reason);
        throw failed[0].reason;
      }
      for (const r of failed) partFailed(r.reason);
      const out = new Array<number>(keys.length * LEG_WIDE).fill(NaN);
      parts.forEach((p, k) => {
        const r = settled[k];
        if (r.status !== 'fulfilled') return;
        const wide = widen(r.value, p.args, 0);
        p.legs.forEach((leg, i) => {
          for (let a = 0; a < LEG_WIDE; a++) out[leg * LEG_WIDE + a] = wide[i * LEG_WIDE + a];
        });
      });
      return out;
    },
    // keys: the n state keys, then the batch's markers (its own, then its parents'); args: clock flag, now, n,
    // then 5 per key. Each part gets its own markers, in its slot: `<marker>:{<tag>}`; a retry splits the same
    // way, so it meets the same. `capMs` caps each part's deadline (deadline.ts).
    async merge(keys, args, capMs) {
      if (c.status !== 'ready') return notReady();
      const n = args[2];
      const parts = splitKeys(keys.slice(0, n), args.slice(3), 5);
      const markers = keys.slice(n);
      const replies = await Promise.all(parts.map((p) => deadline(
        run(syncLua, [...p.keys, ...markers.map((m) => `${m}:{${p.tag}}`)], [args[0], args[1], p.keys.length, ...p.args]),
        Math.min(timeoutMs, capMs), liveOf(p.slot), undefined, capMs)));
      const out = new Array<number>(n * 3);
      parts.forEach((p, k) => p.legs.forEach((leg, i) => {
        for (let a = 0; a < 3; a++) out[leg * 3 + a] = replies[k][i * 3 + a];
      }));
      return out;
    },
  };
}

/** Added to a merge's deadline per key, in ms. */
export const MERGE_MS_PER_KEY = 0.05;

/**
 * Redis replies that say it cannot serve now (its memory, a busy script, loading, a replica, cluster state),
 * not that the script failed. ioredis may wrap a script's error as "ERR Error running script ...: OOM ...",
 * so the code is looked for after a script-error prefix too.
 */
const UNAVAILABLE_REPLY = /(^|: |^ERR Error running script.*?)(OOM|BUSY|LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|MISCONF|NOREPLICAS)\b/;

/** The kind of a failed store call (see {@link StoreFailures}). */
export function failureKind(e: unknown): keyof StoreFailures {
  const err = e as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (err?.code === 'EOPENBREAKER') return 'breakerRejections';
  if (err instanceof StoreTimeoutError || err?.message === 'Command timed out') return 'timeouts';
  if (err?.name === 'ReplyError') return UNAVAILABLE_REPLY.test(String(err.message)) ? 'unavailable' : 'scriptErrors';
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
