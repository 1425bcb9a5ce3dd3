import { Piscina } from 'piscina';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { packageRoot } from '../util/paths.js';
import { discard, watchExits } from './discard.js';
import { SluiceError, overloaded, shardFailed } from '../util/errors.js';
import { availableParallelism } from 'node:os';
import { CHANNEL_LEGS, CHANNEL_TIMEOUT_MS, channelMemory, channelError, ShardLink, type ChannelMemory } from './channel.js';
import { GROUP_SHIFT, GROUP_SPAN, LEG_IN, type KernelLimit, type LimitsAdded, type ShardInit, type ShardKeys, type ShardPurge, type ShardRequest, type ShardStates, type ShardTask } from './protocol.js';

/** Batches queued per shard before new ones are refused (each batch is one turn's checks for that shard). */
const MAX_QUEUED_BATCHES = 1024;

/** Default bound on a worker's start-up (loading its module and answering a first ping), in ms. */
export const DEFAULT_START_TIMEOUT_MS = 5000;
/** Default first wait before restarting a shard that is down, in ms. */
export const DEFAULT_RECOVERY_MIN_MS = 1000;
/** Default longest wait between restart attempts of a shard that is down, in ms. */
export const DEFAULT_RECOVERY_MAX_MS = 30_000;

/** How a pool starts its workers and brings back a shard that is down. */
export interface ShardPoolOptions {
  /**
   * Longest a worker may take to start (load its module and answer), in ms. At `createLimiter` a worker
   * that takes longer fails the start with SHARD_FAILED; a replacement or restarted worker that takes longer
   * leaves (or keeps) its shard down. Default {@link DEFAULT_START_TIMEOUT_MS}.
   */
  startTimeoutMs?: number;
  /**
   * Restarting a shard that is down: the first attempt waits `minDelayMs` (default
   * {@link DEFAULT_RECOVERY_MIN_MS}), each failed attempt doubles the wait up to `maxDelayMs` (default
   * {@link DEFAULT_RECOVERY_MAX_MS}), every wait ±25% jitter. Attempts go on while the limiter is open, at most
   * one per wait: never a tight respawn loop.
   */
  recovery?: { minDelayMs?: number; maxDelayMs?: number };
}

/** One shard as the pool sees it, read without asking its worker (so a stalled worker does not hide it). */
export interface ShardState {
  /** False while the shard is down: it has no worker, and its checks fail at once with SHARD_FAILED. */
  up: boolean;
  /** Checks sent to the shard's worker (queued for it or being decided) and not answered yet. */
  queuedChecks: number;
  /** Batches (one per turn) sent to the shard's worker and not answered yet. */
  queuedBatches: number;
  /** Times the shard went down (its worker could not be replaced). */
  downs: number;
  /** Times a down shard came back with a fresh worker. */
  recoveries: number;
  /** Why the shard is down, or null while it is up. */
  downReason: string | null;
}

type KernelStats = { keys: number; slots: number; evictions: number; memoryBytes: number };
const NO_KERNEL: KernelStats = { keys: 0, slots: 0, evictions: 0, memoryBytes: 0 };

/**
 * N shards, each a single-thread piscina pool, so a key's batches always reach its one owner in order.
 * piscina replaces a worker that exits and rejects the tasks it held; we map that to SHARD_FAILED.
 *
 * A shard goes **down** when its worker cannot be replaced: the replacement failed while loading (piscina
 * does not retry that) or did not start within `startTimeoutMs`. While down, what it held or is sent fails
 * at once with SHARD_FAILED, and the pool tries a fresh worker (a new single-thread pool) after a backoff
 * with jitter; the first that answers brings the shard back up, with an empty table.
 */
export class ShardPool {
  private readonly pools: Piscina[];
  /** Why each shard is down, or null while it is up. */
  private readonly dead: Array<string | null>;
  private readonly queuedChecks: number[];
  private readonly queuedBatches: number[];
  private readonly downs: number[];
  private readonly recoveries: number[];
  /** Each shard's last kernel counters, reported while its worker is too busy to answer within a bounded wait. */
  private readonly lastKernel: KernelStats[];
  /** A bounded-wait stats request still unanswered per shard, reused rather than piling up behind a stall. */
  private readonly statsAsked: Array<Promise<KernelStats> | null>;
  /** Per shard: the timer of a start-up watchdog (a replacement worker) or of the next restart attempt. */
  private readonly startWatch: Array<NodeJS.Timeout | null>;
  private readonly restartTimer: Array<NodeJS.Timeout | null>;
  /** A pool being tried as a shard's restart, not yet answering. */
  private readonly trying: Array<Piscina | null>;
  private readonly startTimeoutMs: number;
  private readonly minDelayMs: number;
  private readonly maxDelayMs: number;
  private closing = false;

  private constructor(private readonly filename: string, private readonly init: ShardInit, n: number, o: ShardPoolOptions) {
    this.startTimeoutMs = o.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
    this.minDelayMs = o.recovery?.minDelayMs ?? DEFAULT_RECOVERY_MIN_MS;
    this.maxDelayMs = Math.max(this.minDelayMs, o.recovery?.maxDelayMs ?? DEFAULT_RECOVERY_MAX_MS);
    const fill = <T>(v: T): T[] => Array.from({ length: n }, () => v);
    this.dead = fill(null);
    this.queuedChecks = fill(0);
    this.queuedBatches = fill(0);
    this.downs = fill(0);
    this.recoveries = fill(0);
    this.lastKernel = fill(NO_KERNEL);
    this.statsAsked = fill(null);
    this.startWatch = fill(null);
    this.restartTimer = fill(null);
    this.trying = fill(null);
    this.pools = Array.from({ length: n }, (_, s) => this.spawn(s));
    const mem = init.channels!;
    this.links = Array.from({ length: n }, (_, s) => new ShardLink(mem, s, 0));
    this.published = new Int32Array(mem.limitsGen);
  }

  /**
   * Per shard: how many times its kernel was lost (a worker gone, replaced or down): a state set on the kernel
   * before (ShardTask.states: a strict key's seed) is not on the one that decides now.
   */
  private readonly kernelsLost: number[] = [];

  /**
   * Shard `s`'s kernel generation: it changes each time the shard's worker (and so its table) is lost, and
   * when states may not have been set on it (a batch carrying them failed: {@link run}).
   */
  kernelGeneration(s: number): number {
    return this.kernelsLost[s] ?? 0;
  }

  /** This thread's synchronous channel to each shard. */
  private readonly links: ShardLink[];
  /** The limits generation in force, as the shards read it (ChannelMemory.limitsGen). */
  private readonly published: Int32Array;
  /** Limits generations made: each {@link installLimits} takes the next. */
  private gen = 0;

  /** Every front thread's channels to the shards (thread 0 is this one's): handed to other front threads. */
  get channels(): ChannelMemory {
    return this.init.channels!;
  }

  /** Where {@link callNow} reads shard `s`'s legs from: write them here first (LEG_IN f64s per leg). */
  legsFor(s: number): Float64Array {
    return this.links[s].legs;
  }

  /** Legs one {@link callNow} takes. */
  get maxCallLegs(): number {
    return this.links[0]?.maxLegs ?? 0;
  }

  /**
   * Decides legs [0, n) of {@link legsFor}(s) on shard `s` at `now` and returns its output rows (LEG_OUT f64s
   * per leg, valid until the next call), blocking this thread until the shard answers: the synchronous path
   * of the HTTP front (src/shard/channel.ts). `seq`, `ack`: as ShardTask's (0 without sync policies).
   * @throws SluiceError SHARD_FAILED if the shard is down, failed, or took the call and has not finished it
   *   within {@link CHANNEL_TIMEOUT_MS}; OVERLOADED if it did not take the call in that time (nothing decided).
   */
  callNow(s: number, n: number, now: number, seq: number, ack: number): Float64Array {
    if (this.dead[s] !== null) throw this.downError(s);
    const link = this.links[s];
    const r = link.call(n, now, seq, ack, CHANNEL_TIMEOUT_MS);
    if (r === 'done') return link.out;
    throw channelError(s, r, 'deciding');
  }

  /** A single-thread pool for shard `s`, with the listeners that take the shard down when its worker is lost. */
  private spawn(s: number): Piscina {
    const p = new Piscina({
      filename: this.filename,
      name: 'default',
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Infinity,
      concurrentTasksPerWorker: 16,
      // piscina's default ('sync') parks an idle worker in a blocking Atomics.wait, where the worker's own
      // waitAsync on its channels' doorbell (src/shard/channel.ts) would never resolve
      atomics: 'async',
      maxQueue: MAX_QUEUED_BATCHES,
      workerData: this.init,
      env: { ...process.env, SLUICE_SHARD: String(s) },
    });
    watchExits(p);
    // Without a listener, a worker error outside any task (a replacement failing while it loads) is an
    // unhandled 'error' event: it would crash the process. Events of a pool that is not (or no longer) the
    // shard's current one are ignored.
    p.on('error', (e: unknown) => {
      if (p.threads.length === 0) this.markDown(s, p, `its worker failed to start (${(e as Error)?.message ?? String(e)})`);
    });
    // piscina starts a replacement in the same call that removes a dead worker, unless that worker died
    // while loading: then it stops (no respawn loop) and the shard has no worker at all. A replacement that
    // does start announces itself with 'workerCreate' once it is ready; one that hangs is given up.
    p.on('workerDestroy', () => queueMicrotask(() => {
      if (this.closing || this.pools[s] !== p || this.dead[s] !== null) return;
      this.kernelsLost[s] = this.kernelGeneration(s) + 1;
      if (p.threads.length === 0) {
        this.markDown(s, p, 'its worker failed to start (it exited while starting)');
        return;
      }
      if (this.startWatch[s] === null) {
        this.startWatch[s] = setTimeout(() => {
          this.startWatch[s] = null;
          this.markDown(s, p, `its replacement worker did not start within ${this.startTimeoutMs} ms`);
        }, this.startTimeoutMs);
      }
    }));
    p.on('workerCreate', () => {
      if (this.pools[s] !== p || this.startWatch[s] === null) return;
      clearTimeout(this.startWatch[s]!);
      this.startWatch[s] = null;
    });
    return p;
  }

  /** Takes shard `s` down (if `p` is still its pool): what it holds fails at once, and a restart is scheduled. */
  private markDown(s: number, p: Piscina, why: string): void {
    if (this.closing || this.pools[s] !== p || this.dead[s] !== null) return;
    this.dead[s] = why;
    this.downs[s]++;
    this.kernelsLost[s] = this.kernelGeneration(s) + 1;
    this.lastKernel[s] = NO_KERNEL;
    if (this.startWatch[s] !== null) clearTimeout(this.startWatch[s]!);
    this.startWatch[s] = null;
    // discard() rejects the batches queued for the missing worker, so none waits forever.
    void discard(p);
    this.scheduleRestart(s, 0);
  }

  private scheduleRestart(s: number, attempt: number): void {
    if (this.closing) return;
    const wait = Math.min(this.maxDelayMs, this.minDelayMs * 2 ** Math.min(attempt, 30));
    const jittered = Math.round(wait * (0.75 + Math.random() / 2));
    const timer = setTimeout(() => {
      this.restartTimer[s] = null;
      void this.restart(s, attempt);
    }, jittered);
    timer.unref();
    this.restartTimer[s] = timer;
  }

  /** One restart attempt of down shard `s`: a fresh pool that must answer within startTimeoutMs. */
  private async restart(s: number, attempt: number): Promise<void> {
    if (this.closing) return;
    // the limits the worker starts from (its start-up data is copied when it is created, here)
    const gen = this.init.limitsGen ?? 0;
    const limits = this.init.limits.slice();
    const p = this.spawn(s);
    this.trying[s] = p;
    let failure = await started(p, this.startTimeoutMs);
    this.trying[s] = null;
    if (!this.closing && failure === null && (this.init.limitsGen ?? 0) !== gen) {
      // reloads while it started (the shard was down: they skipped it) added limits it lacks: set them before
      // it is up (till then it decides no check, src/shard/channel.ts); nothing can come between from here on
      const added: LimitsAdded = [];
      this.init.limits.forEach((l, id) => { if (l !== null && l !== limits[id]) added.push({ id, limit: l as KernelLimit }); });
      try {
        this.install(s, added, this.init.limitsGen!);
      } catch (e) {
        failure = (e as Error).message;
      }
    }
    if (this.closing || failure !== null) {
      // not close(): a worker that fails while loading is respawned by piscina until destroyed.
      await discard(p);
      if (failure !== null) this.scheduleRestart(s, attempt + 1);
      return;
    }
    this.pools[s] = p;
    this.dead[s] = null;
    this.recoveries[s]++;
  }

  /**
   * Starts `n` workers and waits until each answers; a worker that cannot start, or does not within
   * `o.startTimeoutMs`, fails the whole start (every worker is stopped, none respawned).
   *
   * @throws SluiceError SHARD_FAILED `shard <s>: worker failed to start: <cause>`.
   */
  static async start(n: number, init: ShardInit, o: ShardPoolOptions = {}): Promise<ShardPool> {
    // Built JS runs beside this file; under a TS runner (vitest) the worker still needs the built copy.
    const filename = import.meta.url.endsWith('.ts')
      ? pathToFileURL(join(packageRoot(), 'dist', 'src', 'shard', 'worker.js')).href
      : new URL('./worker.js', import.meta.url).href;
    init.channels ??= channelMemory(n, Math.max(1, availableParallelism()), CHANNEL_LEGS);
    const pool = new ShardPool(filename, init, n, o);
    const failures = await Promise.all(pool.pools.map((p) => started(p, pool.startTimeoutMs)));
    const failed = failures.findIndex((f) => f !== null);
    if (failed >= 0) {
      // not close(): close() waits for the replacement piscina starts, which fails the same way.
      await pool.destroy();
      throw shardFailed(`shard ${failed}: worker failed to start: ${failures[failed]}`);
    }
    return pool;
  }

  get size(): number {
    return this.pools.length;
  }

  private downError(s: number): SluiceError {
    return shardFailed(`shard ${s} is down: ${this.dead[s]}; it is being restarted`);
  }

  /** Decides one batch on shard `s`. Rejects with SHARD_FAILED if the worker dies or the shard is down, OVERLOADED if its queue is full. */
  async run(s: number, task: ShardTask): Promise<Float64Array> {
    if (this.dead[s] !== null) throw this.downError(s);
    const checks = checksIn(task);
    this.queuedChecks[s] += checks;
    this.queuedBatches[s]++;
    try {
      const moved = [task.legs.buffer as ArrayBuffer];
      if (task.states !== undefined) moved.push(task.states.buffer as ArrayBuffer);
      return (await this.pools[s].run(task, { transferList: moved })) as Float64Array;
    } catch (e) {
      // the kernel may not hold the states the batch carried: to whoever seeds, it is another kernel now (set
      // them again next time). A kernel that threw after setting them may hold them, and its batch's first
      // decisions: seeded again, it hands those back, as a lost worker's replacement does.
      if (task.states !== undefined) this.kernelsLost[s] = this.kernelGeneration(s) + 1;
      const msg = (e as Error).message ?? String(e);
      if (/queue is at limit/i.test(msg)) throw overloaded(`shard ${s}: queue full (${MAX_QUEUED_BATCHES} batches)`);
      if (this.dead[s] !== null) throw this.downError(s);
      throw shardFailed(`shard ${s} failed while deciding: ${msg}`);
    } finally {
      this.queuedChecks[s] -= checks;
      this.queuedBatches[s]--;
    }
  }

  /** Installs merged states on shard `s` (sync mode), in order with its batches. Rejects with SHARD_FAILED if the shard is down. */
  async setState(s: number, req: ShardStates): Promise<void> {
    if (this.dead[s] !== null) throw this.downError(s);
    await this.pools[s].run(req, { transferList: [req.rows.buffer as ArrayBuffer] });
  }

  /**
   * Sets limits by id on every shard that is up (a policy reload) and returns once each shard's kernel holds
   * them: call it before any check may name them. They go through this thread's synchronous channel to each
   * shard, which a shard serves between its batches (a batch sent before keeps limit ids every kernel holds),
   * not through its worker's queue, which that channel overtakes: a check decided through the channel right
   * after could otherwise reach the kernel before its limits did. They are also written into the start-up
   * data, so a worker started later has them; a shard that is down catches up before it is back up
   * ({@link restart}). Their generation is then published to the shards: a kernel older than it (a worker
   * started from older data) decides no check until it is brought up to date (src/shard/channel.ts).
   *
   * Blocks this thread while the shards take the call: a few µs each, or up to the batch a shard is deciding.
   * @throws SluiceError SHARD_FAILED when a shard did not take them within {@link CHANNEL_TIMEOUT_MS} or could
   *   not set them: none of them may be used then (the reload fails; the generation in force is unchanged).
   */
  installLimits(limits: LimitsAdded): void {
    if (limits.length === 0) return;
    const gen = ++this.gen;
    for (const { id, limit } of limits) this.init.limits[id] = limit;
    this.init.limitsGen = gen;
    for (let s = 0; s < this.pools.length; s++) if (this.dead[s] === null) this.install(s, limits, gen);
    Atomics.store(this.published, 0, gen);
  }

  /**
   * Sets `limits` on shard `s`'s kernel through this thread's channel, in calls that fit, the last one bringing
   * the kernel to generation `gen` (an empty list still does).
   * @throws SluiceError SHARD_FAILED when the shard did not take a call in time or failed on it.
   */
  private install(s: number, limits: LimitsAdded, gen: number): void {
    const link = this.links[s];
    const room = link.installBytes;
    const calls: string[] = [];
    let json = '';
    let bytes = 0;
    for (const l of limits) {
      const one = JSON.stringify(l);
      const size = Buffer.byteLength(one);
      // '[', the limits joined by ',', ']'
      if (json !== '' && bytes + 1 + size + 1 > room) {
        calls.push(`${json}]`);
        json = '';
      }
      if (json === '') {
        json = `[${one}`;
        bytes = 1 + size;
      } else {
        json += `,${one}`;
        bytes += 1 + size;
      }
    }
    calls.push(json === '' ? '[]' : `${json}]`);
    calls.forEach((call, i) => {
      // only the last call moves the generation: the kernel decides under it once it holds every limit
      const at = i === calls.length - 1 ? gen : 0;
      let r = link.install(call, at, CHANNEL_TIMEOUT_MS);
      // a worker that died holding the call: its replacement, started from the start-up data (which has the
      // limits), answered it as failed; it takes the call again
      if (r === 'failed') r = link.install(call, at, CHANNEL_TIMEOUT_MS);
      if (r === 'done') return;
      throw shardFailed(r === 'timeout' ? `shard ${s} did not take new limits within ${CHANNEL_TIMEOUT_MS} ms`
        : r === 'failed' ? `shard ${s} failed to set new limits`
        : `shard ${s} is still deciding an earlier call (stalled for more than ${CHANNEL_TIMEOUT_MS} ms)`);
    });
  }

  /**
   * Frees limit ids on every shard (ShardPurge): per id, the keys under it that still carry information,
   * summed over the shards. A shard that is down holds none; one that fails counts as holding some.
   */
  async purge(req: ShardPurge): Promise<number[]> {
    const per = await Promise.all(this.pools.map((p, s) => (this.dead[s] !== null ? req.ids.map(() => 0)
      : (p.run(req) as Promise<number[]>).catch(() => req.ids.map(() => 1)))));
    return req.ids.map((_, i) => per.reduce((a, r) => a + r[i], 0));
  }

  /** Reads (`peek`) or forgets (`remove`) keys on shard `s`. Rejects with SHARD_FAILED if the shard is down. */
  async keys(s: number, req: ShardKeys): Promise<Float64Array | number> {
    if (this.dead[s] !== null) throw this.downError(s);
    return (await this.pools[s].run(req, { transferList: [req.legs.buffer as ArrayBuffer] })) as Float64Array | number;
  }

  /**
   * Each shard's kernel counters (a shard that is down holds nothing). Without `waitMs`, waits for every
   * worker's answer (exact). With `waitMs` (ms), a worker that has not answered by then (stalled in a long
   * batch) is reported with its last counters, and its unanswered request is reused by the next call.
   */
  stats(waitMs?: number): Promise<KernelStats[]> {
    return Promise.all(this.pools.map(async (p, s): Promise<KernelStats> => {
      if (this.dead[s] !== null) return NO_KERNEL;
      if (waitMs === undefined) return this.askStats(s, p);
      const asked = this.statsAsked[s] ?? this.askStats(s, p).finally(() => { this.statsAsked[s] = null; });
      this.statsAsked[s] = asked;
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([asked, new Promise<KernelStats>((r) => { timer = setTimeout(() => r(this.lastKernel[s]), waitMs); })]);
      } catch {
        return this.lastKernel[s];
      } finally {
        clearTimeout(timer);
      }
    }));
  }

  private async askStats(s: number, p: Piscina): Promise<KernelStats> {
    const k = (await p.run({ kind: 'stats' } satisfies ShardRequest)) as KernelStats;
    if (this.pools[s] === p && this.dead[s] === null) this.lastKernel[s] = k;
    return k;
  }

  /** Each shard's state as the pool sees it now: up or down, checks and batches awaiting an answer, downs and recoveries. */
  shardStates(): ShardState[] {
    return this.pools.map((_, s) => ({
      up: this.dead[s] === null,
      queuedChecks: this.queuedChecks[s],
      queuedBatches: this.queuedBatches[s],
      downs: this.downs[s],
      recoveries: this.recoveries[s],
      downReason: this.dead[s],
    }));
  }

  /** The worker threads, for fault tests that must kill one. */
  threads(s: number): readonly import('node:worker_threads').Worker[] {
    return this.dead[s] !== null ? [] : this.pools[s].threads;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.clearTimers();
    await Promise.all([
      ...this.pools.map((p, s) => (this.dead[s] !== null ? discard(p) : p.close())),
      ...this.trying.map((p) => (p === null ? undefined : discard(p))),
    ]);
  }

  /** Stops every worker now; batches held or queued reject. */
  private async destroy(): Promise<void> {
    this.closing = true;
    this.clearTimers();
    await Promise.all(this.pools.map(discard));
  }

  private clearTimers(): void {
    for (const t of [...this.startWatch, ...this.restartTimer]) if (t !== null) clearTimeout(t);
    this.startWatch.fill(null);
    this.restartTimer.fill(null);
  }
}

/** Null once `p`'s worker answers a ping; why not, if it fails or does not answer within `ms`. */
async function started(p: Piscina, ms: number): Promise<string | null> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      p.run({ kind: 'ping' } satisfies ShardRequest),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`it did not answer within ${ms} ms`)), ms);
      }),
    ]);
    return null;
  } catch (e) {
    return (e as Error)?.message ?? String(e);
  } finally {
    clearTimeout(timer);
  }
}

/** Checks in a batch: a check is a group of legs whose first leg carries the group's length. */
function checksIn(task: ShardTask): number {
  let checks = 0;
  for (let leg = 0; leg < task.n; checks++) {
    const group = Math.floor(task.legs[leg * LEG_IN + 2] / GROUP_SHIFT) % GROUP_SPAN;
    leg += group > 0 ? group : 1;
  }
  return checks;
}
