/**
 * The local state of `algorithm: concurrency` policies: per key, the leases it holds, each an expiry (Unix
 * ms) and a 48-bit lease id, in one flat array of doubles `[expiry, id, expiry, id, ...]` ordered by expiry.
 * A lease acquired at t with TTL T is held over [t, t + T): from t + T on it is gone, as if released (the
 * holder crashed, or forgot). Nothing runs in the background: a key's expired leases are dropped whenever
 * the key is touched, and a key that holds none is deleted, so only keys holding leases take memory.
 *
 * Bounded: at most `maxKeys` keys (all concurrency policies together). A new key past that bound first
 * frees keys whose leases have all expired, sampling the oldest-inserted {@link SAMPLE} keys; if every one
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
  private readonly keys = new Map<string, number[]>();

  constructor(readonly maxKeys: number) {}

  /** Keys holding at least one lease not yet seen expired. */
  get size(): number {
    return this.keys.size;
  }

  /**
   * Takes lease `id` (a 48-bit integer) for `key` at `now` if it holds fewer than `limit` live leases; the
   * lease expires at now + ttlMs. A denied acquire changes nothing but dropping expired leases.
   * @returns null when the table is full of keys holding live leases (the caller answers OVERLOADED).
   */
  acquire(key: string, limit: number, ttlMs: number, now: number, id: number): Acquired | null {
    let leases = this.keys.get(key);
    if (leases !== undefined) expire(leases, now);
    const held = leases === undefined ? 0 : leases.length / 2;
    if (limit === 0) return { allowed: false, remaining: 0, retryAfterMs: -1 };
    if (held >= limit) {
      // the (held − limit + 1)-th earliest expiry frees the first place (held > limit after a reload lowered it)
      return { allowed: false, remaining: 0, retryAfterMs: leases![2 * (held - limit)] - now };
    }
    if (leases === undefined) {
      if (this.keys.size >= this.maxKeys && !this.free(now)) return null;
      this.keys.set(key, (leases = []));
    }
    insert(leases, now + ttlMs, id);
    return { allowed: true, remaining: limit - held - 1, retryAfterMs: 0 };
  }

  /**
   * Releases lease `id` of `key`: true when the key held it (live), false otherwise (unknown, released
   * before, or expired), in which case nothing but expired leases changed.
   */
  release(key: string, id: number, now: number): boolean {
    const leases = this.keys.get(key);
    if (leases === undefined) return false;
    expire(leases, now);
    let found = false;
    for (let i = 1; i < leases.length; i += 2) {
      if (leases[i] === id) {
        leases.splice(i - 1, 2);
        found = true;
        break;
      }
    }
    if (leases.length === 0) this.keys.delete(key);
    return found;
  }

  /** Live leases `key` holds at `now` (drops the expired ones). */
  held(key: string, now: number): number {
    const leases = this.keys.get(key);
    if (leases === undefined) return 0;
    expire(leases, now);
    if (leases.length === 0) this.keys.delete(key);
    return leases.length / 2;
  }

  /** Forgets every lease of `key`; returns how many live ones it held. */
  forget(key: string, now: number): number {
    const n = this.held(key, now);
    this.keys.delete(key);
    return n;
  }

  /**
   * Deletes the keys among the {@link SAMPLE} oldest-inserted whose leases have all expired; the others move
   * to the back, so the next sample looks at different keys. True when at least one was deleted.
   */
  private free(now: number): boolean {
    let freed = false;
    const moved: Array<[string, number[]]> = [];
    let n = 0;
    for (const [k, leases] of this.keys) {
      if (n === SAMPLE) break;
      n++;
      expire(leases, now);
      if (leases.length === 0) freed = true;
      else moved.push([k, leases]);
    }
    // delete and re-set: Map keeps insertion order, so the held ones go to the back
    let i = 0;
    for (const [k] of this.keys) {
      if (i++ === n) break;
      this.keys.delete(k);
    }
    for (const [k, leases] of moved) this.keys.set(k, leases);
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
