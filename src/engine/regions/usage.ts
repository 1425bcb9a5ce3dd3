/**
 * Which `scope: global` keys this instance uses: the lease decider reports each key it leases for, and the
 * region's reconciler (reconciler.ts) looks at those keys only. Bounded: past `max` keys a new key is not
 * watched (counted in `overflow`); a watched key leaves the set once it has been idle for a while and holds
 * no more than its default share (reconciler.ts decides), making room again.
 */

/** Reads over which a key's usage is measured (one per reconcile round). */
export const USAGE_SAMPLES = 8;

/** The hook the lease decider calls (the lease <-> regions contract). */
export interface RegionUsage {
  /**
   * A lease was asked for `key` of `policy`, whose limit `limitIndex` has Redis state key `stateKey` (its
   * share hash is `<stateKey>:share`). Called once per leg of a lease call, never per check. When
   * `limitIndex` is absent it is read from the state key's last `:<n>`.
   */
  touched(policy: string, key: string, stateKey: string, limitIndex?: number): void;
}

/** The hook when no region is configured. */
export const NO_REGION_USAGE: RegionUsage = Object.freeze({ touched(): void {} });

/** One watched key's limit. */
export interface ActiveKey {
  policy: string;
  key: string;
  stateKey: string;
  limitIndex: number;
  /** Touched since the reconciler last looked. */
  touched: boolean;
  /** Reconcile rounds in a row without a touch nor a change of `used`. */
  idleRounds: number;
  /**
   * `used` and the Redis time of the last {@link USAGE_SAMPLES} reads, oldest first: usage is measured over
   * them, so a region that spends every token its share refills reads as using its share, not as the lumps
   * in which leases are settled.
   */
  samples: Array<{ used: number; atMs: number }>;
  /** The share at the last read. */
  limit: number;
  burst: number;
  /** The usage measured at the last read, tokens per period. */
  usage: number;
  /** This region's and every region's usage as the global record last said, tokens per period. */
  globalUsage: number;
}

/** The bounded set of watched keys, by state key. */
export class ActiveKeys implements RegionUsage {
  readonly keys = new Map<string, ActiveKey>();
  /** Keys not watched because the set was full. */
  overflow = 0;

  constructor(readonly max: number) {}

  touched(policy: string, key: string, stateKey: string, limitIndex?: number): void {
    const e = this.keys.get(stateKey);
    if (e !== undefined) {
      e.touched = true;
      return;
    }
    this.add(policy, key, stateKey, limitIndex, true);
  }

  /**
   * Watches a key this region has not checked (another region runs short of it: the reconciler reports this
   * region's unused share so that it can be given). Not a touch: it is unwatched again once idle. Only while
   * the set is under half full: the other half stays for the keys this region's own checks touch. A key not
   * watched for that is not counted in {@link overflow} (the same keys are offered again every round).
   */
  watch(policy: string, key: string, stateKey: string, limitIndex: number): void {
    if (this.keys.has(stateKey) || 2 * this.keys.size >= this.max) return;
    this.add(policy, key, stateKey, limitIndex, false);
  }

  private add(policy: string, key: string, stateKey: string, limitIndex: number | undefined, touched: boolean): void {
    if (this.keys.size >= this.max) {
      this.overflow++;
      return;
    }
    const index = limitIndex ?? Number(/:(\d+)(?::lease)?$/.exec(stateKey)?.[1] ?? 0);
    this.keys.set(stateKey, {
      policy, key, stateKey, limitIndex: index, touched, idleRounds: 0, samples: [],
      limit: NaN, burst: NaN, usage: 0, globalUsage: 0,
    });
  }
}
