/**
 * The write-behind of `sync` policies: their checks are decided by the local decider, and each admitted
 * cost is added to its legs' deltas here; the store's SyncWriter (src/store/sync.ts) merges the deltas into
 * Redis every interval and the merged states come back into the kernels that own the keys. A decision says
 * how stale the view behind it is (`stalenessMs`).
 */
import type { Store } from '../../store/contract.js';
import { SyncWriter, type SyncUnmerged } from '../../store/sync.js';
import type { SyncLeg } from '../../store/sync-deltas.js';
import { writeLegHash, type PolicyRuntime } from '../runtime.js';
import type { Batch } from '../queue.js';
import { legKey } from '../legs.js';
import type { StrictCache } from '../strict/cache.js';
import type { AdmissionLog, StateInstaller } from '../decider.js';

export interface WriteBehindOptions {
  store: Store;
  clock: () => number;
  /** The merge interval, in ms (SyncWriter's default when absent). */
  intervalMs?: number;
  /** What the strict decider knows of keys (a merged state replaces it), or null. */
  strict: StrictCache | null;
  warn?: (obj: object, msg: string) => void;
}

export class WriteBehind implements AdmissionLog {
  readonly writer: SyncWriter;
  /** A leg's hash (reused: see record()). */
  private readonly legHash = new Float64Array(2);
  /** Numbers for the (policy, version) parts of store keys, and each runtime's per leg (see namespaces()). */
  private readonly nsIds = new Map<string, number>();
  private readonly legNs = new WeakMap<PolicyRuntime, Int32Array>();
  private nsRt: PolicyRuntime | null = null;
  private nsOfRt: Int32Array = new Int32Array(0);

  constructor(private readonly o: WriteBehindOptions, private readonly local: StateInstaller) {
    this.writer = new SyncWriter(o.store, o.clock, (e, st, now) => this.install(e, st, now), { intervalMs: o.intervalMs, warn: o.warn });
  }

  /** How stale the shared view is at `now`, in ms. */
  staleness(now: number): number {
    return this.writer.staleness(now);
  }

  /**
   * Adds check i's admitted cost to each of its legs' deltas, found by the leg's kernel hash: no string, object
   * or closure per check. Only a leg the writer does not know yet is described, with its store key.
   */
  record(b: Batch, i: number, shard: number): void {
    const rt = b.rts[i];
    this.add(rt, b.keys[i], b.hashes[2 * i], b.hashes[2 * i + 1], shard, b.costs[i], rt.legCount);
  }

  /**
   * Adds `cost` to the deltas of the first `legs` legs of a check of `rt` on `key` (hash lo, hi; owned by
   * `shard`, −1 for this thread).
   */
  private add(rt: PolicyRuntime, key: string, lo: number, hi: number, shard: number, cost: number, legs: number): void {
    const sync = this.writer;
    const ns = this.namespaces(rt);
    const h = this.legHash;
    for (let j = 0; j < legs; j++) {
      writeLegHash(rt, lo, hi, j, h, 0);
      if (sync.bump(h[0], h[1], rt.limitIds[j], ns[j], cost)) continue;
      const l = rt.legLimits[j];
      sync.add({
        redisKey: legKey(this.o.store.prefix, rt, key, j), algorithmCode: l.algorithmCode, limit: l.limit, periodMs: l.periodMs,
        burst: l.burst, limitId: rt.limitIds[j], hashLo: h[0], hashHi: h[1], shard, ns: ns[j],
      }, cost);
    }
  }

  /**
   * Makes `key`'s own legs (not its guard's) of `rt` part of the next merge with nothing added: the merge
   * reads their state from Redis and installs it in the kernel that owns them (hash lo, hi; `shard`, −1 for
   * this thread), in place of this instance's view. Another instance's reset of the key (src/engine/inspect.ts
   * heard): the view no longer holds, and no spending of this instance is dropped (its deltas merge as usual).
   */
  refresh(rt: PolicyRuntime, key: string, lo: number, hi: number, shard: number): void {
    this.add(rt, key, lo, hi, shard, 0, rt.saltLo.length);
  }

  /** Merges what is left, retrying until `drainMs` (SyncWriter.close). */
  close(drainMs?: number): Promise<SyncUnmerged> {
    return this.writer.close(drainMs);
  }

  /**
   * A number per leg of `rt` for what its store key holds beyond the leg's hash and limit id: its policy's name
   * and version (the guard's, for a guard leg). A reload that changes a derived version (another limit's
   * numbers, say) keeps a leg's hash and limit id but not its store key, and so gets other numbers.
   */
  private namespaces(rt: PolicyRuntime): Int32Array {
    if (rt === this.nsRt) return this.nsOfRt;
    let ns = this.legNs.get(rt);
    if (ns === undefined) {
      ns = new Int32Array(rt.legCount);
      const own = rt.saltLo.length;
      for (let j = 0; j < rt.legCount; j++) {
        const text = j < own ? `${rt.policy.name}\u0000${rt.policy.version}` : `\u0000${rt.guardStoreKeys![j - own]}`;
        let id = this.nsIds.get(text);
        if (id === undefined) this.nsIds.set(text, (id = this.nsIds.size));
        ns[j] = id;
      }
      this.legNs.set(rt, ns);
    }
    this.nsRt = rt;
    this.nsOfRt = ns;
    return ns;
  }

  /** Installs merged states into the kernels that own them: this thread's, or each shard's in order. */
  private async install(entries: SyncLeg[], states: number[], now: number): Promise<void> {
    const byShard = new Map<number, number[]>();
    const paramsOf = new Map<number, number[]>();
    entries.forEach((e, i) => {
      this.o.strict?.drop(e.redisKey);
      let rows = byShard.get(e.shard);
      if (rows === undefined) {
        byShard.set(e.shard, (rows = []));
        paramsOf.set(e.shard, []);
      }
      rows.push(e.hashLo, e.hashHi, e.limitId, states[3 * i], states[3 * i + 1], states[3 * i + 2]);
      paramsOf.get(e.shard)!.push(e.algorithmCode, e.limit, e.periodMs);
    });
    await this.local.install(byShard, paramsOf, now);
  }
}
