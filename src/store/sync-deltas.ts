/**
 * The write-behind's deltas by leg (src/store/sync.ts): the legs it knows, found by their kernel hash with no
 * allocation and no string, and the cost admitted on each since the last merge was taken.
 */

/**
 * One leg as the caller describes it the first time the writer sees it: its Redis key and limit, and where its
 * kernel state lives. The writer keeps it (and its key string) while the leg keeps being touched.
 */
export interface SyncLeg {
  redisKey: string;
  algorithmCode: number;
  limit: number;
  periodMs: number;
  burst: number;
  /** Kernel limit id, leg hash (lo, hi) and owning shard (−1: this thread), to install the merged state. */
  limitId: number;
  hashLo: number;
  hashHi: number;
  shard: number;
  /**
   * The caller's number for the rest of what the Redis key is made of (its policy and version): a leg is
   * identified by (hashLo, hashHi, limitId, ns), so two legs with one identity must have one Redis key.
   */
  ns: number;
}

/** Bytes counted per known leg beyond its Redis key: the SyncLeg object, its slot and cells. */
export const LEG_BYTES = 200;

/** Slots of the leg table: (hashLo, hashHi, limitId, ns, index + 1), 0 in the last for an empty slot. */
const STRIDE = 5;
/** Legs the table has room for before it first grows, and below which it is never swept. */
const MIN_LEGS = 1024;

/**
 * Known legs and their pending deltas. An open-addressing table of typed arrays maps a leg's identity to its
 * index; per index, two numbers: the interval the leg was last made pending in, and its delta while pending.
 * An interval ends when the pending legs are taken for a merge ({@link take}).
 */
export class DeltaTable {
  /** Known legs, by index. */
  private legs: SyncLeg[] = [];
  /**
   * Two numbers per known leg (one cache line): the interval it was last made pending in ({@link interval}:
   * pending now; 0: never, or forgotten), and its delta while pending.
   */
  private cells = new Float64Array(2 * MIN_LEGS);
  /** Indexes of the legs pending in this interval. */
  private pending: number[] = [];
  /** Numbers the intervals: one per batch of pending legs taken for a merge. */
  private interval = 1;
  /** The open-addressing table from a leg's identity to its index; capacity a power of 2, at most half full. */
  private slots = new Uint32Array(2 * MIN_LEGS * STRIDE);
  private mask = 2 * MIN_LEGS - 1;
  /** Legs kept by the last sweep. */
  private kept = 0;
  /** Bytes held for the known legs (their Redis keys plus LEG_BYTES each). */
  private bytes = 0;

  /**
   * @param maxKeys most legs pending at once
   * @param maxBytes most bytes held for the known legs (Redis keys plus {@link LEG_BYTES} each)
   */
  constructor(private readonly maxKeys: number, private readonly maxBytes: number) {}

  /** Legs pending now. */
  get size(): number {
    return this.pending.length;
  }

  /** True when no new leg may be known now: maxKeys legs pending, or maxBytes held. */
  full(): boolean {
    return this.pending.length >= this.maxKeys || this.bytes >= this.maxBytes;
  }

  /** The index of a leg (unsigned 32-bit hashLo, hashHi, limitId, ns), or −1. */
  find(lo: number, hi: number, limitId: number, ns: number): number {
    const s = this.slots, mask = this.mask;
    // as the table holds them (a caller's signed or fractional number would never be found)
    lo >>>= 0;
    hi >>>= 0;
    limitId >>>= 0;
    ns >>>= 0;
    for (let p = slotOf(lo, hi, limitId, ns) & mask; ; p = (p + 1) & mask) {
      const o = p * STRIDE;
      const v = s[o + 4];
      if (v === 0) return -1;
      if (s[o] === lo && s[o + 1] === hi && s[o + 2] === limitId && s[o + 3] === ns) return v - 1;
    }
  }

  /** Knows `leg` (which {@link find} does not find), with no delta, and returns its index. */
  insert(leg: SyncLeg): number {
    this.bytes += leg.redisKey.length + LEG_BYTES;
    const i = this.legs.length;
    if (2 * (i + 1) > this.mask + 1) this.resize(2 * (this.mask + 1));
    this.legs.push(leg);
    if (2 * i >= this.cells.length) {
      const cells = new Float64Array(2 * this.cells.length);
      cells.set(this.cells);
      this.cells = cells;
    }
    this.cells[2 * i] = 0;
    this.put(leg, i);
    return i;
  }

  /**
   * Adds `cost` to leg i's delta, making it pending (delta 0) first if it is not. False when it cannot be made
   * pending (maxKeys legs are): the caller drops the delta.
   */
  touch(i: number, cost: number): boolean {
    const c = this.cells;
    if (c[2 * i] === this.interval) {
      c[2 * i + 1] += cost;
    } else if (this.pending.length >= this.maxKeys) {
      return false;
    } else {
      c[2 * i] = this.interval;
      c[2 * i + 1] = cost;
      this.pending.push(i);
    }
    return true;
  }

  /** The delta `leg` has pending in this interval (admitted after the last {@link take}), or 0. */
  pendingDelta(leg: SyncLeg): number {
    const i = this.find(leg.hashLo, leg.hashHi, leg.limitId, leg.ns);
    return i < 0 || this.cells[2 * i] !== this.interval ? 0 : this.cells[2 * i + 1];
  }

  /** Calls `f` with each pending leg and its delta, in the order they became pending. */
  forEachPending(f: (leg: SyncLeg, delta: number) => void): void {
    for (const i of this.pending) f(this.legs[i], this.cells[2 * i + 1]);
  }

  /**
   * Takes the pending legs and their deltas, in parts of at most `most` legs, and starts the next interval:
   * nothing is pending after it (and legs long untouched are forgotten: {@link sweep}).
   */
  take(most: number): Array<{ legs: SyncLeg[]; deltas: number[] }> {
    const n = this.pending.length;
    const parts: Array<{ legs: SyncLeg[]; deltas: number[] }> = [];
    for (let at = 0; at < n; at += most) {
      const m = Math.min(most, n - at);
      const part = { legs: new Array<SyncLeg>(m), deltas: new Array<number>(m) };
      for (let k = 0; k < m; k++) {
        const i = this.pending[at + k];
        part.legs[k] = this.legs[i];
        part.deltas[k] = this.cells[2 * i + 1];
      }
      parts.push(part);
    }
    this.pending.length = 0; // copied into the parts: the array (and its capacity) is reused
    this.interval++;
    this.sweep();
    return parts;
  }

  /** Drops the pending deltas of the legs whose Redis key is in `redisKeys`; returns how many. */
  forget(redisKeys: ReadonlySet<string>): number {
    let n = 0;
    const kept: number[] = [];
    for (const i of this.pending) {
      if (redisKeys.has(this.legs[i].redisKey)) {
        this.cells[2 * i] = 0;
        this.cells[2 * i + 1] = 0;
        n++;
      } else {
        kept.push(i);
      }
    }
    this.pending = kept;
    return n;
  }

  /** Puts leg `i` (not in the table) in the table. */
  private put(leg: SyncLeg, i: number): void {
    const s = this.slots, mask = this.mask;
    let p = slotOf(leg.hashLo, leg.hashHi, leg.limitId, leg.ns) & mask;
    while (s[p * STRIDE + 4] !== 0) p = (p + 1) & mask;
    const o = p * STRIDE;
    s[o] = leg.hashLo;
    s[o + 1] = leg.hashHi;
    s[o + 2] = leg.limitId;
    s[o + 3] = leg.ns;
    s[o + 4] = i + 1;
  }

  /** A table of `cap` slots (a power of 2) holding every known leg. */
  private resize(cap: number): void {
    this.slots = new Uint32Array(cap * STRIDE);
    this.mask = cap - 1;
    for (let i = 0; i < this.legs.length; i++) this.put(this.legs[i], i);
  }

  /**
   * Forgets the legs untouched in the last two intervals, when the legs known have doubled since the last
   * sweep (and every 256 intervals, and whenever they hold half of maxBytes): the legs kept stay within a
   * few times the keys touched per interval. Nothing is pending when it runs.
   */
  private sweep(): void {
    const n = this.legs.length;
    if (n <= MIN_LEGS || (n <= 2 * this.kept && this.interval % 256 !== 0 && 2 * this.bytes < this.maxBytes)) return;
    const since = this.interval - 2;
    const kept: SyncLeg[] = [];
    const c = this.cells;
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      if (c[2 * i] >= since) {
        c[2 * kept.length] = c[2 * i];
        kept.push(this.legs[i]);
        bytes += this.legs[i].redisKey.length + LEG_BYTES;
      }
    }
    this.bytes = bytes;
    this.legs = kept;
    this.kept = kept.length;
    c.fill(0, 2 * kept.length);
    let len = MIN_LEGS;
    while (len < kept.length) len *= 2;
    if (2 * len < c.length) this.cells = c.slice(0, 2 * len);
    let cap = 2 * MIN_LEGS;
    while (cap < 2 * kept.length) cap *= 2;
    this.resize(cap);
  }
}

/** A leg's first slot (before masking): the hash's low half is already uniform; the rest is mixed in. */
function slotOf(lo: number, hi: number, limitId: number, ns: number): number {
  const h = Math.imul(lo ^ Math.imul(hi, 0x85ebca6b) ^ Math.imul(limitId + 1, 0xc2b2ae35) ^ Math.imul(ns + 1, 0x27d4eb2f), 0x9e3779b1);
  return h ^ (h >>> 15);
}
