/**
 * A region's reconciler: one per region, elected through the region's Redis (SET NX PX, renewed every
 * round; the TTL is 3 rounds, so a dead leader is replaced within about 3 intervals). Every
 * `reconcileIntervalMs` it reads the share hash of each watched `scope: global` key (usage.ts), measures the
 * region's usage from what the lease script settled as used, reports it to the global Redis, and moves share:
 *
 * - a region using at least 80 % of its share takes from the global pool (the global record moves it from the
 *   pool to the region in one script step), then raises its share in its own Redis;
 * - when a region runs short and the pool cannot cover it, a region using less keeps 1.5x its usage (at least
 *   a tenth of its default share) and gives the rest: it lowers its share in its OWN Redis first (one script
 *   step that returns what it freed: never below the tokens out in leases), then reports again, and only then
 *   does the global record put what was freed into the pool.
 *
 * A region gives only in its own report of a key, so a region that never checked a key would never give its
 * share of it. So a region that runs short also marks the key in an index in the global Redis
 * (`<prefix>regions:short`), and every region's reconciler watches the keys marked there in its next rounds,
 * reporting its unused share of them (from its own Redis: its default, never spent) so that it is given.
 *
 * So at every moment each region holds at most what the global record says it holds, and the record's shares
 * plus its pool are the limit: the regions' shares never add up to more than the limit, whatever fails
 * between two steps (a raise that failed leaves the share in the record, and the next report gives it back
 * to the pool; a give whose report failed is settled by the next report). A region cut off from the global
 * Redis keeps the share it holds and decides within it; it cannot borrow. With fixed weights nothing moves;
 * the reports only feed the metrics.
 */
import type { CompiledPolicy } from '../../config/policy-spec.js';
import { regionDefaultShare, type RegionSettings, type Share } from '../../config/regions.js';
import type { GlobalShareStore, RegionShareStore, ShareRow } from '../../store/region-share.js';
import { USAGE_SAMPLES, type ActiveKey, type ActiveKeys } from './usage.js';
import { leaseStateKey } from '../lease/keys.js';
import type { RegionPolicyStats, RegionStats } from '../../types/stats.js';

/** Rounds without a touch nor any use after which a key at or below its default share stops being watched. */
const IDLE_ROUNDS = 30;
/** Keys reconciled concurrently. */
const CONCURRENCY = 64;
/** Keys read from the short index per round: a page, the next round the next one (see watchShort). */
const SHORT_KEYS_READ = 256;

export interface ReconcilerOptions {
  region: RegionSettings;
  /** The region's Redis (the same the checks use), on the reconciler's own connection. */
  regional: RegionShareStore;
  /** The global Redis; null: no reports, the shares never move. */
  global: GlobalShareStore | null;
  active: ActiveKeys;
  /** The policies in force. */
  policies: () => ReadonlyMap<string, CompiledPolicy>;
  /** The election key in the region's Redis. */
  electionKey: string;
  /** The store's key prefix (the keys' and the short index's, `<prefix>regions:short`). */
  prefix: string;
  clock?: () => number;
  onError?: (where: 'region' | 'global', e: unknown) => void;
}

/** See the file comment. */
export class Reconciler {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private closed = false;
  private leader = false;
  private rounds = 0;
  private regionErrors = 0;
  private globalErrors = 0;
  private lastFullMs = -1;
  /** The rank of the short index's next page (watchShort). */
  private shortFrom = 0;
  private took = 0;
  private gave = 0;
  private readonly clock: () => number;
  private readonly interval: number;
  private readonly staleMs: number;

  constructor(private readonly o: ReconcilerOptions) {
    this.clock = o.clock ?? Date.now;
    this.interval = o.region.reconcileIntervalMs;
    this.staleMs = 3 * this.interval + 1000;
  }

  /** Starts the rounds (the first at once). */
  start(): void {
    if (this.timer !== null || this.closed) return;
    const loop = (): void => {
      if (this.closed) return;
      this.running = this.round().finally(() => {
        this.running = null;
        if (!this.closed) this.timer = setTimeout(loop, this.interval);
      });
    };
    this.timer = setTimeout(loop, 0);
  }

  /** One round; exposed for tests that drive rounds themselves. */
  async round(): Promise<void> {
    try {
      this.leader = await this.o.regional.elect(this.o.electionKey, 3 * this.interval + 500);
    } catch (e) {
      this.leader = false;
      this.regionError(e);
      return;
    }
    if (!this.leader) return;
    const run = async (entries: ActiveKey[]): Promise<boolean> => {
      let ok = true;
      for (let i = 0; i < entries.length; i += CONCURRENCY) {
        const done = await Promise.all(entries.slice(i, i + CONCURRENCY).map((e) => this.reconcile(e)));
        if (done.includes(false)) ok = false;
      }
      return ok;
    };
    const entries = [...this.o.active.keys.values()];
    let complete = await run(entries);
    // once the global Redis answered every report: the keys other regions run short of, reported here too
    if (complete) complete = await run(await this.watchShort());
    this.rounds++;
    if (complete && (this.o.global !== null || entries.length === 0)) this.lastFullMs = this.clock();
  }

  /**
   * Watches the keys another region marked short (adaptive shares only): this region reports its share of
   * them too, and gives what it does not use. A member that is not a key of a global policy in force here is
   * skipped (another release's, a policy reloaded away, or not ours).
   * @returns the keys it began to watch.
   */
  private async watchShort(): Promise<ActiveKey[]> {
    const global = this.o.global;
    if (global === null || !this.o.region.adaptive) return [];
    let members: string[];
    try {
      // a page a round, the next one the next round: a region short of more keys than a page re-marks them all
      // every round, so reading only the newest would leave the same ones unread for good
      members = await global.shortKeys(this.shortIndex, this.shortFrom, SHORT_KEYS_READ);
    } catch (e) {
      this.globalError(e);
      return [];
    }
    this.shortFrom = members.length < SHORT_KEYS_READ ? 0 : this.shortFrom + SHORT_KEYS_READ;
    const added: ActiveKey[] = [];
    const policies = this.o.policies();
    for (const m of members) {
      let v: unknown;
      try {
        v = JSON.parse(m);
      } catch {
        continue;
      }
      if (!Array.isArray(v) || v.length !== 3) continue;
      const [name, key, index] = v as unknown[];
      if (typeof name !== 'string' || typeof key !== 'string' || !Number.isSafeInteger(index)) continue;
      const policy = policies.get(name);
      if (policy === undefined || policy.scope !== 'global' || policy.limits[index as number] === undefined) continue;
      const stateKey = leaseStateKey(this.o.prefix, name, policy.version, key, index as number);
      if (this.o.active.keys.has(stateKey)) continue;
      this.o.active.watch(name, key, stateKey, index as number);
      const e = this.o.active.keys.get(stateKey);
      if (e !== undefined) added.push(e);
    }
    return added;
  }

  private get shortIndex(): string {
    return `${this.o.prefix}regions:short`;
  }

  /** Reconciles one key's limit; false when the global Redis was not reached (or the region's failed). */
  private async reconcile(e: ActiveKey): Promise<boolean> {
    const policy = this.o.policies().get(e.policy);
    const limit = policy?.limits[e.limitIndex];
    if (policy === undefined || policy.scope !== 'global' || limit === undefined) {
      this.o.active.keys.delete(e.stateKey); // reloaded away
      return true;
    }
    const region = this.o.region;
    const dflt = regionDefaultShare(limit, region);
    let row: ShareRow;
    try {
      row = await this.o.regional.read(e.stateKey, limit.periodMs, dflt);
    } catch (err) {
      this.regionError(err);
      return false;
    }
    const touched = e.touched;
    e.touched = false;
    const last = e.samples.at(-1);
    e.idleRounds = touched || last === undefined || row.used !== last.used ? 0 : e.idleRounds + 1;
    e.samples.push({ used: row.used, atMs: row.nowMs });
    if (e.samples.length > USAGE_SAMPLES) e.samples.shift();
    const first = e.samples[0];
    // Redis's TIME in whole ms: two reads within one ms that saw tokens spent measured at least that many per
    // ms (the clock's resolution), not no usage at all
    e.usage = row.used > first.used
      ? Math.ceil(((row.used - first.used) * limit.periodMs) / Math.max(1, row.nowMs - first.atMs)) : 0;
    this.note(e, row);
    if (e.idleRounds >= IDLE_ROUNDS && row.limit <= dflt.limit && row.burst <= dflt.burst) {
      this.o.active.keys.delete(e.stateKey);
    }
    const global = this.o.global;
    if (global === null) return true;
    const floor: Share = { limit: Math.floor(dflt.limit / 10), burst: Math.floor(dflt.burst / 10) };
    // Short: spending at least 80 % of its share's rate, or spending while its bucket is below a fifth of
    // its burst (a region that spends every token its share refills, its usage lumpy as leases settle).
    const short = 5 * e.usage >= 4 * row.limit || (e.usage > 0 && 5 * row.free < row.burst);
    const report = (r: ShareRow, mode: 0 | 1 | 2) => global.report({
      key: `${e.stateKey}:global`, region: region.name, limit: r.limit, burst: r.burst, usage: e.usage, short: mode !== 2 && short,
      globalLimit: limit.limit, globalBurst: limit.burst, mode, staleMs: this.staleMs,
      minLimit: floor.limit, minBurst: floor.burst, names: region.names,
      defaultLimits: region.names.map((n) => regionDefaultShare(limit, region, n).limit),
      defaultBursts: region.names.map((n) => regionDefaultShare(limit, region, n).burst),
    });
    let reply;
    try {
      reply = await report(row, region.adaptive ? 1 : 0);
    } catch (err) {
      this.globalError(err);
      return false;
    }
    e.globalUsage = reply.usage;
    if (short && region.adaptive) {
      // for the regions that have not checked this key: they give only in a report of their own (see the top)
      try {
        await global.markShort(this.shortIndex, JSON.stringify([e.policy, e.key, e.limitIndex]), reply.nowMs, this.staleMs);
      } catch (err) {
        this.globalError(err);
      }
    }
    try {
      if (reply.takeLimit > 0 || reply.takeBurst > 0) {
        // the record already counts it as ours; if this raise fails, the next report returns it to the pool
        row = await this.o.regional.raise(e.stateKey, limit.periodMs, dflt, reply.takeLimit, reply.takeBurst);
        this.took += row.movedLimit;
        this.note(e, row);
      } else if (reply.giveLimit > 0 || reply.giveBurst > 0) {
        row = await this.o.regional.lower(e.stateKey, limit.periodMs, dflt, reply.giveLimit, reply.giveBurst, floor.limit, floor.burst);
        this.gave += row.movedLimit;
        this.note(e, row);
        try {
          await report(row, 2); // the record frees what this region no longer holds: into the pool
        } catch (err) {
          this.globalError(err); // settled by the next report
          return false;
        }
      }
    } catch (err) {
      this.regionError(err);
      return false;
    }
    return true;
  }

  private note(e: ActiveKey, row: ShareRow): void {
    e.limit = row.limit;
    e.burst = row.burst;
  }

  private regionError(e: unknown): void {
    this.regionErrors++;
    this.o.onError?.('region', e);
  }

  private globalError(e: unknown): void {
    this.globalErrors++;
    this.o.onError?.('global', e);
  }

  stats(): RegionStats {
    const byPolicy = new Map<string, RegionPolicyStats>();
    const policies = this.o.policies();
    for (const e of this.o.active.keys.values()) {
      let s = byPolicy.get(e.policy);
      if (s === undefined) {
        s = { policy: e.policy, limit: policies.get(e.policy)?.limits[0]?.limit ?? 0, keys: 0, share: 0, usage: 0, globalUsage: 0 };
        byPolicy.set(e.policy, s);
      }
      s.keys++;
      if (!Number.isNaN(e.limit)) s.share += e.limit;
      s.usage += e.usage;
      s.globalUsage = Math.max(s.globalUsage, e.globalUsage);
    }
    return {
      region: this.o.region.name, leader: this.leader, activeKeys: this.o.active.keys.size, overflow: this.o.active.overflow,
      rounds: this.rounds, regionErrors: this.regionErrors, globalErrors: this.globalErrors,
      lagMs: this.lastFullMs < 0 ? -1 : this.clock() - this.lastFullMs, took: this.took, gave: this.gave,
      policies: [...byPolicy.values()],
    };
  }

  /** Stops the rounds, waits for one in flight, and resigns the election (another instance takes over at once). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    await this.running;
    if (this.leader) await this.o.regional.resign(this.o.electionKey).catch(() => undefined);
    await Promise.all([this.o.regional.close(), this.o.global?.close()]);
  }
}
