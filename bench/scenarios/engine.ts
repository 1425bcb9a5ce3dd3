/**
 * Engine scenario: token-bucket decisions per second with 1 hot key, 100k keys and 1M keys, for the raw
 * sluice kernel, `createLimiter` (shards 0 and 2), rate-limiter-flexible's RateLimiterMemory and a plain JS
 * Map bucket; and bytes per key at 1M keys. Each measurement runs in its own child process.
 */
import { fileURLToPath } from 'node:url';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createLimiter } from '../../src/index.js';
import type { Decision } from '../../src/index.js';
import { Kernel, kernelModule } from '../../src/shard/kernel.js';
import { GROUP_SHIFT, LEG_IN, LEG_OUT, CODE_ALLOW, type KernelLimit } from '../../src/shard/protocol.js';
import { MapBucket } from '../baselines/map-bucket.js';
import { alternate, roundMain, startAll, startRoundChild, stopAll } from '../lib/ab.js';
import { isChildEntry, jobMain, runJob } from '../lib/harness.js';
import { fullGc, keySequence, summary, timedRound, xorshift32 } from '../lib/measure.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);

/** Checks per batch (one event-loop turn, one kernel call). */
const BATCH = 1024;
/** Indices into the key set, cycled: 1 Mi entries (4 MiB). */
const SEQ_LEN = 1 << 20;

/**
 * One policy for every contender: a token bucket so generous that every check is admitted (1e9 tokens per
 * minute, bucket of 1e9): all contenders take their "admit" path, which is the common one, and
 * rate-limiter-flexible never rejects a promise. The fraction admitted is reported as a check.
 */
const LIMIT = 1_000_000_000;
const PERIOD_MS = 60_000;
const BURST = 1_000_000_000;
const TOKEN_BUCKET: KernelLimit = { algorithmCode: 0, limit: LIMIT, periodMs: PERIOD_MS, burst: BURST };

/**
 * The other algorithms' kernel rows (issue 16), under the same load: a calendar month in Europe/Berlin with
 * the same 1e9 limit (every check admitted), and a sliding log of 16 per minute with 16-entry blocks (the log
 * fills: most checks scan a full ring and are denied, its worst case), its arena sized for every key.
 */
const KERNEL_VARIANTS: Record<string, { limit: KernelLimit; logEntries?: number }> = {
  calendar: { limit: { algorithmCode: 4, limit: LIMIT, periodMs: 30 * 86_400_000, burst: LIMIT, calendar: { unit: 'mo', timeZone: 'Europe/Berlin' } } },
  slog: { limit: { algorithmCode: 5, limit: 16, periodMs: PERIOD_MS, burst: 16 }, logEntries: 16 },
};

/** Kernel options for a spec: the token bucket, or a variant's limit (and a log arena for every key). */
function kernelOpts(variant: string | undefined, keys: number): { limits: KernelLimit[]; logKeys?: number; logEntries?: number } {
  const v = variant === undefined ? undefined : KERNEL_VARIANTS[variant];
  if (v === undefined) return { limits: [TOKEN_BUCKET] };
  return v.logEntries === undefined ? { limits: [v.limit] } : { limits: [v.limit], logKeys: keys, logEntries: v.logEntries };
}

type Impl = 'kernel' | 'limiter' | 'rlf' | 'map' | 'leases';

/**
 * Concurrency leases (issue 16): `limiter.acquire` then `limiter.release` of the same lease, through
 * createLimiter (shards 0: leases live on the calling thread whatever `shards` says). Every key holds one
 * lease taken while filling, so the table holds every key; limit 2 leaves room for the timed one.
 */
const LEASES = { bench: { algorithm: 'concurrency', limit: 2, leaseTtl: 2 ** 31 - 1 } } as const;

interface ThroughputSpec {
  kind: 'throughput';
  impl: Impl;
  shards: number;
  /** A kernel variant of KERNEL_VARIANTS (default: the token bucket). */
  variant?: string;
  /** limiter only: checkSync() instead of check() (1,024 calls per step, no promise). */
  sync?: boolean;
  keys: number;
}

/** One timed round of a resident throughput child (warm-up first when `warmupMs` > 0). */
interface RoundQ {
  ms: number;
  warmupMs: number;
  maxSteps: number;
}

interface RoundR {
  rate: number;
  admitted: number;
  checked: number;
  evictions?: number;
  keysHeld?: number;
}

interface MemorySpec {
  kind: 'memory';
  impl: 'kernel' | 'rlf' | 'map' | 'leases';
  keys: number;
  variant?: string;
}

type Spec = ThroughputSpec | MemorySpec;

/** A filled subject: `step` does one batch; the counters count from the last `reset()`. */
interface Prepared {
  step: () => number | Promise<number>;
  counts: () => Promise<{ admitted: number; checked: number; evictions?: number; keysHeld?: number }>;
  reset: () => void;
  close?: () => Promise<void>;
}

interface MemoryResult {
  bytesPerKey: number;
  keysHeld: number;
  detail: Record<string, number>;
}

function keyStrings(n: number): string[] {
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) out[i] = `k${i}`;
  return out;
}

/** Random 64-bit key hashes as (lo, hi) u32 pairs, never (0, 0) (the kernel's empty-slot mark). */
function keyHashes(n: number): { lo: Uint32Array; hi: Uint32Array } {
  const lo = new Uint32Array(n), hi = new Uint32Array(n);
  const next = xorshift32(0xc0ffee);
  for (let i = 0; i < n; i++) {
    lo[i] = next() | 1;
    hi[i] = next();
  }
  return { lo, hi };
}

// ---------------------------------------------------------------------------------------------- children

async function prepare(s: ThroughputSpec): Promise<Prepared> {
  const seq = keySequence(s.keys, SEQ_LEN);
  const mask = SEQ_LEN - 1;
  let pos = 0;
  let admitted = 0;
  let checked = 0;
  const prefill = s.keys > 1;

  switch (s.impl) {
    case 'kernel': {
      const k = new Kernel(kernelModule(), {
        maxKeys: Math.max(s.keys, 1024),
        maxBatch: BATCH,
        keyBytes: 0, // decides only, as a shard worker's kernel: no key region
        ...kernelOpts(s.variant, Math.max(s.keys, 1024)),
      });
      const { lo, hi } = keyHashes(s.keys);
      // The kernel takes hashes (the front hashes keys before it): resolve the key sequence to a stream of
      // hashes up front, so the loop reads it sequentially rather than paying two cache misses a check.
      const seqLo = new Uint32Array(SEQ_LEN), seqHi = new Uint32Array(SEQ_LEN);
      for (let i = 0; i < SEQ_LEN; i++) {
        seqLo[i] = lo[seq[i]];
        seqHi[i] = hi[seq[i]];
      }
      const run = (hLo: Uint32Array, hHi: Uint32Array, from: number): number => {
        const inp = k.legIn, out = k.legOut;
        const n = hLo.length;
        for (let i = 0, j = from; i < BATCH; i++, j = j + 1 === n ? 0 : j + 1) {
          const r = i * LEG_IN;
          inp[r] = hLo[j];
          inp[r + 1] = hHi[j];
          inp[r + 2] = 0 + GROUP_SHIFT; // limit 0, a group of one leg
          inp[r + 3] = 1;
        }
        k.decide(BATCH, Date.now());
        let a = 0;
        for (let i = 0; i < BATCH; i++) if (out[i * LEG_OUT] === CODE_ALLOW) a++;
        admitted += a;
        checked += BATCH;
        return BATCH;
      };
      if (prefill) for (let base = 0; base < s.keys; base += BATCH) run(lo, hi, base);
      return {
        step: () => {
          const from = pos;
          pos = (pos + BATCH) & mask;
          return run(seqLo, seqHi, from);
        },
        reset: () => (admitted = checked = 0),
        counts: async () => {
          const st = k.stats();
          return { admitted, checked, evictions: st.evictions, keysHeld: st.keys };
        },
      };
    }

    case 'limiter': {
      const keys = keyStrings(s.keys);
      // shards 2 split maxKeys between them; leave 5% so an uneven split does not evict.
      const maxKeys = s.shards === 0 ? Math.max(s.keys, 1024) : Math.ceil(Math.max(s.keys, 1024) * 1.05);
      const lim = await createLimiter({
        policies: { bench: { algorithm: 'token_bucket', limit: LIMIT, period: PERIOD_MS, burst: BURST } },
        shards: s.shards,
        maxKeys,
      });
      if (s.sync === true) {
        const runSync = (next: (i: number) => number): number => {
          let a = 0;
          for (let i = 0; i < BATCH; i++) if (lim.checkSync({ policy: 'bench', key: keys[next(i)], cost: 1 }).allowed) a++;
          admitted += a;
          checked += BATCH;
          return BATCH;
        };
        if (prefill) for (let base = 0; base < s.keys; base += BATCH) runSync((i) => (base + i) % s.keys);
        return {
          step: () => runSync(() => {
            const key = seq[pos];
            pos = (pos + 1) & mask;
            return key;
          }),
          reset: () => (admitted = checked = 0),
          counts: async () => {
            const st = await lim.stats();
            return { admitted, checked, evictions: st.evictions, keysHeld: st.keys };
          },
          close: () => lim.close(),
        };
      }
      const run = async (next: (i: number) => number): Promise<number> => {
        const ps = new Array<Promise<Decision>>(BATCH);
        for (let i = 0; i < BATCH; i++) ps[i] = lim.check({ policy: 'bench', key: keys[next(i)], cost: 1 });
        const ds = await Promise.all(ps);
        for (const d of ds) if (d.allowed) admitted++;
        checked += BATCH;
        return BATCH;
      };
      if (prefill) for (let base = 0; base < s.keys; base += BATCH) await run((i) => (base + i) % s.keys);
      return {
        step: () => run(() => {
          const key = seq[pos];
          pos = (pos + 1) & mask;
          return key;
        }),
        reset: () => (admitted = checked = 0),
        counts: async () => {
          const st = await lim.stats();
          return { admitted, checked, evictions: st.evictions, keysHeld: st.keys };
        },
        close: () => lim.close(),
      };
    }

    case 'leases': {
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
          admitted++;
          rs.push(lim.release({ policy: 'bench', key: ks[i], leaseId: d.leaseId! }));
        }
        await Promise.all(rs);
        checked += PAIRS;
        return PAIRS;
      };
      return {
        step,
        reset: () => (admitted = checked = 0),
        counts: async () => ({ admitted, checked }),
        close: () => lim.close(),
      };
    }

    case 'rlf': {
      const keys = keyStrings(s.keys);
      const rl = new RateLimiterMemory({ points: LIMIT, duration: PERIOD_MS / 1000 });
      const run = async (next: (i: number) => number): Promise<number> => {
        const ps = new Array<Promise<unknown>>(BATCH);
        for (let i = 0; i < BATCH; i++) ps[i] = rl.consume(keys[next(i)]);
        await Promise.all(ps); // rejects on a denial: none are expected (see LIMIT)
        admitted += BATCH;
        checked += BATCH;
        return BATCH;
      };
      if (prefill) for (let base = 0; base < s.keys; base += BATCH) await run((i) => (base + i) % s.keys);
      return {
        step: () => run(() => {
          const key = seq[pos];
          pos = (pos + 1) & mask;
          return key;
        }),
        reset: () => (admitted = checked = 0),
        counts: async () => ({ admitted, checked }),
      };
    }

    case 'map': {
      const keys = keyStrings(s.keys);
      const mb = new MapBucket(LIMIT, PERIOD_MS, BURST);
      const run = (next: (i: number) => number): number => {
        const now = Date.now();
        let a = 0;
        for (let i = 0; i < BATCH; i++) if (mb.take(keys[next(i)], 1, now) >= 0) a++;
        admitted += a;
        checked += BATCH;
        return BATCH;
      };
      if (prefill) for (let base = 0; base < s.keys; base += BATCH) run((i) => (base + i) % s.keys);
      return {
        step: () => run(() => {
          const key = seq[pos];
          pos = (pos + 1) & mask;
          return key;
        }),
        reset: () => (admitted = checked = 0),
        counts: async () => ({ admitted, checked, keysHeld: mb.size }),
      };
    }
  }
}

/** Bytes per key once `keys` distinct keys are held. Runs with --expose-gc. */
async function memory(s: MemorySpec): Promise<MemoryResult> {
  if (s.impl === 'kernel') {
    // The kernel's state is its linear memory: the table plus fixed I/O regions, allocated in init().
    const k = new Kernel(kernelModule(), {
      maxKeys: s.keys,
      maxBatch: BATCH,
      keyBytes: 0,
      ...kernelOpts(s.variant, s.keys),
    });
    const { lo, hi } = keyHashes(s.keys);
    for (let base = 0; base < s.keys; base += BATCH) {
      const n = Math.min(BATCH, s.keys - base);
      for (let i = 0; i < n; i++) {
        const r = i * LEG_IN;
        k.legIn[r] = lo[base + i];
        k.legIn[r + 1] = hi[base + i];
        k.legIn[r + 2] = GROUP_SHIFT;
        k.legIn[r + 3] = 1;
      }
      k.decide(n, Date.now());
    }
    const st = k.stats();
    return {
      bytesPerKey: st.memoryBytes / st.keys,
      keysHeld: st.keys,
      detail: { memoryBytes: st.memoryBytes, slots: st.slots, tableBytesPerKey: (st.slots * 32) / st.keys, evictions: st.evictions },
    };
  }
  // JS stores: JS heap growth after a full GC. Keys are built on the fly so only what the store keeps counts.
  fullGc();
  let before = process.memoryUsage();
  let held: () => number;
  if (s.impl === 'rlf') {
    const rl = new RateLimiterMemory({ points: LIMIT, duration: PERIOD_MS / 1000 });
    for (let base = 0; base < s.keys; base += BATCH) {
      const ps: Array<Promise<unknown>> = [];
      for (let i = base; i < Math.min(s.keys, base + BATCH); i++) ps.push(rl.consume(`k${i}`));
      await Promise.all(ps);
    }
    held = () => (rl as unknown as { _memoryStorage: { _storage: Map<string, unknown> } })._memoryStorage._storage.size;
  } else if (s.impl === 'leases') {
    // the lease table is JS heap (src/engine/lease-table.ts); the limiter's kernel is linear memory, outside
    // heapUsed, and is made before the first measurement anyway
    const lim = await createLimiter({ policies: LEASES as never, shards: 0, maxKeys: s.keys });
    fullGc();
    before = process.memoryUsage();
    let taken = 0;
    for (let base = 0; base < s.keys; base += BATCH) {
      const ps: Array<Promise<{ allowed: boolean }>> = [];
      for (let i = base; i < Math.min(s.keys, base + BATCH); i++) ps.push(lim.acquire({ policy: 'bench', key: `k${i}` }));
      for (const d of await Promise.all(ps)) if (d.allowed) taken++;
    }
    // the limiter stays reachable until the measurement is taken
    held = () => (lim.policies.size > 0 ? taken : 0);
  } else {
    const mb = new MapBucket(LIMIT, PERIOD_MS, BURST);
    const now = Date.now();
    for (let i = 0; i < s.keys; i++) mb.take(`k${i}`, 1, now);
    held = () => mb.size;
  }
  fullGc();
  const after = process.memoryUsage();
  const keysHeld = held(); // keeps the store reachable until after the measurement
  return {
    bytesPerKey: (after.heapUsed - before.heapUsed) / keysHeld,
    keysHeld,
    detail: { heapDelta: after.heapUsed - before.heapUsed, externalDelta: after.external - before.external },
  };
}

if (isChildEntry(import.meta.url)) {
  const spec = JSON.parse(process.argv[3] ?? '{}') as Spec;
  if (spec.kind === 'memory') jobMain<MemorySpec, MemoryResult>(memory);
  else {
    roundMain<ThroughputSpec, RoundQ, RoundR>(async (s) => {
      const p = await prepare(s);
      return {
        async round(q) {
          if (q.warmupMs > 0) await timedRound(p.step, q.warmupMs, 0, q.maxSteps);
          p.reset();
          const r = await timedRound(p.step, q.ms, 0, q.maxSteps);
          return { rate: r.rate, ...(await p.counts()) };
        },
        close: p.close,
      };
    });
  }
}

// ---------------------------------------------------------------------------------------------- runner

const CASES = [
  { tag: '1key', label: '1 hot key', keys: 1 },
  { tag: '100k', label: '100k keys', keys: 100_000 },
  { tag: '1M', label: '1M keys', keys: 1_000_000 },
];

const SUBJECTS: Array<{ tag: string; subject: string; impl: Impl; shards: number; variant?: string; sync?: boolean }> = [
  { tag: 'kernel', subject: 'sluice kernel (raw)', impl: 'kernel', shards: 0 },
  { tag: 'kernel-calendar', subject: 'sluice kernel, fixed_window 1mo Europe/Berlin', impl: 'kernel', shards: 0, variant: 'calendar' },
  { tag: 'kernel-slog', subject: 'sluice kernel, sliding_log 16/min', impl: 'kernel', shards: 0, variant: 'slog' },
  { tag: 'limiter-s0', subject: 'sluice createLimiter, shards 0', impl: 'limiter', shards: 0 },
  { tag: 'limiter-sync', subject: 'sluice checkSync, shards 0', impl: 'limiter', shards: 0, sync: true },
  { tag: 'limiter-s2', subject: 'sluice createLimiter, shards 2', impl: 'limiter', shards: 2 },
  { tag: 'leases', subject: 'sluice createLimiter, concurrency acquire+release pairs', impl: 'leases', shards: 0 },
  { tag: 'rlf', subject: 'rlf RateLimiterMemory', impl: 'rlf', shards: 0 },
  { tag: 'map', subject: 'Map bucket (plain JS)', impl: 'map', shards: 0 },
];

const RLF = 'rlf RateLimiterMemory';
const MAP = 'Map bucket (plain JS)';

export const engine: Scenario = {
  name: 'engine',
  summary: 'token-bucket decisions/s (1 key, 100k, 1M keys) and bytes/key at 1M keys: kernel, createLimiter, rlf, Map',
  async run(ctx: Ctx): Promise<Section[]> {
    const t = ctx.timing;
    const timeoutMs = 90_000 + t.warmupMs + 4 * t.rounds * t.roundMs;
    const tput: Section = {
      scenario: 'engine',
      id: 'engine-throughput',
      title: 'Engine: token-bucket decisions per second',
      method: `Batches of ${BATCH} checks, one batch per event-loop turn (createLimiter, rlf: Promise.all of ${BATCH}, ` +
        `awaited; kernel: ${BATCH} rows written into its input region, one call). Keys drawn uniformly from the ` +
        `key set, which each subject fills in its own resident child process before timing. ${t.rounds} rounds of ` +
        `${t.roundMs} ms per subject, taken alternately (A, B, C…, order rotated every round) after a ${t.warmupMs} ms ` +
        `warm-up round each; median with the slowest and fastest round. Policy: token bucket, 1e9 per minute (every ` +
        `check admitted).`,
      metrics: [{ key: 'rate', label: 'decisions/s', higherIsBetter: true }],
      baselines: [{ label: 'rlf', subject: RLF }, { label: 'Map', subject: MAP }],
      rows: [],
      notes: [],
    };
    const mem: Section = {
      scenario: 'engine',
      id: 'engine-memory',
      title: 'Engine: memory per key at 1M keys',
      method: 'sluice kernel: linear-memory bytes (kernel.stats().memoryBytes: the table sized for maxKeys 1M plus ' +
        'fixed I/O regions) ÷ keys held. JS stores: process.memoryUsage().heapUsed after minus before filling 1M ' +
        'keys, both after global.gc() (child runs with --expose-gc), ÷ keys held.',
      metrics: [{ key: 'bytesPerKey', label: 'bytes/key', higherIsBetter: false }],
      baselines: [{ label: 'rlf', subject: RLF }, { label: 'Map', subject: MAP }],
      rows: [],
      notes: [],
    };
    const memSubjects: Array<{ tag: string; subject: string; impl: MemorySpec['impl']; variant?: string }> = [
      { tag: 'kernel', subject: 'sluice kernel (raw)', impl: 'kernel' as const },
      { tag: 'kernel-calendar', subject: 'sluice kernel, fixed_window 1mo Europe/Berlin', impl: 'kernel' as const, variant: 'calendar' },
      { tag: 'kernel-slog', subject: 'sluice kernel, sliding_log 16/min (16-entry blocks)', impl: 'kernel' as const, variant: 'slog' },
      { tag: 'leases', subject: 'sluice lease table, concurrency, 1 lease per key', impl: 'leases' as const },
      { tag: 'rlf', subject: RLF, impl: 'rlf' as const },
      { tag: 'map', subject: MAP, impl: 'map' as const },
    ];
    // --quick leaves out rlf's memory job (1M keys, each with its own timer: the slowest job of the run); the
    // kernel's bytes/key (the target) is then judged next to the Map bucket's.
    const memJobs = memSubjects.filter((sub) => !(ctx.quick && sub.tag === 'rlf'))
      .map((sub) => ({ ...sub, id: `engine/memory/${sub.tag}` })).filter((x) => ctx.want(x.id));
    if (memJobs.length > 0) ctx.progress(`engine/memory: ${memJobs.map((x) => x.tag).join(', ')}, 1M keys each`);
    // Heap growth per process does not depend on CPU contention: the memory jobs run at once, while the 1M-key
    // children fill their key sets (both untimed), and are awaited before any timed round of that case.
    let memPending: Promise<PromiseSettledResult<MemoryResult>[]> | null = null;
    const startMemory = (): Promise<PromiseSettledResult<MemoryResult>[]> => (memPending ??= Promise.allSettled(memJobs.map((sub) =>
      runJob<MemoryResult>(FILE, { kind: 'memory', impl: sub.impl, keys: 1_000_000, variant: sub.variant } satisfies MemorySpec,
        { timeoutMs: 120_000, execArgv: ['--expose-gc'] }))));
    // --quick: the two cases the issue names (one hot key, 1M keys); 100k keys only in a full run.
    for (const c of ctx.quick ? CASES.filter((x) => x.tag !== '100k') : CASES) {
      // --quick leaves out createLimiter with shards 2 (no target depends on it; its worker threads are slow to fill).
      const subs = SUBJECTS.filter((sub) => !(ctx.quick && sub.tag === 'limiter-s2'))
        .map((sub) => ({ ...sub, id: `engine/${c.tag}/${sub.tag}` })).filter((x) => ctx.want(x.id));
      if (subs.length === 0) continue;
      ctx.progress(`engine/${c.tag}: filling ${c.label} in ${subs.length} resident children` +
        (c.tag === '1M' && memJobs.length > 0 ? ' (and engine/memory jobs meanwhile)' : ''));
      const starting = startAll(ctx, subs, (x) => x.id,
        (x) => startRoundChild<RoundQ, RoundR>(FILE, { kind: 'throughput', impl: x.impl, shards: x.shards, keys: c.keys, variant: x.variant, sync: x.sync } satisfies ThroughputSpec,
          { setupTimeoutMs: timeoutMs }), tput.notes);
      if (c.tag === '1M') await startMemory();
      const children = await starting;
      const results = await alternate(ctx, children, t.rounds, (x) => x.s.id, async (x, r, warmup) => {
        const res = await x.child.round({ ms: warmup ? t.warmupMs : t.roundMs, warmupMs: 0, maxSteps: t.maxStepsPerRound }, timeoutMs);
        if (!warmup) ctx.progress(`${x.s.id}: ${x.s.subject}, ${c.label} (round ${r + 1}/${t.rounds}): ${(res.rate / 1e6).toFixed(2)} M/s`);
        return res;
      }, tput.notes);
      await stopAll(children);
      children.forEach((x, i) => {
        const runs = results[i];
        if (runs.length === 0) return;
        const rs = summary(runs.map((r) => r.rate));
        const admitted = runs.reduce((a, r) => a + r.admitted, 0);
        const checked = runs.reduce((a, r) => a + r.checked, 0);
        const last = runs[runs.length - 1];
        const info = [`${((100 * admitted) / Math.max(1, checked)).toFixed(1)}% admitted`];
        if (last.evictions !== undefined && last.evictions > 0) info.push(`${last.evictions} evictions`);
        tput.rows.push({
          id: x.s.id, case: c.label, subject: x.s.subject,
          values: { rate: rs.median },
          spread: { rate: [rs.min, rs.max] },
          info: info.join(', '),
          extra: { rounds: runs.map((r) => r.rate), keysHeld: last.keysHeld, evictions: last.evictions },
        });
      });
    }

    const memResults = await startMemory();
    memJobs.forEach((sub, i) => {
      const g = memResults[i];
      if (g.status === 'rejected') {
        mem.notes.push(`${sub.id} failed: ${(g.reason as Error).message.split('\n')[0]}`);
        ctx.progress(`  FAILED: ${sub.id}: ${(g.reason as Error).message}`);
        return;
      }
      const r = g.value;
      const info = sub.impl === 'kernel'
        ? `${r.detail.slots} slots × 32 B = ${r.detail.tableBytesPerKey.toFixed(1)} B/key in the table`
        : `heap +${(r.detail.heapDelta / 2 ** 20).toFixed(0)} MiB`;
      mem.rows.push({ id: sub.id, case: '1M keys', subject: sub.subject, values: { bytesPerKey: r.bytesPerKey }, info, extra: r.detail });
      ctx.progress(`  ${sub.id}: ${r.bytesPerKey.toFixed(1)} B/key`);
    });
    return [tput, mem].filter((s) => s.rows.length > 0 || s.notes.length > 0);
  },
};
