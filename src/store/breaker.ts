import CircuitBreaker from 'opossum';

export interface BreakerOptions {
  /** Failures (errors and timeouts) in the rolling window, in percent, that open the circuit. Default 50. */
  errorThresholdPercentage?: number;
  /** Calls in the rolling window before the percentage counts. Default 5. */
  volumeThreshold?: number;
  /** First wait before probing an open circuit, in ms; doubles per failed probe up to maxResetMs, ±25% jitter. Default 200. */
  resetMs?: number;
  /** Longest wait between probes, in ms (so recovery is noticed within 1.25 × this). Default 800. */
  maxResetMs?: number;
}

export type BreakerState = 'closed' | 'open' | 'halfOpen';

/**
 * A circuit breaker (opossum) around a store call, whose probe interval backs off exponentially with jitter:
 * while open, calls fail at once (so the policy's onStoreError applies without waiting); a probe every
 * resetMs·2^k ± 25% (at most maxResetMs) lets one call through; a success closes the circuit.
 */
export function createBreaker<A extends unknown[], R>(
  fn: (...args: A) => Promise<R>,
  o: BreakerOptions = {},
  /** Errors that say nothing about the store's health (they fail the call but do not count toward opening). */
  healthy: (e: unknown) => boolean = () => false,
): { breaker: CircuitBreaker<A, R>; state: () => BreakerState } {
  const base = o.resetMs ?? 200;
  const max = o.maxResetMs ?? 800;
  const jitter = (ms: number): number => Math.round(ms * (0.75 + Math.random() / 2));
  const breaker = new CircuitBreaker(fn, {
    timeout: false, // the Redis client's commandTimeout bounds each call
    errorThresholdPercentage: o.errorThresholdPercentage ?? 50,
    volumeThreshold: o.volumeThreshold ?? 5,
    rollingCountTimeout: 2000,
    resetTimeout: jitter(base),
    errorFilter: (e: unknown) => healthy(e),
  });
  // opossum reads options.resetTimeout each time it opens, so setting it here spaces the next probe
  const options = (breaker as unknown as { options: { resetTimeout: number } }).options;
  let probes = 0;
  breaker.on('halfOpen', () => {
    probes++;
    options.resetTimeout = jitter(Math.min(max, base * 2 ** probes));
  });
  breaker.on('close', () => {
    probes = 0;
    options.resetTimeout = jitter(base);
  });
  const state = (): BreakerState => (breaker.opened ? 'open' : breaker.halfOpen ? 'halfOpen' : 'closed');
  return { breaker, state };
}
