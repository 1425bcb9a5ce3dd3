/**
 * The kernel's table: bounded at maxKeys, evicting (sampled LRU from a randomly drawn occupied slot) first a key whose state
 * carries no information (bucket refilled to full, window over), else the least recently CHANGED key (peeks
 * and denials are not changes). With maxKeys 8 the table has 16 slots, so the 32-slot sample sees every key
 * and the order is exact.
 *
 * Evicted keys are found by peeking: a present key with information answers with its state, an evicted
 * one answers as a fresh key.
 */
import { describe, expect, it } from 'vitest';
import { LEG_IN, LEG_OUT } from '../../../src/shard/protocol.js';
import type { Kernel } from '../../../src/shard/kernel.js';
import {
  TOKEN_BUCKET, GCRA, FIXED_WINDOW, SLIDING_WINDOW, ALLOW, DENY,
  allow, check, keyHash, lim, newKernel, peek,
} from './harness.js';

const SLOW = 0; // token_bucket 10 per hour: never refills to full within these tests
const FAST_TB = 1; // token_bucket 10 / 1000 ms: full 100 ms after one token is taken
const FAST_FW = 2; // fixed_window 5 / 1000 ms
const FAST_GCRA = 3; // gcra 10 / 1000 ms
const FAST_SW = 4; // sliding_window 5 / 1000 ms: clear two windows after the last grant

const LIMITS = [
  lim(TOKEN_BUCKET, 10, 3_600_000),
  lim(TOKEN_BUCKET, 10, 1000),
  lim(FIXED_WINDOW, 5, 1000),
  lim(GCRA, 10, 1000),
  lim(SLIDING_WINDOW, 5, 1000),
];
const T0 = 1_000_000;

const small = () => newKernel(LIMITS, { maxKeys: 8 });

/** Keys whose SLOW state is gone (they peek as a full bucket), among `keys`. */
function slowKeysGone(k: Kernel, keys: number[], now: number): number[] {
  return keys.filter((key) => peek(k, key, SLOW, now).remaining === 10);
}

describe('table bound', () => {
  it('holds at most maxKeys: the 9th key evicts exactly one', () => {
    const k = small();
    for (let i = 0; i < 8; i++) expect(check(k, i, SLOW, 1, T0 + i)).toStrictEqual(allow(9, 360_000));
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 0, slots: 16 });
    expect(check(k, 8, SLOW, 1, T0 + 100)).toStrictEqual(allow(9, 360_000));
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 1 });
    // the least recently changed (key 0) went; every other key kept its state
    expect(slowKeysGone(k, [0, 1, 2, 3, 4, 5, 6, 7, 8], T0 + 100)).toStrictEqual([0]);
  });

  it('keeps evicting one per new key, in least-recently-changed order', () => {
    const k = small();
    for (let i = 0; i < 8; i++) check(k, i, SLOW, 1, T0 + i);
    for (let j = 0; j < 8; j++) {
      check(k, 8 + j, SLOW, 1, T0 + 100 + j);
      expect(k.stats()).toMatchObject({ keys: 8, evictions: j + 1 });
      expect(slowKeysGone(k, Array.from({ length: 9 + j }, (_, i) => i), T0 + 100 + j))
        .toStrictEqual(Array.from({ length: j + 1 }, (_, i) => i));
    }
  });

  it('updating a present key, peeks, and denied checks never evict', () => {
    const k = small();
    for (let i = 0; i < 8; i++) check(k, i, SLOW, 1, T0 + i);
    for (let i = 0; i < 8; i++) {
      check(k, i, SLOW, 2, T0 + 50);
      peek(k, 100 + i, SLOW, T0 + 50);
      check(k, 200 + i, SLOW, 11, T0 + 50); // never-admissible: nothing stored
    }
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 0 });
  });
});

describe('eviction order', () => {
  it.each([
    ['a token bucket refilled to full', FAST_TB, 1000],
    ['a fixed window that ended', FAST_FW, 1000],
    ['a gcra key whose TAT has passed', FAST_GCRA, 1000],
    ['a sliding window two windows old', FAST_SW, 2000],
  ])('evicts %s before any key with information', (_name, limit, later) => {
    const k = small();
    for (let i = 0; i < 8; i++) {
      const out = check(k, i, i === 5 ? limit : SLOW, 1, T0 + i);
      expect(out.code).toBe(ALLOW);
    }
    // key 0 is the least recently changed, but key 5 carries no information any more
    expect(check(k, 8, SLOW, 1, T0 + later + 5)).toStrictEqual(allow(9, 360_000));
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 1 });
    // the seven SLOW keys 0..4, 6, 7 and the new key 8 all kept their state: key 5 is the one that went
    expect(slowKeysGone(k, [0, 1, 2, 3, 4, 6, 7, 8], T0 + later + 5)).toStrictEqual([]);
  });

  it('with no idle key, the least recently CHANGED goes (peeks and denials do not count as changes)', () => {
    const k = small();
    for (let i = 0; i < 8; i++) check(k, i, SLOW, 1, T0 + i);
    expect(check(k, 0, SLOW, 1, T0 + 50)).toMatchObject({ code: ALLOW, remaining: 8 }); // key 0 changed: now recent
    expect(peek(k, 1, SLOW, T0 + 60).code).toBe(ALLOW); // a peek is not a change
    expect(check(k, 2, SLOW, 11, T0 + 70).code).toBe(2); // never: not a change
    check(k, 8, SLOW, 1, T0 + 100);
    expect(slowKeysGone(k, [0, 1, 2, 3, 4, 5, 6, 7, 8], T0 + 100)).toStrictEqual([1]);
    check(k, 9, SLOW, 1, T0 + 110);
    expect(slowKeysGone(k, [0, 2, 3, 4, 5, 6, 7, 8, 9], T0 + 110)).toStrictEqual([2]);
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 2 });
  });

  it('an over-limit key is never evicted while an idle one exists', () => {
    const k = small();
    expect(check(k, 0, SLOW, 10, T0)).toStrictEqual(allow(0, 3_600_000)); // over limit, and the oldest
    for (let i = 1; i < 7; i++) check(k, i, SLOW, 1, T0 + i);
    check(k, 7, FAST_TB, 1, T0 + 7); // idle 100 ms later
    expect(check(k, 0, SLOW, 1, T0 + 5000).code).toBe(DENY);
    check(k, 8, SLOW, 1, T0 + 5000);
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 1 });
    // key 0 is still over its limit (an evicted key would be admitted as fresh)
    expect(check(k, 0, SLOW, 1, T0 + 5000).code).toBe(DENY);
    expect(slowKeysGone(k, [1, 2, 3, 4, 5, 6, 8], T0 + 5000)).toStrictEqual([]);
  });

  it('several idle keys go before the informative ones, whatever their age', () => {
    const k = small();
    for (let i = 0; i < 8; i++) check(k, i, i % 2 === 0 ? SLOW : FAST_FW, 1, T0 + 500 + i);
    // at T0 + 1500 the odd keys' window (k = 1000) is over
    for (let j = 0; j < 4; j++) check(k, 100 + j, SLOW, 1, T0 + 1500 + j);
    expect(k.stats()).toMatchObject({ keys: 8, evictions: 4 });
    expect(slowKeysGone(k, [0, 2, 4, 6, 100, 101, 102, 103], T0 + 1600)).toStrictEqual([]);
  });
});

describe('table geometry', () => {
  it.each([1, 2, 3, 7, 8, 9, 100, 983, 984, 1000, 4096, 65_536, 1_000_000])('maxKeys %i: slots a power of two, above maxKeys, load ≤ 96%%', (maxKeys) => {
    const k = newKernel(LIMITS, { maxKeys, maxBatch: 1 });
    const { slots } = k.stats();
    expect(Number.isInteger(Math.log2(slots))).toBe(true);
    expect(slots).toBeGreaterThan(maxKeys);
    expect(maxKeys * 100).toBeLessThanOrEqual(slots * 96);
    expect(slots).toBe(Math.max(2, 2 ** Math.ceil(Math.log2(maxKeys + 1)) * (maxKeys * 100 > 2 ** Math.ceil(Math.log2(maxKeys + 1)) * 96 ? 2 : 1)));
  });

  it('maxKeys 1,000,000 → 2^20 slots of 32 bytes: ≤ 40 bytes per key for the table', () => {
    const k = newKernel(LIMITS, { maxKeys: 1_000_000, maxBatch: 1 });
    const { slots } = k.stats();
    expect(slots).toBe(2 ** 20);
    expect((slots * 32) / 1e6).toBeLessThanOrEqual(40);
  });

  // BUG: init() computes the table's byte size as <usize>slotCount * SLOT_SIZE in 32-bit arithmetic. From
  // maxKeys 64,424,510 up (2^27 slots or more) the product wraps to exactly 0, heap.alloc(0) succeeds, and the
  // kernel reports 2^27 slots over 4 MiB of memory: the "table" overlaps the other regions and inserts trap
  // with "memory access out of bounds" (every check of createLimiter({maxKeys: 1e8}) rejects SHARD_FAILED).
  // createLimiter accepts maxKeys up to 2^30 (for which stats().slots even reads −2^31: a u32 export).
  // (From 16,106,128 to 64,424,509 the allocation is ≥ 1 GiB and init aborts: "sluice kernel aborted".)
  it('a maxKeys whose table cannot fit in 32-bit memory is refused, not accepted with a table that does not exist', () => {
    let k: Kernel;
    try {
      k = newKernel(LIMITS, { maxKeys: 100_000_000, maxBatch: 1 });
    } catch {
      return; // refused at init: fine
    }
    const s = k.stats();
    expect(s.slots * 32, `slots ${s.slots} × 32 B vs ${s.memoryBytes} B of memory`).toBeLessThanOrEqual(s.memoryBytes);
  });
});

// -------------------------------------------------------------------------------------------------------
// Many random keys at a full table against a shadow model
// -------------------------------------------------------------------------------------------------------

interface ShadowLimit {
  kind: 'tb' | 'fw';
  L: number;
  P: number;
  B: number;
}

const RANDOM_LIMITS: ShadowLimit[] = [
  { kind: 'tb', L: 5, P: 60_000, B: 5 }, // informative for a minute
  { kind: 'tb', L: 5, P: 500, B: 5 }, // idle within 500 ms
  { kind: 'fw', L: 3, P: 700, B: 3 },
  { kind: 'fw', L: 3, P: 30_000, B: 3 },
];

/** The shadow's answer, written by shadowEval: the row, and the new state when the check stores one. */
const want = new Float64Array(4);
let nextW = 0;
let nextLast = 0;
let stores = false;

/**
 * The expected row for a check of cost c at `now` given the shadow state (has = false: fresh key), into
 * `want`; sets `stores` and (nextW, nextLast) when an admitted check with c > 0 changes the state.
 * tb: w = x = tokens·P; fw: w = count of the window holding `last`.
 */
function shadowEval(l: ShadowLimit, has: boolean, w: number, last: number, c: number, now: number): void {
  const t = has && last > now ? last : now;
  stores = false;
  if (l.kind === 'tb') {
    const BP = l.B * l.P;
    const x = has ? Math.min(BP, w + (t - last) * l.L) : BP;
    if (c > l.B) {
      want[0] = 2; want[1] = Math.floor(x / l.P); want[2] = Math.ceil((BP - x) / l.L); want[3] = -1;
    } else if (c * l.P <= x) {
      const after = x - c * l.P;
      want[0] = 0; want[1] = Math.floor(after / l.P); want[2] = Math.ceil((BP - after) / l.L); want[3] = 0;
      if (c > 0) { stores = true; nextW = after; nextLast = t; }
    } else {
      want[0] = 1; want[1] = Math.floor(x / l.P); want[2] = Math.ceil((BP - x) / l.L); want[3] = Math.ceil((c * l.P - x) / l.L);
    }
    return;
  }
  const k = Math.floor(t / l.P);
  const count = has && Math.floor(last / l.P) === k ? w : 0;
  const untilEnd = (k + 1) * l.P - t;
  if (c > l.L) {
    want[0] = 2; want[1] = l.L - count; want[2] = untilEnd; want[3] = -1;
  } else if (c <= l.L - count) {
    want[0] = 0; want[1] = l.L - count - c; want[2] = untilEnd; want[3] = 0;
    if (c > 0) { stores = true; nextW = count + c; nextLast = t; }
  } else {
    want[0] = 1; want[1] = l.L - count; want[2] = untilEnd; want[3] = untilEnd;
  }
}

const rowOf = (a: ArrayLike<number>, at = 0): string => `[${a[at]}, ${a[at + 1]}, ${a[at + 2]}, ${a[at + 3]}]`;

/**
 * `ops` single checks over key ids [0, pool) (half from a hot eighth) with monotone time, each compared with
 * the shadow exactly. After every eviction all shadow keys are peeked in one batch: a key that answers as a
 * fresh key was evicted (or is idle, which answers alike) and leaves the shadow; at most one key with
 * information may be lost per eviction. Every 1024 checks and at the end, every shadow key's peek must
 * equal its shadow state exactly.
 */
function randomRun(maxKeys: number, ops: number, pool: number, seed: number): { evictions: number; scans: number; dropped: number } {
  const k = newKernel(RANDOM_LIMITS.map((l) => lim(l.kind === 'tb' ? TOKEN_BUCKET : FIXED_WINDOW, l.L, l.P, l.B)), { maxKeys, maxBatch: 4096 });
  expect(pool).toBeLessThanOrEqual(4096);
  let s = seed >>> 0;
  const rnd = (n: number): number => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s % n;
  };
  const limitOf = (key: number): number => key % RANDOM_LIMITS.length;
  const lo = new Float64Array(pool), hi = new Float64Array(pool);
  for (let i = 0; i < pool; i++) [lo[i], hi[i]] = keyHash(i);
  // the shadow: state per key id, a dense list of the ids it holds, and their peek legs, kept in step
  const has = new Uint8Array(pool), sw = new Float64Array(pool), slast = new Float64Array(pool);
  const list = new Int32Array(pool), pos = new Int32Array(pool);
  const peekLegs = new Float64Array(pool * LEG_IN);
  let held = 0;
  const add = (key: number): void => {
    if (has[key]) return;
    has[key] = 1;
    pos[key] = held;
    list[held] = key;
    peekLegs.set([lo[key], hi[key], limitOf(key), 0], held * LEG_IN);
    held++;
  };
  const drop = (key: number): void => {
    if (!has[key]) return;
    has[key] = 0;
    const at = pos[key];
    const moved = list[--held];
    list[at] = moved;
    pos[moved] = at;
    peekLegs.copyWithin(at * LEG_IN, held * LEG_IN, held * LEG_IN + LEG_IN);
  };
  const failures: string[] = [];
  const freshRows = new Float64Array(RANDOM_LIMITS.length * 4);
  let now = 5_000_000;
  let evictions = 0, size = 0, scans = 0, dropped = 0;

  /** Peeks every shadow key; `exact`: each must equal its shadow state (or fresh, counted as lost). */
  const scan = (evictedSince: number, exact: boolean): void => {
    scans++;
    RANDOM_LIMITS.forEach((l, i) => {
      shadowEval(l, false, 0, 0, 0, now);
      freshRows.set(want, i * 4);
    });
    const n = held;
    k.legIn.set(peekLegs.subarray(0, n * LEG_IN));
    k.decide(n, now);
    const out = k.legOut;
    let gone = 0;
    // downwards: drop() moves the last entry (already visited) into the freed place
    for (let i = n - 1; i >= 0; i--) {
      const key = list[i], r = i * LEG_OUT, f = limitOf(key) * 4;
      const isFresh = out[r] === freshRows[f] && out[r + 1] === freshRows[f + 1] && out[r + 2] === freshRows[f + 2] && out[r + 3] === freshRows[f + 3];
      if (!isFresh && !exact) continue;
      shadowEval(RANDOM_LIMITS[limitOf(key)], true, sw[key], slast[key], 0, now);
      const isWant = out[r] === want[0] && out[r + 1] === want[1] && out[r + 2] === want[2] && out[r + 3] === want[3];
      const wantFresh = want[0] === freshRows[f] && want[1] === freshRows[f + 1] && want[2] === freshRows[f + 2] && want[3] === freshRows[f + 3];
      if (isFresh) {
        drop(key); // idle (answers as fresh from now on), or evicted
        if (!wantFresh) gone++;
      } else if (!isWant && failures.length < 10) {
        failures.push(`scan at ${now}: key ${key} peeks ${rowOf(out, r)}, shadow ${rowOf(want)}`);
      }
    }
    dropped += gone;
    if (gone > evictedSince) failures.push(`scan at ${now}: ${gone} keys with information lost, ${evictedSince} evicted`);
  };

  let evictedSinceScan = 0;
  for (let op = 0; op < ops && failures.length === 0; op++) {
    now += rnd(5);
    const key = rnd(2) === 0 ? rnd(Math.floor(pool / 8)) : rnd(pool);
    const l = RANDOM_LIMITS[limitOf(key)];
    const r = rnd(20);
    const cost = r < 2 ? 0 : r < 18 ? 1 + rnd(2) : 3 + rnd(4);
    const wasInfo = has[key] === 1;
    shadowEval(l, wasInfo, sw[key], slast[key], cost, now);
    k.legIn[0] = lo[key]; k.legIn[1] = hi[key]; k.legIn[2] = limitOf(key); k.legIn[3] = cost;
    k.decide(1, now);
    const out = k.legOut;
    if (out[0] !== want[0] || out[1] !== want[1] || out[2] !== want[2] || out[3] !== want[3]) {
      failures.push(`op ${op} key ${key} cost ${cost} t ${now}: kernel ${rowOf(out)}, shadow ${rowOf(want)}`);
      break;
    }
    if (stores) { add(key); sw[key] = nextW; slast[key] = nextLast; }
    const st = k.stats();
    const dEv = st.evictions - evictions;
    const inserted = st.keys - size + dEv;
    if (st.keys > maxKeys) failures.push(`op ${op}: ${st.keys} keys > maxKeys ${maxKeys}`);
    if (dEv < 0 || dEv > 1 || inserted < 0 || inserted > 1) failures.push(`op ${op}: Δkeys ${st.keys - size}, Δevictions ${dEv}`);
    if (!stores && inserted !== 0) failures.push(`op ${op}: a check that stored nothing inserted a key`);
    if (wasInfo && inserted !== 0) failures.push(`op ${op}: updating a present key inserted one`);
    if (dEv > 0 && size < maxKeys) failures.push(`op ${op}: evicted below the bound (${size} keys)`);
    evictions = st.evictions;
    size = st.keys;
    evictedSinceScan += dEv;
    const exact = op % 1024 === 1023;
    if (dEv > 0 || exact) {
      scan(evictedSinceScan, exact);
      evictedSinceScan = 0;
    }
  }
  scan(evictedSinceScan, true);
  expect(failures).toStrictEqual([]);
  expect(size).toBe(maxKeys);
  expect(held).toBeLessThanOrEqual(size);
  return { evictions, scans, dropped };
}

describe('random keys at a full table vs a shadow model', () => {
  it('maxKeys 1000 (2048 slots), 100,000 checks over 4,000 keys: every surviving key keeps its exact state', () => {
    const r = randomRun(1000, 100_000, 4000, 0xc0ffee);
    expect(r.evictions).toBeGreaterThan(10_000);
    expect(r.dropped).toBeGreaterThan(1000); // informative keys were evicted, and seen to be gone
  }, 120_000); // a few seconds on an idle machine; the shadow scans are CPU-bound, so a loaded one needs room

  it('maxKeys 983 (1024 slots: the 96% load limit), 50,000 checks over 3,000 keys', () => {
    const k = newKernel(LIMITS, { maxKeys: 983, maxBatch: 1 });
    expect(k.stats().slots).toBe(1024);
    const r = randomRun(983, 50_000, 3000, 0xbadc0de);
    expect(r.evictions).toBeGreaterThan(10_000);
    expect(r.dropped).toBeGreaterThan(1000);
  }, 120_000);
});
