/**
 * Hot keys: a bounded top-K heavy-hitter sketch (Space-Saving: Metwally, Agrawal, El Abbadi, "Efficient
 * Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005), one per policy.
 *
 * The sketch monitors at most `capacity` keys (K). A check for a monitored key increments its count; a check
 * for another key, with the table full, takes over the entry with the smallest count m: the new key's count
 * becomes m + 1 and its `error` m (the most it can overstate). Hence, with N checks seen:
 *
 * - every monitored key's true count lies in [count - error, count], and error <= min count <= N / K;
 * - every key whose true count exceeds N / K is monitored (so the top of the table holds the heavy hitters);
 * - `denied` counts the key's denials since it entered the table: its true denials lie in [denied, denied + error].
 *
 * The table is a binary min-heap over counts (root: the entry to take over), with a Map from key to slot. A
 * count only grows, so an increment sifts the entry down, usually not at all for a heavy hitter (it sits low).
 * Per check: one Map lookup and a few array writes; a new key replaces one Map entry. No allocation beyond
 * the Map's own (its size never exceeds K).
 */

/** One monitored key, as {@link SpaceSaving.top} reports it. Counts are checks (not tokens). */
export interface HotKey {
  key: string;
  /** Checks counted for the key: an overestimate by at most `error`. */
  checks: number;
  /** Denied checks counted since the key entered the table (its true denials: `denied` to `denied + error`). */
  denied: number;
  /** The most `checks` may overstate: the smallest count when the key took its entry over (0 if it never did). */
  error: number;
  /** `checks / total`: the key's share of every check the sketch has seen, 0..1 (an upper bound). */
  share: number;
}

export class SpaceSaving {
  /** Checks seen (N). */
  total = 0;
  private size = 0;
  private readonly slotOf = new Map<string, number>();
  /** Heap order: heap[i] is the slot at heap position i; pos[slot] is its position. */
  private readonly heap: Int32Array;
  private readonly pos: Int32Array;
  private readonly keys: string[];
  private readonly counts: Float64Array;
  private readonly errors: Float64Array;
  private readonly denials: Float64Array;

  /**
   * @param capacity K, the most keys monitored: a positive integer. The bound on any count's error is N / K.
   * @throws RangeError for a capacity that is not a positive safe integer.
   */
  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`hot keys capacity: must be a positive integer (got ${capacity})`);
    this.heap = new Int32Array(capacity);
    this.pos = new Int32Array(capacity);
    this.keys = new Array<string>(capacity).fill('');
    this.counts = new Float64Array(capacity);
    this.errors = new Float64Array(capacity);
    this.denials = new Float64Array(capacity);
  }

  /** Counts one check of `key`; `denied` when it was refused. */
  add(key: string, denied: boolean): void {
    this.total++;
    let slot = this.slotOf.get(key);
    if (slot === undefined) {
      if (this.size < this.capacity) {
        // a free entry: count 1, exact
        slot = this.size++;
        this.heap[slot] = slot;
        this.pos[slot] = slot;
        this.keys[slot] = key;
        this.counts[slot] = 1;
        this.errors[slot] = 0;
        this.denials[slot] = denied ? 1 : 0;
        this.slotOf.set(key, slot);
        this.siftUp(slot);
        return;
      }
      // take over the smallest entry: its count stays (and grows by one below), as the new key's error
      slot = this.heap[0];
      this.slotOf.delete(this.keys[slot]);
      this.errors[slot] = this.counts[slot];
      this.keys[slot] = key;
      this.denials[slot] = 0;
      this.slotOf.set(key, slot);
    }
    this.counts[slot]++;
    if (denied) this.denials[slot]++;
    this.siftDown(this.pos[slot]);
  }

  /** The smallest monitored count: the bound on every entry's error (0 until the table is full). */
  minCount(): number {
    return this.size < this.capacity ? 0 : this.counts[this.heap[0]];
  }

  /** Keys monitored now. */
  get length(): number {
    return this.size;
  }

  /** The `limit` keys with the highest counts, highest first (ties: the key's text order). */
  top(limit = this.capacity): HotKey[] {
    const out: HotKey[] = [];
    for (let s = 0; s < this.size; s++) {
      const checks = this.counts[s];
      out.push({ key: this.keys[s], checks, denied: this.denials[s], error: this.errors[s], share: this.total === 0 ? 0 : checks / this.total });
    }
    out.sort((a, b) => b.checks - a.checks || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    if (out.length > limit) out.length = Math.max(0, limit);
    return out;
  }

  /** Forgets every key and the total. */
  clear(): void {
    this.slotOf.clear();
    this.size = 0;
    this.total = 0;
  }

  private siftDown(i: number): void {
    const { heap, pos, counts } = this;
    const n = this.size;
    const slot = heap[i];
    const c = counts[slot];
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && counts[heap[r]] < counts[heap[l]] ? r : l;
      if (counts[heap[child]] >= c) break;
      heap[i] = heap[child];
      pos[heap[i]] = i;
      i = child;
    }
    heap[i] = slot;
    pos[slot] = i;
  }

  private siftUp(i: number): void {
    const { heap, pos, counts } = this;
    const slot = heap[i];
    const c = counts[slot];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (counts[heap[parent]] <= c) break;
      heap[i] = heap[parent];
      pos[heap[i]] = i;
      i = parent;
    }
    heap[i] = slot;
    pos[slot] = i;
  }
}
