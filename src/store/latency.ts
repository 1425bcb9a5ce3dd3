import { performance } from 'node:perf_hooks';
import type { StoreLatency } from './contract.js';

/** Upper bounds, in seconds, of the store call latency histogram's buckets. */
export const STORE_LATENCY_BUCKETS: readonly number[] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1];

/** Store call durations (decisions and merges, failed ones included), bucketed by {@link STORE_LATENCY_BUCKETS}. */
export class LatencyHistogram {
  /** Counts per bucket, +Inf last. */
  private readonly counts = new Array<number>(STORE_LATENCY_BUCKETS.length + 1).fill(0);
  private sum = 0;

  /** Counts a call that started at `start` (performance.now(), ms) and ends now. */
  observe(start: number): void {
    const seconds = (performance.now() - start) / 1000;
    let i = 0;
    while (i < STORE_LATENCY_BUCKETS.length && seconds > STORE_LATENCY_BUCKETS[i]) i++;
    this.counts[i]++;
    this.sum += seconds;
  }

  snapshot(): StoreLatency {
    return { bounds: STORE_LATENCY_BUCKETS, counts: [...this.counts], sumSeconds: this.sum };
  }
}
