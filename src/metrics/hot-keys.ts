/**
 * Hot keys: a bounded top-K heavy-hitter sketch (Space-Saving: Metwally, Agrawal, El Abbadi, "Efficient
 * Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005), one per policy.
 *
 * The sketch monitors at most `capacity` keys (K). A check for a monitored key increments its count; a check
 * for another key, with the table full, takes over an entry with the smallest count m: the new key's count
 * becomes m + 1 and its `error` m (the most it can overstate). Hence, with N checks seen:
 *
 * - every monitored key's true count lies in [count - error, count], and error <= min count <= N / K;
 * - every key whose true count exceeds N / K is monitored (so the top of the table holds the heavy hitters);
 * - `denied` counts the key's denials since it entered the table: its true denials lie in [denied, denied + error].
 *
 * Layout (the paper's Stream-Summary, in typed arrays): entries are grouped in buckets of equal count, the
 * buckets in a list by increasing count, so an increment moves an entry to the next bucket and the entry to
 * take over is the head of the first: O(1) per check. Keys are found through an open-addressing table (linear
 * probing, backward-shift deletion) on a hash of the key's first 32 and last 16 UTF-16 units and its length;
 * a collision costs a string comparison, never a wrong count. No allocation per check.
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

const NONE = -1;

export class SpaceSaving {
  /** Checks seen (N). */
  total = 0;
  private size = 0;
  // entries, by slot
  private readonly keys: string[];
  private readonly hashes: Int32Array;
  private readonly errors: Float64Array;
  private readonly denials: Float64Array;
  private readonly bucketOf: Int32Array;
  private readonly prevE: Int32Array;
  private readonly nextE: Int32Array;
  // buckets: entries of one count, in a list by increasing count
  private readonly bCount: Float64Array;
  private readonly bHead: Int32Array;
  private readonly bPrev: Int32Array;
  private readonly bNext: Int32Array;
  private bFree = 0;
  /** The bucket of the smallest count, NONE while empty. */
  private first = NONE;
  /** Key lookup: slot + 1 per cell, 0 empty; at most half full. */
  private readonly table: Int32Array;
  private readonly mask: number;

  /**
   * @param capacity K, the most keys monitored: a positive integer. The bound on any count's error is N / K.
   * @throws RangeError for a capacity that is not a positive safe integer.
   */
  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`hot keys capacity: must be a positive integer (got ${capacity})`);
    this.keys = new Array<string>(capacity).fill('');
    this.hashes = new Int32Array(capacity);
    this.errors = new Float64Array(capacity);
    this.denials = new Float64Array(capacity);
    this.bucketOf = new Int32Array(capacity);
    this.prevE = new Int32Array(capacity);
    this.nextE = new Int32Array(capacity);
    // one bucket per entry at most, plus the one an increment may create before it frees another
    const buckets = capacity + 1;
    this.bCount = new Float64Array(buckets);
    this.bHead = new Int32Array(buckets);
    this.bPrev = new Int32Array(buckets);
    this.bNext = new Int32Array(buckets);
    this.table = new Int32Array(Math.max(16, 2 ** Math.ceil(Math.log2(capacity * 2))));
    this.mask = this.table.length - 1;
    this.clear();
  }

  /** Counts one check of `key`; `denied` when it was refused. */
  add(key: string, denied: boolean): void {
    this.total++;
    const h = hashKey(key);
    const { table, mask, hashes, keys } = this;
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const v = table[i];
      if (v === 0) break;
      const s = v - 1;
      if (hashes[s] === h && keys[s] === key) {
        if (denied) this.denials[s]++;
        this.increment(s);
        return;
      }
    }
    let s: number;
    if (this.size < this.capacity) {
      // a free entry: count 1, exact
      s = this.size++;
      this.errors[s] = 0;
      this.attach(s, this.first !== NONE && this.bCount[this.first] === 1 ? this.first : this.newBucket(1, NONE));
    } else {
      // take over an entry of the smallest count: its count stays (and grows by one), as the new key's error
      s = this.bHead[this.first];
      this.unindex(s);
      this.errors[s] = this.bCount[this.first];
    }
    keys[s] = key;
    hashes[s] = h;
    this.denials[s] = denied ? 1 : 0;
    let i = h & mask;
    while (table[i] !== 0) i = (i + 1) & mask;
    table[i] = s + 1;
    if (this.errors[s] > 0) this.increment(s);
  }

  /** The smallest monitored count: the bound on every entry's error (0 until the table is full). */
  minCount(): number {
    return this.size < this.capacity ? 0 : this.bCount[this.first];
  }

  /** Keys monitored now. */
  get length(): number {
    return this.size;
  }

  /** The `limit` keys with the highest counts, highest first (ties: the key's text order). */
  top(limit = this.capacity): HotKey[] {
    const out: HotKey[] = [];
    for (let s = 0; s < this.size; s++) {
      const checks = this.bCount[this.bucketOf[s]];
      out.push({ key: this.keys[s], checks, denied: this.denials[s], error: this.errors[s], share: this.total === 0 ? 0 : checks / this.total });
    }
    out.sort((a, b) => b.checks - a.checks || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    if (out.length > limit) out.length = Math.max(0, limit);
    return out;
  }

  /** Forgets every key and the total. */
  clear(): void {
    this.table.fill(0);
    this.keys.fill('');
    this.size = 0;
    this.total = 0;
    this.first = NONE;
    const n = this.bNext.length;
    for (let b = 0; b < n; b++) this.bNext[b] = b + 1 < n ? b + 1 : NONE;
    this.bFree = 0;
  }

  /**
   * Moves entry `s` from its bucket (count c) to the bucket of c + 1, creating it if need be; an entry alone in
   * its bucket, with no bucket of c + 1, takes its bucket along (the list stays ordered: the next bucket counts
   * more than c + 1), which is what one hot key does on every check.
   */
  private increment(s: number): void {
    const b = this.bucketOf[s];
    const count = this.bCount[b] + 1;
    const next = this.bNext[b];
    if (next !== NONE && this.bCount[next] === count) {
      this.detach(s);
      this.attach(s, next);
    } else if (this.bHead[b] === s && this.nextE[s] === NONE) {
      this.bCount[b] = count;
    } else {
      const target = this.newBucket(count, b);
      this.detach(s);
      this.attach(s, target);
    }
  }

  /** A bucket of `count` placed after bucket `after` (NONE: first). */
  private newBucket(count: number, after: number): number {
    const b = this.bFree;
    this.bFree = this.bNext[b];
    this.bCount[b] = count;
    this.bHead[b] = NONE;
    this.bPrev[b] = after;
    const next = after === NONE ? this.first : this.bNext[after];
    this.bNext[b] = next;
    if (next !== NONE) this.bPrev[next] = b;
    if (after === NONE) this.first = b;
    else this.bNext[after] = b;
    return b;
  }

  private attach(s: number, b: number): void {
    const head = this.bHead[b];
    this.prevE[s] = NONE;
    this.nextE[s] = head;
    if (head !== NONE) this.prevE[head] = s;
    this.bHead[b] = s;
    this.bucketOf[s] = b;
  }

  /** Takes entry `s` out of its bucket, freeing the bucket if it empties. */
  private detach(s: number): void {
    const b = this.bucketOf[s];
    const p = this.prevE[s];
    const n = this.nextE[s];
    if (p !== NONE) this.nextE[p] = n;
    else this.bHead[b] = n;
    if (n !== NONE) this.prevE[n] = p;
    if (this.bHead[b] !== NONE) return;
    const bp = this.bPrev[b];
    const bn = this.bNext[b];
    if (bp !== NONE) this.bNext[bp] = bn;
    else this.first = bn;
    if (bn !== NONE) this.bPrev[bn] = bp;
    this.bNext[b] = this.bFree;
    this.bFree = b;
  }

  /** Removes entry `s`'s key from the lookup table (backward-shift deletion: no tombstones). */
  private unindex(s: number): void {
    const { table, mask, hashes } = this;
    let i = hashes[s] & mask;
    while (table[i] !== s + 1) i = (i + 1) & mask;
    for (let j = i; ;) {
      j = (j + 1) & mask;
      const v = table[j];
      if (v === 0) break;
      const k = hashes[v - 1] & mask;
      // the entry at j stays if its home k lies cyclically in (i, j]
      if (i <= j ? i < k && k <= j : i < k || k <= j) continue;
      table[i] = v;
      i = j;
    }
    table[i] = 0;
  }
}

/** FNV-1a over the key's length, its first 32 and its last 16 UTF-16 code units. */
function hashKey(key: string): number {
  const n = key.length;
  let h = Math.imul(0x811c9dc5 ^ n, 0x01000193);
  const head = n < 32 ? n : 32;
  for (let i = 0; i < head; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  for (let i = n - 16 > head ? n - 16 : head; i < n; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return h | 0; // as the Int32Array of hashes holds it
}
