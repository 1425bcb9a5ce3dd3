/**
 * The engine scenario's subjects (bench/scenarios/engine.ts), each set up in its own resident child: the raw
 * kernel, `createLimiter` (check or checkSync, shards 0 or 2), its concurrency leases, rate-limiter-flexible's
 * RateLimiterMemory and a plain JS Map bucket, every one filled with its key set before timing and stepped a
 * batch of checks at a time. Also the policy they share and the kernel's variants (the memory jobs use them).
 */
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createLimiter } from '../../src/index.js';
import type { Decision, Limiter } from '../../src/index.js';
import { Kernel, kernelModule } from '../../src/shard/kernel.js';
import { DELAY_SHIFT, GROUP_SHIFT, LEG_IN, LEG_OUT, CODE_ALLOW, type KernelLimit } from '../../src/shard/protocol.js';
import { MapBucket } from '../baselines/map-bucket.js';
import { keySequence, xorshift32 } from '../lib/measure.js';

/** Checks per batch (one event-loop turn, one kernel call). */
export const BATCH = 1024;
/** Indices into the key set, cycled: 1 Mi entries (4 MiB). */
const SEQ_LEN = 1 << 20;

/**
 * One policy for every contender: a token bucket so generous that every check is admitted (1e9 tokens per
 * minute, bucket of 1e9): all contenders take their "admit" path, which is the common one, and
 * rate-limiter-flexible never rejects a promise. The fraction admitted is reported as a check.
 */
export const LIMIT = 1_000_000_000;
export const PERIOD_MS = 60_000;
export const BURST = 1_000_000_000;
const TOKEN_BUCKET: KernelLimit = { algorithmCode: 0, limit: LIMIT, periodMs: PERIOD_MS, burst: BURST };

/**
 * The other algorithms' kernel rows (issue 16), under the same load: a calendar month in Europe/Berlin with
 * the same 1e9 limit (every check admitted), and a sliding log of 16 per minute with 16-entry blocks (the log
 * fills: most checks scan a full ring and are denied, its worst case), its arena sized for every key.
 */
const KERNEL_VARIANTS: Record<string, { limit: KernelLimit; logEntries?: number; maxDelayMs?: number }> = {
  calendar: { limit: { algorithmCode: 4, limit: LIMIT, periodMs: 30 * 86_400_000, burst: LIMIT, calendar: { unit: 'mo', timeZone: 'Europe/Berlin' } } },
  slog: { limit: { algorithmCode: 5, limit: 16, periodMs: PERIOD_MS, burst: 16 }, logEntries: 16 },
  // onLimit: delay: a bucket of 16 per minute whose checks may wait up to a minute: each key admits its 16,
  // then 16 more in debt with delays, then denies (its worst case: every check computes a wait)
  delay: { limit: { algorithmCode: 0, limit: 16, periodMs: PERIOD_MS, burst: 16 }, maxDelayMs: PERIOD_MS },
};

/**
 * A decide-only kernel (as a shard worker's: no key region) for `keys` keys, with the token bucket or a
 * variant's limit of {@link KERNEL_VARIANTS} (and then a log arena for every key).
 */
export function benchKernel(variant: string | undefined, keys: number): Kernel {
  const v = variant === undefined ? undefined : KERNEL_VARIANTS[variant];
  const limits = { limits: [v?.limit ?? TOKEN_BUCKET] };
  const log = v?.logEntries === undefined ? {} : { logKeys: keys, logEntries: v.logEntries };
  return new Kernel(kernelModule(), { maxKeys: keys, maxBatch: BATCH, keyBytes: 0, ...limits, ...log });
}

/** The kernel's leg word for a variant: limit 0, a group of one leg, and the delay variant's maxDelayMs. */
function legWord(variant: string | undefined): number {
  return GROUP_SHIFT + (variant === undefined ? 0 : (KERNEL_VARIANTS[variant].maxDelayMs ?? 0) * DELAY_SHIFT);
}

/**
 * Writes rows [0, n) of `k`'s input with key hashes `lo[from + i]`, `hi[from + i]` (wrapping at their end),
 * each costing 1 under `word`, and decides them now.
 */
export function decideHashes(k: Kernel, lo: Uint32Array, hi: Uint32Array, from: number, n: number, word: number): void {
  const inp = k.legIn;
  const len = lo.length;
  for (let i = 0, j = from; i < n; i++, j = j + 1 === len ? 0 : j + 1) {
    const r = i * LEG_IN;
    inp[r] = lo[j];
    inp[r + 1] = hi[j];
    inp[r + 2] = word;
    inp[r + 3] = 1;
  }
  k.decide(n, Date.now());
}

/**
 * Concurrency leases (issue 16): `limiter.acquire` then `limiter.release` of the same lease, through
 * createLimiter (shards 0: leases live on the calling thread whatever `shards` says). Every key holds one
 * lease taken while filling, so the table holds every key; limit 2 leaves room for the timed one.
 */
export const LEASES = { bench: { algorithm: 'concurrency', limit: 2, leaseTtl: 2 ** 31 - 1 } } as const;

export type Impl = 'kernel' | 'limiter' | 'rlf' | 'map' | 'leases';

/** A throughput subject: what it is, and the keys it is filled with. */
export interface ThroughputSpec {
  kind: 'throughput';
  impl: Impl;
  shards: number;
  /** A kernel variant of KERNEL_VARIANTS (default: the token bucket). */
  variant?: string;
  /** limiter only: checkSync() instead of check() (1,024 calls per step, no promise). */
  sync?: boolean;
  keys: number;
}

/** What a subject counted since its last reset. */
export interface Counts {
  admitted: number;
  checked: number;
  evictions?: number;
  keysHeld?: number;
}

/** A filled subject: `step` does one batch; the counters count from the last `reset()`. */
export interface Prepared {
  step: () => number | Promise<number>;
  counts: () => Promise<Counts>;
  reset: () => void;
  close?: () => Promise<void>;
}

/** The admitted and checked decisions of a subject since its last reset. */
interface Tally {
  admitted: number;
  checked: number;
}

export function keyStrings(n: number): string[] {
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) out[i] = `k${i}`;
  return out;
}

/** Random 64-bit key hashes as (lo, hi) u32 pairs, never (0, 0) (the kernel's empty-slot mark). */
export function keyHashes(n: number): { lo: Uint32Array; hi: Uint32Array } {
  const lo = new Uint32Array(n), hi = new Uint32Array(n);
  const next = xorshift32(0xc0ffee);
  for (let i = 0; i < n; i++) {
    lo[i] = next() | 1;
    hi[i] = next();
  }
  return { lo, hi };
}

/** Sets up the subject `s` in this process, filled with its keys. */
export async function prepare(s: ThroughputSpec): Promise<Prepared> {
  const seq = keySequence(s.keys, SEQ_LEN);
  const t: Tally = { admitted: 0, checked: 0 };
  switch (s.impl) {
    case 'kernel': return kernelSubject(s, seq, t);
    case 'limiter': return limiterSubject(s, seq, t);
    case 'leases': return leaseSubject(s, seq, t);
    case 'rlf': return rlfSubject(s, seq, t);
    case 'map': return mapSubject(s, seq, t);
  }
}

/**
 * A subject that decides a batch of keys through `run`, which reads check i's key index as `next(i)`: each key
 * once first (unless there is one key), then, a step at a time, the next BATCH indices of the sequence.
 */
async function keyedSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally, run: (next: (i: number) => number) => number | Promise<number>,
  rest: Pick<Prepared, 'counts' | 'close'>): Promise<Prepared> {
  if (s.keys > 1) for (let base = 0; base < s.keys; base += BATCH) await run((i) => (base + i) % s.keys);
  const mask = SEQ_LEN - 1;
  let pos = 0;
  const next = (): number => {
    const key = seq[pos];
    pos = (pos + 1) & mask;
    return key;
  };
  return { step: () => run(next), reset: () => (t.admitted = t.checked = 0), ...rest };
}

function kernelSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally): Prepared {
  const k = benchKernel(s.variant, Math.max(s.keys, 1024));
  const { lo, hi } = keyHashes(s.keys);
  const word = legWord(s.variant);
  // The kernel takes hashes (the front hashes keys before it): resolve the key sequence to a stream of
  // hashes up front, so the loop reads it sequentially rather than paying two cache misses a check.
  const seqLo = new Uint32Array(SEQ_LEN), seqHi = new Uint32Array(SEQ_LEN);
  for (let i = 0; i < SEQ_LEN; i++) {
    seqLo[i] = lo[seq[i]];
    seqHi[i] = hi[seq[i]];
  }
  const run = (hLo: Uint32Array, hHi: Uint32Array, from: number): number => {
    decideHashes(k, hLo, hHi, from, BATCH, word);
    const out = k.legOut;
    let a = 0;
    for (let i = 0; i < BATCH; i++) if (out[i * LEG_OUT] === CODE_ALLOW) a++;
    t.admitted += a;
    t.checked += BATCH;
    return BATCH;
  };
  if (s.keys > 1) for (let base = 0; base < s.keys; base += BATCH) run(lo, hi, base);
  let pos = 0;
  return {
    step: () => {
      const from = pos;
      pos = (pos + BATCH) & (SEQ_LEN - 1);
      return run(seqLo, seqHi, from);
    },
    reset: () => (t.admitted = t.checked = 0),
    counts: async () => {
      const st = k.stats();
      return { ...t, evictions: st.evictions, keysHeld: st.keys };
    },
  };
}

async function limiterSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally): Promise<Prepared> {
  const keys = keyStrings(s.keys);
  // shards 2 split maxKeys between them; leave 5% so an uneven split does not evict.
  const maxKeys = s.shards === 0 ? Math.max(s.keys, 1024) : Math.ceil(Math.max(s.keys, 1024) * 1.05);
  const lim: Limiter = await createLimiter({
    policies: { bench: { algorithm: 'token_bucket', limit: LIMIT, period: PERIOD_MS, burst: BURST } },
    shards: s.shards,
    maxKeys,
  });
  const rest = {
    counts: async (): Promise<Counts> => {
      const st = await lim.stats();
      return { ...t, evictions: st.evictions, keysHeld: st.keys };
    },
    close: () => lim.close(),
  };
  if (s.sync === true) {
    return keyedSubject(s, seq, t, (next) => {
      let a = 0;
      for (let i = 0; i < BATCH; i++) if (lim.checkSync({ policy: 'bench', key: keys[next(i)], cost: 1 }).allowed) a++;
      t.admitted += a;
      t.checked += BATCH;
      return BATCH;
    }, rest);
  }
  return keyedSubject(s, seq, t, async (next) => {
    const ps = new Array<Promise<Decision>>(BATCH);
    for (let i = 0; i < BATCH; i++) ps[i] = lim.check({ policy: 'bench', key: keys[next(i)], cost: 1 });
    const ds = await Promise.all(ps);
    for (const d of ds) if (d.allowed) t.admitted++;
    t.checked += BATCH;
    return BATCH;
  }, rest);
}

async function leaseSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally): Promise<Prepared> {
  const keys = keyStrings(s.keys);
  const lim = await createLimiter({ policies: LEASES as never, shards: 0, maxKeys: Math.max(s.keys, 1024) });
  // one lease held by every key (untimed), so the table holds them all while the timed pairs run
  for (let base = 0; base < s.keys; base += BATCH) {
    const ps: Array<Promise<unknown>> = [];
    for (let i = base; i < Math.min(s.keys, base + BATCH); i++) ps.push(lim.acquire({ policy: 'bench', key: keys[i] }));
    await Promise.all(ps);
  }
  // one pair (acquire, then release of that lease) per check slot: a batch of BATCH / 2 pairs, so a step
  // makes as many limiter calls as the other subjects' batches; the rate is pairs per second
  const PAIRS = BATCH / 2;
  const mask = SEQ_LEN - 1;
  let pos = 0;
  const step = async (): Promise<number> => {
    const ks = new Array<string>(PAIRS);
    const ps = new Array<Promise<{ allowed: boolean; leaseId: string | null }>>(PAIRS);
    for (let i = 0; i < PAIRS; i++) {
      ks[i] = keys[seq[pos]];
      pos = (pos + 1) & mask;
      ps[i] = lim.acquire({ policy: 'bench', key: ks[i] });
    }
    const ds = await Promise.all(ps);
    const rs: Array<Promise<unknown>> = [];
    for (let i = 0; i < PAIRS; i++) {
      const d = ds[i];
      if (!d.allowed) continue;
      t.admitted++;
      rs.push(lim.release({ policy: 'bench', key: ks[i], leaseId: d.leaseId! }));
    }
    await Promise.all(rs);
    t.checked += PAIRS;
    return PAIRS;
  };
  return {
    step,
    reset: () => (t.admitted = t.checked = 0),
    counts: async () => ({ ...t }),
    close: () => lim.close(),
  };
}

function rlfSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally): Promise<Prepared> {
  const keys = keyStrings(s.keys);
  const rl = new RateLimiterMemory({ points: LIMIT, duration: PERIOD_MS / 1000 });
  return keyedSubject(s, seq, t, async (next) => {
    const ps = new Array<Promise<unknown>>(BATCH);
    for (let i = 0; i < BATCH; i++) ps[i] = rl.consume(keys[next(i)]);
    await Promise.all(ps); // rejects on a denial: none are expected (see LIMIT)
    t.admitted += BATCH;
    t.checked += BATCH;
    return BATCH;
  }, { counts: async () => ({ ...t }) });
}

function mapSubject(s: ThroughputSpec, seq: Uint32Array, t: Tally): Promise<Prepared> {
  const keys = keyStrings(s.keys);
  const mb = new MapBucket(LIMIT, PERIOD_MS, BURST);
  return keyedSubject(s, seq, t, (next) => {
    const now = Date.now();
    let a = 0;
    for (let i = 0; i < BATCH; i++) if (mb.take(keys[next(i)], 1, now) >= 0) a++;
    t.admitted += a;
    t.checked += BATCH;
    return BATCH;
  }, { counts: async () => ({ ...t, keysHeld: mb.size }) });
}
