/**
 * The local state of `algorithm: concurrency` policies: per key, the leases it holds, each an expiry (Unix
 * ms) and a 48-bit lease id, in one flat array of doubles `[expiry, id, expiry, id, ...]` ordered by expiry.
 * A lease acquired at t with TTL T is held over [t, t + T): from t + T on it is gone, as if released (the
 * holder crashed, or forgot). Nothing runs in the background: a key's expired leases are dropped whenever
 * the key is touched, and a key that holds none is deleted, so only keys holding leases take memory.
 *
 * Keys are held per policy (a Map of Maps: the request's own key string is the lookup, no joined string).
 * Bounded: at most `maxKeys` keys (all concurrency policies together). A new key past that bound first
 * frees keys whose leases have all expired, sampling its policy's oldest-inserted {@link SAMPLE} keys; if every one
 * sampled still holds a live lease, the acquire is refused with OVERLOADED (never by dropping a live lease,
 * which would let more than `limit` run). A key holding h leases takes one Map entry and a 2h-double array
 * (16 bytes a lease; the bench states the bytes per key).
 *
 * Exact: integers only (Unix ms, counts); the same rules as lua/concurrency.lua, which the property test
 * compares it with.
 */

/** Keys sampled, oldest first, when the table is full. */
const SAMPLE = 32;

/** What {@link LeaseTable.acquire} decided. */
export interface Acquired {
  allowed: boolean;
  /** Leases the key may still take after this one: limit − held, never negative. */
  remaining: number;
  /** 0 when allowed; else ms until enough leases expire for one more; −1 when never (limit 0). */
  retryAfterMs: number;
}

export class LeaseTable {
  private readonly policies = new Map<string, Map<string, number[]>>();
  private count = 0;

  constructor(readonly maxKeys: number) {}

  /** Keys holding at least one lease not yet seen expired. */
  get size(): number {
    return this.count;
  }

  private keysOf(policy: string): Map<string, number[]> {
    let m = this.policies.get(policy);
    if (m === undefined) this.policies.set(policy, (m = new Map()));
    return m;
  }

  private drop(keys: Map<string, number[]>, key: string): void {
    if (keys.delete(key)) this.count--;
  }

  /**
   * Takes lease `id` (a 48-bit integer) for `key` at `now` if it holds fewer than `limit` live leases; the
   * lease expires at now + ttlMs. A denied acquire changes nothing but dropping expired leases.
   * @returns null when the table is full of keys holding live leases (the caller answers OVERLOADED).
   */
  acquire(policy: string, key: string, limit: number, ttlMs: number, now: number, id: number): Acquired | null {
    const keys = this.keysOf(policy);
    let leases = keys.get(key);
    if (leases !== undefined) expire(leases, now);
    const held = leases === undefined ? 0 : leases.length / 2;
    if (limit === 0) return { allowed: false, remaining: 0, retryAfterMs: -1 };
    if (held >= limit) {
      // the (held − limit + 1)-th earliest expiry frees the first place (held > limit after a reload lowered it)
      return { allowed: false, remaining: 0, retryAfterMs: leases![2 * (held - limit)] - now };
    }
    if (leases === undefined) {
      if (this.count >= this.maxKeys && !this.free(keys, now)) return null;
      keys.set(key, (leases = []));
      this.count++;
    }
    insert(leases, now + ttlMs, id);
    return { allowed: true, remaining: limit - held - 1, retryAfterMs: 0 };
  }

  /**
   * Releases lease `id` of `key`: the live leases the key holds after it, or −1 when the key did not hold it
   * (unknown, released before, or expired), in which case nothing but expired leases changed.
   */
  release(policy: string, key: string, id: number, now: number): number {
    const keys = this.keysOf(policy);
    const leases = keys.get(key);
    if (leases === undefined) return -1;
    expire(leases, now);
    let found = false;
    for (let i = 1; i < leases.length; i += 2) {
      if (leases[i] === id) {
        leases.splice(i - 1, 2);
        found = true;
        break;
      }
    }
    if (leases.length === 0) this.drop(keys, key);
    return found ? leases.length / 2 : -1;
  }

  /** Live leases `key` holds at `now` (drops the expired ones). */
  held(policy: string, key: string, now: number): number {
    const keys = this.keysOf(policy);
    const leases = keys.get(key);
    if (leases === undefined) return 0;
    expire(leases, now);
    if (leases.length === 0) this.drop(keys, key);
    return leases.length / 2;
  }

  /**
   * Deletes the keys among the {@link SAMPLE} oldest-inserted whose leases have all expired; the others move
   * to the back, so the next sample looks at different keys. True when at least one was deleted.
   */
  private free(keys: Map<string, number[]>, now: number): boolean {
    let freed = false;
    const moved: Array<[string, number[]]> = [];
    let n = 0;
    for (const [k, leases] of keys) {
      if (n === SAMPLE) break;
      n++;
      expire(leases, now);
      if (leases.length === 0) freed = true;
      else moved.push([k, leases]);
    }
    // delete and re-set: Map keeps insertion order, so the held ones go to the back
    let i = 0;
    for (const [k] of keys) {
      if (i++ === n) break;
      keys.delete(k);
    }
    for (const [k, leases] of moved) keys.set(k, leases);
    this.count -= n - moved.length;
    return freed;
  }
}

/** Drops the leases whose expiry is at or before `now` (they are at the front: the array is ordered by expiry). */
function expire(leases: number[], now: number): void {
  let k = 0;
  while (k < leases.length && leases[k] <= now) k += 2;
  if (k > 0) leases.splice(0, k);
}

/** Inserts (expiry, id) in expiry order, after leases of equal expiry (acquisition order). */
function insert(leases: number[], expiry: number, id: number): void {
  let at = leases.length;
  while (at > 0 && leases[at - 2] > expiry) at -= 2;
  if (at === leases.length) leases.push(expiry, id);
  else leases.splice(at, 0, expiry, id);
}
