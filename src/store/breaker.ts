import CircuitBreaker from 'opossum';

export interface BreakerOptions {
  /** Failures (errors and timeouts) in the rolling window, in percent, that open the circuit. Default 50. */
  errorThresholdPercentage?: number;
  /**
   * Calls in the rolling window before the percentage counts; also the failures in a row (counted toward the
   * breaker, timeouts included) that open it whatever the window holds. Default 5.
   */
  volumeThreshold?: number;
  /** First wait before probing an open circuit, in ms; doubles per failed probe up to maxResetMs, ±25% jitter. Default 200. */
  resetMs?: number;
  /** Longest wait between probes, in ms (so recovery is noticed within 1.25 × this). Default 800. */
  maxResetMs?: number;
  /**
   * While the circuit is closed and no call was made for this long, in ms, the breaker's own probe (a Redis
   * store's `SET … XX`) is sent, and its failure opens the circuit: an idle instance notices a frozen or unwell
   * Redis (its gauge and `/readyz` say so) within this plus the call deadline. Default 1000; 0: none.
   */
  heartbeatMs?: number;
}

export type BreakerState = 'closed' | 'open' | 'halfOpen';

/**
 * The idle probe of a breaker around one Redis server: `SET key "" XX` on `client`, under `deadline`. XX on a
 * key nobody writes makes it write nothing, yet Redis refuses it as it refuses the check script's writes: out of
 * memory (OOM), a replica (READONLY), loading (LOADING), a script running (BUSY). A PING, answered by a Redis out
 * of memory or read-only, closed an idle breaker on a Redis that refused every check, which the next checks
 * opened again (and /readyz said connected meanwhile). Resolves when Redis answered, an error `healthy` lets through
 * included (an ACL without SET: Redis answers); rejects when it is frozen, down or unwell. On a Cluster, `key`
 * must hash to a slot the probed master serves now, and a MOVED or ASK must not pass `healthy`: Redis redirects
 * before it looks at its memory or role (src/store/cluster-calls.ts, src/store/slots.ts keyInSlot).
 */
export function probeWrite(client: { set(key: string, value: string, mode: 'XX'): Promise<unknown> }, key: string,
  deadline: (p: Promise<unknown>) => Promise<unknown>, healthy: (e: unknown) => boolean): Promise<void> {
  return deadline(client.set(key, '', 'XX')).then(() => undefined, (e: unknown) => {
    if (!healthy(e)) throw e;
  });
}

/** How long a half-open circuit waits for a call to probe the store before it probes with `probe`, ms. */
export const IDLE_PROBE_MS = 50;

/** Default {@link BreakerOptions.heartbeatMs}. */
export const HEARTBEAT_MS = 1000;

/**
 * A circuit breaker (opossum) around a store call, whose probe interval backs off exponentially with jitter:
 * it opens when more than errorThresholdPercentage of the calls in its rolling 2 s window failed (once it holds
 * volumeThreshold calls), or after volumeThreshold failures in a row. The second rule is this file's: after a
 * healthy period the window is full of successes, and under steady traffic the percentage alone needed ~1.1 s
 * of a frozen Redis (289 checks at one per 4 ms, each waiting its deadline, their calls spending late) before
 * the failures outweighed them. A success, or an error `healthy` lets through (Redis answered), ends a run.
 * While open, calls fail at once (so the policy's onStoreError applies without waiting); a probe every
 * resetMs·2^k ± 25% (at most maxResetMs) lets one call through; a success closes the circuit. With `probe`
 * given, a wait that no call ends within {@link IDLE_PROBE_MS} (no traffic) is ended by `probe()` instead: its
 * success closes the circuit, its failure opens it for the next, longer wait. Closed, a breaker with `probe`
 * sends it every heartbeatMs in which no call was made, and its failure opens the circuit (a trial run saw
 * `/readyz` say "connected" through a 5 s freeze of Redis on an idle instance: nothing had asked Redis). So
 * the breaker's state (its gauge, `/readyz`) follows the store while nothing is checked, as it does under
 * traffic. `shutdown()` stops the heartbeat.
 */
export function createBreaker<A extends unknown[], R>(
  fn: (...args: A) => Promise<R>,
  o: BreakerOptions = {},
  /** Errors that say nothing about the store's health (they fail the call but do not count toward opening). */
  healthy: (e: unknown) => boolean = () => false,
  /** A call that says whether the store takes checks ({@link probeWrite}), for a probe no check makes. */
  probe?: () => Promise<unknown>,
  /**
   * Whether the store's connection is up: the heartbeat (heartbeatMs) probes only then (a store that is not
   * connected says so already, and the checks count its errors as connection errors).
   */
  connected: () => boolean = () => true,
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
  // failures in a row that open it, whatever the window holds (opossum emits 'success' for a filtered error)
  const run = Math.max(1, o.volumeThreshold ?? 5);
  let inRow = 0;
  breaker.on('success', () => {
    inRow = 0;
  });
  breaker.on('failure', () => {
    // half-open, opossum opens it on any failure; open, a call made before it opened failed late
    if (!breaker.closed) return;
    if (++inRow >= run) breaker.open();
  });
  breaker.on('open', () => {
    inRow = 0;
  });
  // opossum reads options.resetTimeout each time it opens, so setting it here spaces the next probe
  const options = (breaker as unknown as { options: { resetTimeout: number } }).options;
  let probes = 0;
  let fires = 0;
  breaker.on('fire', () => {
    fires++;
  });
  breaker.on('halfOpen', () => {
    probes++;
    options.resetTimeout = jitter(Math.min(max, base * 2 ** probes));
    if (probe === undefined) return;
    const seen = fires;
    // a call made since is the probe (its outcome closes or opens the circuit), and a probe that answers
    // after one did changes nothing
    const idle = (): boolean => breaker.halfOpen && fires === seen;
    setTimeout(() => {
      if (!idle()) return;
      probe().then(() => {
        if (idle()) breaker.close();
      }, () => {
        if (idle()) breaker.open();
      });
    }, IDLE_PROBE_MS).unref();
  });
  breaker.on('close', () => {
    probes = 0;
    options.resetTimeout = jitter(base);
  });
  const every = o.heartbeatMs ?? HEARTBEAT_MS;
  if (probe !== undefined && every > 0) {
    let firesAtBeat = fires;
    let timer: NodeJS.Timeout;
    const beat = (): void => {
      if (breaker.closed && fires === firesAtBeat && connected()) {
        const seen = fires;
        // a call made meanwhile has its own outcome, which the circuit follows: the probe's then changes nothing
        probe().catch(() => {
          if (breaker.closed && fires === seen && !breaker.isShutdown) breaker.open();
        });
      }
      firesAtBeat = fires;
      timer = setTimeout(beat, every).unref();
    };
    timer = setTimeout(beat, every).unref();
    breaker.on('shutdown', () => clearTimeout(timer));
  }
  const state = (): BreakerState => (breaker.opened ? 'open' : breaker.halfOpen ? 'halfOpen' : 'closed');
  return { breaker, state };
}
