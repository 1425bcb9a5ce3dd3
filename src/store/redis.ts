import { performance } from 'node:perf_hooks';
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { checkLibrary, checkScript, syncScript } from './scripts.js';
import { configError } from '../util/errors.js';
import { createBreaker, probeWrite, type BreakerOptions, type BreakerState } from './breaker.js';
import { deadline, deadlineOrDrop, Liveness } from './deadline.js';
import { LEG_WIDE, spentBy, unpackReply, widen } from './reply.js';
import { checkCaller } from './check-call.js';
import { followSwitches, sentinelOptions, type SentinelTarget } from './sentinel.js';
import { leaseCaller } from './lease-call.js';
import { CONCURRENCY_ACQUIRE, CONCURRENCY_RELEASE, type MergeOptions, type Store, type StoreChannel, type StoreFailures, type StoreStats, type StoredValues } from './contract.js';
import { hashTag, placedKey } from './slots.js';
import { openChannel, type ChannelTarget } from './pubsub.js';
import { reconnectBackoff } from './backoff.js';
import { LatencyHistogram } from './latency.js';
import { clusterCalls, clusterNodes, type CheckCall } from './cluster-calls.js';
import { failureKind } from './failure-kind.js';
import { followed } from './cluster-redirect.js';

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
   * split into calls of at least 16 (a turn of 64 checks into 2 of 32), so Redis runs one while this thread
   * reads the answers of the other and builds the next; 1 sends each turn's checks as one call (up to 64).
   * Smaller calls cost Redis more per decision. Default 2 (at 64 in flight 1.2x the decisions/s of 3, whose
   * third call tends to reach Redis with the second, so both are run and answered together and the two sides
   * take turns: bench/README.md); 1 on a Redis Cluster (its calls are split by slot).
   */
  pipelineCalls?: number;
  /**
   * Strict script calls of fewer checks than this, made while another call is in flight in a turn of at least
   * half as many strict checks, wait for a call's answer (or until they have this many checks, or a smaller
   * turn comes) and go out as one call: where most checks are answered without Redis (the over-limit cache), a
   * busy turn's few others would each pay a call's fixed cost on both sides. A turn of fewer strict checks (few
   * checks at a time) sends its call at once: there a held check waiting a round trip costs more than a call.
   * The wait is at most the call ahead's (its deadline); when the calls ahead time out, the held checks take
   * the failure rule. Default 16 (90 % of checks over the limit, 64 in flight: 1.18x the decisions/s,
   * 0.85x the client's and 0.80x Redis's CPU per decision against 0: bench/README.md); 0 sends every call at once. 0 on a Redis
   * Cluster, where another value is refused (a `CONFIG` SluiceError, field `redis.holdUnder`): a call there is
   * split by slot over masters each with its own liveness, so the call ahead's timeout (one master frozen) says
   * nothing of a held check's master, and a slot that failed comes back as NaN rows, which sent the held call
   * into a second full deadline on that master.
   */
  holdUnder?: number;
  /**
   * Answer strict checks Redis is known to deny (a denial of a cost at most theirs, not refilled since) without
   * calling it: src/engine/strict/over-limit.ts. Default true; false sends every check to Redis.
   */
  overLimitCache?: boolean;
}

/**
 * The default {@link RedisOptions.timeoutMs}: how long Redis may send nothing on a connection with calls
 * waiting before it is taken for down. 20 ms of silence is no evidence on a busy host (on 2 shared cores,
 * Redis itself is descheduled for that long; 4 instances then over-admitted by 2 %), 200 ms is: each check
 * of a stall waits at most that, and only until the breaker opens, at the 5th failure in a row
 * (src/store/breaker.ts; however many successes its window holds): the checks issued before then, about one
 * deadline's worth of traffic plus 5, wait; later ones fail at once.
 */
export const DEFAULT_TIMEOUT_MS = 200;

export { STORE_LATENCY_BUCKETS } from './latency.js';

type CheckCommand = (numKeys: number, ...keysAndArgs: Array<string | number | Buffer>) => Promise<number[]>;

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

  /** The store's connection (one Redis, or a Cluster), shared by the lease calls (src/store/lease.ts). */
  get connection(): Redis | Cluster {
    return this.redis;
  }
  /** False on a Redis Cluster: its masters' clocks may differ. */
  readonly oneClock: boolean;
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
  /** {@link RedisOptions.holdUnder}. */
  readonly holdUnder: number;
  /** Half of holdUnder, rounded up: see {@link RedisOptions.holdUnder}. */
  readonly holdTurn: number;
  private readonly call: CheckCall;
  private readonly mergeCall: (keys: string[], args: number[], ms: number) => Promise<number[]>;
  /** A merge call's deadline for `n` keys, in ms. */
  readonly mergeDeadlineMs: (n: number) => number;
  private readonly breakerState: () => BreakerState;
  /**
   * `p`, a command on `key` that is not a check (an admin read or delete, Redis's clock), under a check's
   * deadline (src/store/deadline.ts): a frozen Redis fails it after `timeoutMs` of silence on its connection
   * (a Cluster: its slot's master's), instead of ioredis's 60 s command timeout.
   */
  private readonly bounded: <T>(p: Promise<T>, key: string) => Promise<T>;
  /** Stops the circuit breakers (their heartbeat: breaker.ts), at close(). */
  private readonly stopBreakers: () => void;
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
    this.oneClock = !(redis instanceof Cluster);
    // a Cluster splits every call by slot already, over several masters' connections
    this.pipelineCalls = Math.max(1, Math.floor(o.pipelineCalls ?? (redis instanceof Cluster ? 1 : 2)));
    // a Cluster's calls are never held (RedisOptions.holdUnder): create() refuses another value than 0
    this.holdUnder = Math.max(0, Math.floor(o.holdUnder ?? (redis instanceof Cluster ? 0 : 16)));
    this.holdTurn = Math.ceil(this.holdUnder / 2);
    const timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const lateSpend = (raw: number[], args: readonly number[], from: number): void => {
      this.late.calls++;
      this.late.tokens += spentBy(raw, args, from);
    };
    // the connection's replies, which a call's deadline counts from (src/store/deadline.ts); on a Cluster, only
    // the breaker's idle probe uses it (each slot's calls keep their own: cluster-calls.ts)
    const live = new Liveness();
    let check: CheckCall;
    let sync: (keys: string[], args: number[], capMs: number) => Promise<number[]>;
    // A script error (a key of the wrong type, say) is about that call's keys, not Redis's health: counting it
    // toward opening would let one poisoned key switch Redis off for every strict policy. Redis saying it cannot
    // serve (OOM, BUSY, LOADING, READONLY...) is about its health, and counts.
    const healthy = (e: unknown): boolean => failureKind(e) === 'scriptErrors';
    let cluster: ReturnType<typeof clusterCalls> | null = null;
    if (redis instanceof Cluster) {
      // each master has its own breaker there (cluster-calls.ts): a master lost fails only its own slots
      cluster = clusterCalls(redis, this.prefix, timeoutMs, (e) => this.failed(e), lateSpend, { options: o.breaker, healthy });
      check = cluster.check;
      sync = cluster.merge;
    } else {
      redis.defineCommand('sluiceSync', { lua: syncScript() });
      // the check request is encoded whole (src/store/check-call.ts); its reply is one string of packed doubles
      const checkCmd = checkCaller(redis, checkScript(), checkLibrary());
      const syncCmd = (redis as unknown as { sluiceSync: CheckCommand }).sluiceSync.bind(redis);
      check = async (keys, args, flag, now, wire, heldSince) => {
        // a held call's deadline counts from when its first check was held (Store.decideWide); given up on while
        // it still waited behind a library reload, it is not written (check-call.ts)
        const raw = await deadlineOrDrop((givenUp) => checkCmd(keys, flag, now, args, 0, wire, givenUp).then((r) => unpackReply(r, args, 0)),
          timeoutMs, live, (r) => lateSpend(r, args, 0), undefined, heldSince);
        return widen(raw, args, 0);
      };
      sync = (keys, args, capMs) => deadline(syncCmd(keys.length, ...keys, ...args), Math.min(timeoutMs, capMs), live, undefined, capMs);
    }
    this.mergeCall = sync;
    // A merge is not on a decision's path: beyond the silence rule (deadline.ts), its cap grows with its keys
    // (~8 µs of Redis time each here), and close() may cut it to the time its drain has left.
    this.mergeDeadlineMs = (n) => Math.max(1000, 10 * timeoutMs, timeoutMs + MERGE_MS_PER_KEY * n);
    if (cluster !== null) {
      this.call = check;
      this.breakerState = cluster.state;
      this.bounded = cluster.bounded;
      this.stopBreakers = cluster.shutdown;
    } else {
      this.bounded = (p) => deadline(p, timeoutMs, live);
      const probeKey = `${this.prefix}breaker-probe`;
      // idle, a write under the decision's deadline says whether Redis takes checks again (a frozen one does
      // not answer; an unwell one refuses): `probeWrite`
      const { breaker, state } = createBreaker(check, o.breaker, healthy,
        () => probeWrite(redis, probeKey, (p) => deadline(p, timeoutMs, live), healthy), () => redis.status === 'ready');
      this.call = (keys, args, flag, now, wire, heldSince) => breaker.fire(keys, args, flag, now, wire, heldSince);
      this.breakerState = state;
      this.stopBreakers = () => breaker.shutdown();
    }
    // An acquire given up on at its deadline took its failure rule (closed: denied; open: admitted without a
    // lease), but Redis may still run it when it resumes and add the lease: a place nobody holds, kept for its
    // whole TTL. Such a lease is released at once; the call counts as a late call.
    const lateLease = (key: string, args: Array<string | number>, r: number[]): void => {
      this.late.calls++;
      if (args[2] === CONCURRENCY_ACQUIRE && r[0] === 0) {
        const release = [args[0], args[1], CONCURRENCY_RELEASE, ...args.slice(3)];
        this.leaseCall(key, release).catch((e: unknown) => this.failed(e));
      }
    };
    this.leaseCall = leaseCaller(redis, timeoutMs, lateLease);
  }

  /**
   * Connects (without waiting for Redis to be up: until it is, decisions take their failure rule). Throws a
   * `CONFIG` SluiceError for a bad `cluster` option, or a `holdUnder` other than 0 with it.
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
      if (o.holdUnder !== undefined && o.holdUnder !== 0) throw configError('redis', 'redis.holdUnder', 'a Redis Cluster holds no call (its calls are split over masters, each with its own deadline): give 0 or leave it out');
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
  async decideWide(keys: string[], args: number[], nowMs: number, wire?: readonly Uint8Array[], heldSince?: number): Promise<number[]> {
    const start = performance.now();
    try {
      return this.unreadable(await this.call(keys, args, this.useRedisTime ? 1 : 0, nowMs, wire, heldSince));
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
   * A call that a companion of this store made on its connection (the quota lease calls, src/store/lease.ts)
   * failed: counted with the store's own calls, by kind (stats().store, the sluice_store_* error metrics).
   */
  countFailure(e: unknown): void {
    this.failed(e);
  }

  /** A companion's call answered after it had timed out (Redis ran it late): counted with the store's late calls. */
  countLate(): void {
    this.late.calls++;
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
   * Calls `fn` each time the connection (re)opens, and on a Cluster each time a master's connection is lost:
   * Redis may have restarted without its data or failed over, so what was learned from it
   * (src/engine/strict/cache.ts) may no longer hold.
   */
  onConnect(fn: () => void): void {
    this.redis.on('ready', fn);
    // A Cluster stays 'ready' while one master is lost and comes back (restarted without its data, or replaced
    // by a replica that missed the last writes), so each master's connection lost counts too ('-node': the
    // client drops a node's connection when it ends, and opens a new one to whatever serves the slots then).
    // What was learned from that master may no longer hold: without this, a denial learned from it was answered
    // by the over-limit cache until it refilled (an hour's bucket: an hour) though Redis now held the key full;
    // and the new connection is made only by a call sent to it, which the cache's answers never made.
    if (this.redis instanceof Cluster) this.redis.on('-node', () => fn());
  }

  /** True once connected. */
  get ready(): boolean {
    return this.redis.status === 'ready';
  }

  /** Connected, and the circuit breaker closed (a frozen or unwell Redis opens it: calls are skipped). */
  get available(): boolean {
    return this.ready && this.breakerState() === 'closed';
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

  // an admin read or delete on a Cluster follows the redirections ioredis leaves unfollowed (src/store/cluster-redirect.ts)
  read(keys: readonly string[], guardKey: string | null): Promise<StoredValues> {
    return Promise.all(this.placed(keys, guardKey).map((k) => this.bounded(followed(this.redis, (r) => r.getBuffer(k)), k)));
  }

  async remove(keys: readonly string[], guardKey: string | null): Promise<number> {
    // in a Cluster, a guarded policy's keys may be held under both names (before and after placement): delete both
    const names = this.redis instanceof Cluster && guardKey !== null ? [...keys, ...this.placed(keys, guardKey)] : keys;
    // (a delete given up on may still run when a frozen Redis resumes: the reset then takes effect late)
    const counts = await Promise.all(names.map((k) => this.bounded(followed(this.redis, (r) => r.del(k)), k)));
    return counts.reduce((a, c) => a + c, 0);
  }

  async clock(): Promise<number> {
    const time = await this.bounded(this.redis.time(), this.prefix);
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
    this.stopBreakers();
    this.redis.disconnect();
  }
}

/** Added to a merge's deadline per key, in ms. */
export const MERGE_MS_PER_KEY = 0.05;

/** The script's code for a leg whose stored state cannot be read (lua/lib.lua UNREADABLE). */
const UNREADABLE = 4;

/** A check whose state key holds something that is not a state (counted as a script error). */
class ScriptStateError extends Error {
  override name = 'ReplyError';
  constructor() {
    super('a state key holds another type or a malformed value');
  }
}
