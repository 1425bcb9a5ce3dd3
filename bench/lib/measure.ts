/** Timing loops and small statistics shared by the scenarios. */
import { performance } from 'node:perf_hooks';

/** How long to run one measurement: a warm-up, then `rounds` rounds of about `roundMs` each. */
export interface Timing {
  warmupMs: number;
  roundMs: number;
  rounds: number;
  /** Hard cap on steps per round (bounds a step that turns out far cheaper than expected). */
  maxStepsPerRound: number;
}

export const QUICK_TIMING: Timing = { warmupMs: 250, roundMs: 300, rounds: 3, maxStepsPerRound: 5_000_000 };
export const FULL_TIMING: Timing = { warmupMs: 1_000, roundMs: 1_000, rounds: 5, maxStepsPerRound: 20_000_000 };

/** Per-round rates (items per second) of a repeated step. */
export interface Rates {
  /** items/s of each round. */
  rounds: number[];
  /** Median of the rounds. */
  median: number;
  min: number;
  max: number;
  /** Items done in all measured rounds. */
  items: number;
}

/**
 * Runs `step` (which does some work and returns how many items it did) for the warm-up, then for each round,
 * and returns the items per second of each round. A step may be sync or async.
 */
export async function rates(step: () => number | Promise<number>, t: Timing): Promise<Rates> {
  const until = performance.now() + t.warmupMs;
  while (performance.now() < until) {
    const r = step();
    if (typeof r !== 'number') await r;
  }
  const out: number[] = [];
  let total = 0;
  for (let round = 0; round < t.rounds; round++) {
    let items = 0;
    let steps = 0;
    const start = performance.now();
    let elapsed = 0;
    do {
      const r = step();
      items += typeof r === 'number' ? r : await r;
      steps++;
      elapsed = performance.now() - start;
    } while (elapsed < t.roundMs && steps < t.maxStepsPerRound);
    out.push((items * 1000) / elapsed);
    total += items;
  }
  const sorted = [...out].sort((a, b) => a - b);
  return { rounds: out, median: median(sorted), min: sorted[0], max: sorted[sorted.length - 1], items: total };
}

/** Median of an ascending array. */
export function median(sorted: ArrayLike<number>): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  return n % 2 === 1 ? sorted[(n - 1) >> 1] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/** The p-th percentile (0..100) of an ascending array, nearest-rank. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const rank = Math.min(n - 1, Math.max(0, Math.ceil((p / 100) * n) - 1));
  return sorted[rank];
}

/** A uniform pseudo-random u32 stream (xorshift32): reproducible key sequences without Math.random. */
export function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 0x9e3779b9;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
}

/**
 * Indices of keys to check, uniform over [0, keys), `length` long (cycled by the caller). With one key, all 0.
 */
export function keySequence(keys: number, length: number, seed = 12345): Uint32Array {
  const seq = new Uint32Array(length);
  if (keys <= 1) return seq;
  const next = xorshift32(seed);
  for (let i = 0; i < length; i++) seq[i] = next() % keys;
  return seq;
}

/** Forces a full GC when the process runs with --expose-gc (twice: weak references and finalizers). */
export function fullGc(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run this child with --expose-gc');
  gc();
  gc();
}

/** One timed round of a repeated step: items per second over about `ms` (after `warmupMs` untimed). */
export async function timedRound(step: () => number | Promise<number>, ms: number, warmupMs = 0,
  maxSteps = 20_000_000): Promise<{ rate: number; items: number; elapsedMs: number }> {
  if (warmupMs > 0) {
    const until = performance.now() + warmupMs;
    while (performance.now() < until) {
      const r = step();
      if (typeof r !== 'number') await r;
    }
  }
  let items = 0;
  let steps = 0;
  const start = performance.now();
  let elapsed = 0;
  do {
    const r = step();
    items += typeof r === 'number' ? r : await r;
    steps++;
    elapsed = performance.now() - start;
  } while (elapsed < ms && steps < maxSteps);
  return { rate: (items * 1000) / elapsed, items, elapsedMs: elapsed };
}

/** Median, min and max of unsorted values. */
export function summary(values: number[]): { median: number; min: number; max: number } {
  const s = [...values].sort((a, b) => a - b);
  return { median: median(s), min: s[0], max: s[s.length - 1] };
}
