/**
 * The Redis side of regions (src/engine/regions/): a region's share hashes and the reconciler's election in
 * the REGION's Redis (lua/region_share.lua), and the share records of every region in the GLOBAL Redis
 * (lua/region_global.lua). Every call is one atomic script step on one key, so it works on a Cluster too.
 * These connections are the reconciler's own, never on a check's path: no retries; a call made while the
 * connection is down waits for it in the offline queue, and any call fails after `timeoutMs` without an
 * answer (ioredis's commandTimeout); the reconciler tries again next interval.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { packageRoot } from '../util/paths.js';
import type { RedisOptions } from './redis.js';
import { clusterNodes } from './cluster-calls.js';
import { sentinelOptions } from './sentinel.js';

type Cmd = (numKeys: number, ...args: Array<string | number>) => Promise<Array<number | string>>;

/** A region's share of one key's limit as its Redis holds it (lua/region_share.lua). */
export interface ShareRow {
  limit: number;
  burst: number;
  /** Tokens the lease script settled as used in this region, since the hash was made. */
  used: number;
  /** Tokens outstanding in this region's leases (the lease state's `o`). */
  out: number;
  gen: number;
  /** Redis time of the call, Unix ms. */
  nowMs: number;
  /** lower: tokens of limit and burst freed; raise: added; read: 0. */
  movedLimit: number;
  movedBurst: number;
  /** Tokens the region's bucket holds now (before the change), as the lease script would count them. */
  free: number;
}

/** What the global record says after a report (lua/region_global.lua). */
export interface GlobalReply {
  /** Taken from the pool for this region: raise its share by this much. */
  takeLimit: number;
  takeBurst: number;
  /** What this region should lower its share by (then report again). */
  giveLimit: number;
  giveBurst: number;
  poolLimit: number;
  poolBurst: number;
  /** Usage of every region that reported within the stale span, tokens per period. */
  usage: number;
  /** Sum of the shares the record says the regions hold (<= the limit). */
  held: number;
  nowMs: number;
}

/** One report to the global record: see lua/region_global.lua for the argument order. */
export interface GlobalReport {
  key: string;
  region: string;
  limit: number;
  burst: number;
  usage: number;
  /** The region runs short: its bucket is low while it keeps spending (see the reconciler). */
  short: boolean;
  globalLimit: number;
  globalBurst: number;
  /** 0 fixed weights (record only), 1 adaptive, 2 settle only (after a give). */
  mode: 0 | 1 | 2;
  staleMs: number;
  minLimit: number;
  minBurst: number;
  names: readonly string[];
  defaultLimits: readonly number[];
  defaultBursts: readonly number[];
}

let shareLua: string | undefined;
let globalLua: string | undefined;
const lua = (f: string): string => readFileSync(join(packageRoot(), 'lua', f), 'utf8');

const RENEW_LUA = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`;
const RESIGN_LUA = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

function connect(o: RedisOptions, timeoutMs: number): Redis | Cluster {
  const backoff = (n: number): number => Math.round(Math.min(50 * 2 ** n, 1000) * (0.5 + Math.random()));
  const own = { enableOfflineQueue: true, maxRetriesPerRequest: 0, commandTimeout: timeoutMs, connectTimeout: timeoutMs, retryStrategy: backoff };
  if (o.cluster !== undefined) {
    return new Cluster(clusterNodes(o.cluster), {
      scaleReads: 'master', enableOfflineQueue: true, retryDelayOnFailover: 0, retryDelayOnClusterDown: 0,
      clusterRetryStrategy: backoff, slotsRefreshInterval: 1000, redisOptions: { maxRetriesPerRequest: 0, commandTimeout: timeoutMs, connectTimeout: timeoutMs },
    });
  }
  if (o.sentinel !== undefined) return new Redis({ ...own, ...sentinelOptions(o.sentinel, backoff) });
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', own);
}

function define(c: Redis | Cluster): { share: Cmd; global: Cmd; renew: Cmd; resign: Cmd } {
  shareLua ??= lua('region_share.lua');
  globalLua ??= lua('region_global.lua');
  c.defineCommand('sluiceRegionShare', { lua: shareLua });
  c.defineCommand('sluiceRegionGlobal', { lua: globalLua });
  c.defineCommand('sluiceRegionRenew', { lua: RENEW_LUA });
  c.defineCommand('sluiceRegionResign', { lua: RESIGN_LUA });
  const any = c as unknown as Record<string, Cmd>;
  return {
    share: any.sluiceRegionShare.bind(c), global: any.sluiceRegionGlobal.bind(c),
    renew: any.sluiceRegionRenew.bind(c), resign: any.sluiceRegionResign.bind(c),
  };
}

function shareRow(r: Array<number | string>): ShareRow {
  const n = r.map(Number);
  return { limit: n[0], burst: n[1], used: n[2], out: n[3], gen: n[4], nowMs: n[5], movedLimit: n[6], movedBurst: n[7], free: n[8] };
}

/** The reconciler's connection to its region's Redis: share hashes and the election. */
export class RegionShareStore {
  private readonly cmd: ReturnType<typeof define>;
  /** This process's election token. */
  readonly token = randomBytes(12).toString('hex');

  private constructor(private readonly redis: Redis | Cluster) {
    this.cmd = define(redis);
  }

  /** Connects (lazily: calls fail until Redis is up). */
  static create(o: RedisOptions, timeoutMs: number): RegionShareStore {
    const c = connect(o, timeoutMs);
    c.on('error', () => undefined); // each failed call is counted by the reconciler
    return new RegionShareStore(c);
  }

  /**
   * Becomes (or stays) the region's reconciler: SET NX PX, or PEXPIRE when this process holds it already.
   * @returns true while this process is the leader for `ttlMs` from now.
   */
  async elect(key: string, ttlMs: number): Promise<boolean> {
    return Number(await this.cmd.renew(1, key, this.token, ttlMs)) === 1;
  }

  /** Gives the election up (close()), so another instance takes over without waiting for the TTL. */
  async resign(key: string): Promise<void> {
    await this.cmd.resign(1, key, this.token);
  }

  /** `stateKey`: the key's lease state (lua/lease.lua); its share hash is `<stateKey>:share`. */
  read(stateKey: string, periodMs: number, dflt: { limit: number; burst: number }): Promise<ShareRow> {
    return this.cmd.share(2, `${stateKey}:share`, stateKey, 'read', periodMs, dflt.limit, dflt.burst).then(shareRow);
  }

  /** Lowers the share by up to (limit, burst), never below (minLimit, minBurst) nor burst below `out`. */
  lower(stateKey: string, periodMs: number, dflt: { limit: number; burst: number }, limit: number, burst: number, minLimit: number, minBurst: number): Promise<ShareRow> {
    return this.cmd.share(2, `${stateKey}:share`, stateKey, 'lower', periodMs, dflt.limit, dflt.burst, limit, burst, minLimit, minBurst).then(shareRow);
  }

  /** Raises the share by (limit, burst): tokens the global pool already gave this region. */
  raise(stateKey: string, periodMs: number, dflt: { limit: number; burst: number }, limit: number, burst: number): Promise<ShareRow> {
    return this.cmd.share(2, `${stateKey}:share`, stateKey, 'raise', periodMs, dflt.limit, dflt.burst, limit, burst).then(shareRow);
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

/** The reconciler's connection to the global Redis: reports and share moves (lua/region_global.lua). */
export class GlobalShareStore {
  private readonly cmd: ReturnType<typeof define>;

  private constructor(private readonly redis: Redis) {
    this.cmd = define(redis);
  }

  static create(url: string, timeoutMs: number): GlobalShareStore {
    const c = connect({ url }, timeoutMs) as Redis;
    c.on('error', () => undefined);
    return new GlobalShareStore(c);
  }

  async report(r: GlobalReport): Promise<GlobalReply> {
    const n = r.names.length;
    const raw = await this.cmd.global(1, r.key, r.region, r.limit, r.burst, r.usage, r.short ? 1 : 0, r.globalLimit, r.globalBurst, r.mode,
      r.staleMs, r.minLimit, r.minBurst, n, ...r.names, ...r.defaultLimits, ...r.defaultBursts);
    const x = raw.map(Number);
    return {
      takeLimit: x[0], takeBurst: x[1], giveLimit: x[2], giveBurst: x[3], poolLimit: x[4], poolBurst: x[5],
      usage: x[6], held: x[7], nowMs: x[8],
    };
  }

  /**
   * Records in the sorted set `index` that `member` (a watched key's limit, as the reconciler writes it) ran
   * short at `nowMs` (the global Redis's time of the report), drops entries older than `staleMs`, and lets the
   * set expire `staleMs` after its last entry. The other regions read it ({@link shortKeys}): a region gives
   * share only in its own report of a key (lua/region_global.lua), so a region that never checked the key would
   * never give.
   */
  async markShort(index: string, member: string, nowMs: number, staleMs: number): Promise<void> {
    await this.redis.multi().zadd(index, nowMs, member).zremrangebyscore(index, '-inf', `(${nowMs - staleMs}`)
      .pexpire(index, staleMs).exec();
  }

  /**
   * Up to `max` members of `index` ({@link markShort}) from rank `from` on, oldest mark first: a reader that
   * pages through it (the next page from `from + max`, back to 0 past the end) reaches every member, however
   * many there are.
   */
  async shortKeys(index: string, from: number, max: number): Promise<string[]> {
    return this.redis.zrange(index, from, from + max - 1);
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
