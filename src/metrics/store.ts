/**
 * The store's metrics, registered only with a store (`limiter.storeStatus() !== 'none'`) and read from
 * `limiter.stats().store` once per scrape: Redis calls and their failures, the circuit breaker, the strict
 * decisions Redis did not make, and the write-behind's merges (sync policies; 0 until one exists).
 *
 * | metric | type | labels |
 * |---|---|---|
 * | sluice_store_errors_total | counter | Redis calls that failed or timed out (the sum of the five below) |
 * | sluice_store_timeouts_total | counter | calls during which Redis sent nothing on the connection for timeoutMs |
 * | sluice_store_script_errors_total | counter | calls Redis answered with an error about the call (the script failed) |
 * | sluice_store_connection_errors_total | counter | calls that could not be sent or lost their connection |
 * | sluice_store_breaker_rejections_total | counter | calls not made because the circuit breaker was open |
 * | sluice_store_unavailable_total | counter | calls Redis refused: OOM, BUSY, LOADING, READONLY... (open the breaker) |
 * | sluice_store_late_calls_total | counter | strict and lease calls answered after they had timed out (Redis ran them late) |
 * | sluice_store_late_spent_tokens_total | counter | tokens those late calls spent in Redis |
 * | sluice_store_over_limit_answers_total | counter | strict checks denied by the over-limit cache, without Redis |
 * | sluice_store_known_keys | gauge | strict keys whose last Redis answer is kept |
 * | sluice_store_resets_heard_total | counter | key resets announced by other instances and applied here |
 * | sluice_store_reset_messages_malformed_total | counter | messages on the reset channel that are not a reset (ignored) |
 * | sluice_degraded_decisions_total | counter | policy, rule = open / closed / local: strict decisions Redis did not make (0 from the start for every store-backed policy) |
 * | sluice_store_connected | gauge | 1 while connected to Redis, else 0 |
 * | sluice_store_breaker_state | gauge | the circuit breaker: 0 closed, 1 half-open, 2 open |
 * | sluice_store_call_duration_seconds | histogram | script calls, decisions and merges, failed ones included |
 * | sluice_sync_merges_total | counter | merges into Redis done |
 * | sluice_sync_failures_total | counter | merges that failed or timed out (retried) |
 * | sluice_sync_dropped_total | counter | deltas dropped because too many keys were waiting |
 * | sluice_sync_lag_seconds | gauge | seconds since the last successful merge |
 * | sluice_sync_pending_keys | gauge | keys waiting to be merged |
 */
import { Counter, Gauge, type Metric, type Registry } from 'prom-client';
import type { LimiterStats } from '../types/stats.js';
import type { StatsReader } from './engine.js';
import { SnapshotHistogram } from './histograms.js';

/** `sluice_store_breaker_state` values. */
export const BREAKER_STATE = { closed: 0, halfOpen: 1, open: 2 } as const;

type StoreStats = NonNullable<LimiterStats['store']>;
type SyncStats = NonNullable<StoreStats['sync']>;

/**
 * A label-less counter of `value(source())`, rendered only while `source()` gives something: none before the
 * first stats, and the write-behind's none until it exists.
 */
function countOf<T>(registers: Registry[], name: string, help: string, source: () => T | null | undefined, value: (t: T) => number): void {
  new Counter({
    name, help, registers,
    collect() {
      const t = source();
      if (t == null) return;
      this.reset();
      this.inc(value(t));
    },
  });
}

/** A label-less gauge of `value(source())`, set only while `source()` gives something. */
function gaugeOf<T>(registers: Registry[], name: string, help: string, source: () => T | null | undefined, value: (t: T) => number): void {
  new Gauge({
    name, help, registers,
    collect() {
      const t = source();
      if (t != null) this.set(value(t));
    },
  });
}

/** Registers the store's metrics and the write-behind's in `registry`. */
export function registerStoreMetrics(registry: Registry, read: StatsReader): void {
  const registers = [registry];
  const store = (): StoreStats | undefined => read()?.store;
  const storeCounter = (name: string, help: string, value: (st: StoreStats) => number): void => countOf(registers, name, help, store, value);
  const storeGauge = (name: string, help: string, value: (st: StoreStats) => number): void => gaugeOf(registers, name, help, store, value);
  storeCounter('sluice_store_errors_total', 'Redis calls that failed or timed out (each applied its policy\'s onStoreError).', (st) => st.storeErrors);
  storeCounter('sluice_store_timeouts_total', 'Redis calls given up: Redis sent nothing on the connection for timeoutMs (frozen, down, unreachable).', (st) => st.timeouts);
  storeCounter('sluice_store_script_errors_total', 'Redis calls answered with an error about the call: the script failed (a script error).', (st) => st.scriptErrors);
  storeCounter('sluice_store_connection_errors_total', 'Redis calls that could not be sent or lost their connection (Redis down, restarting, not yet connected).', (st) => st.connectionErrors);
  storeCounter('sluice_store_breaker_rejections_total', 'Redis calls not made because the circuit breaker was open.', (st) => st.breakerRejections);
  storeCounter('sluice_store_unavailable_total', 'Redis calls Redis refused because it cannot serve now (OOM, BUSY, LOADING, READONLY...); they count toward the breaker.', (st) => st.unavailable);
  storeCounter('sluice_store_late_calls_total', 'Strict and lease calls answered after they had timed out: Redis ran them late.', (st) => st.lateCalls);
  storeCounter('sluice_store_late_spent_tokens_total', 'Tokens spent in Redis by checks whose call had timed out (they took their failure rule).', (st) => st.lateSpentTokens);
  storeCounter('sluice_store_over_limit_answers_total', 'Strict checks denied by the exact over-limit cache, without a Redis call.', (st) => st.overLimitAnswers);
  storeCounter('sluice_store_resets_heard_total', 'Key resets announced by other instances and applied here (what was learned of the key from Redis dropped).', (st) => st.resets.applied);
  storeCounter('sluice_store_reset_messages_malformed_total', 'Messages on the reset channel that are not a reset (ignored).', (st) => st.resets.malformed);
  storeGauge('sluice_store_known_keys', 'Strict keys whose last Redis answer this instance keeps (over-limit cache, local-rule seeding).', (st) => st.knownKeys);
  new Counter({
    name: 'sluice_degraded_decisions_total',
    help: 'Strict decisions not made by Redis (it failed), by policy and the rule that made them: open, closed, local.',
    labelNames: ['policy', 'rule'], registers,
    collect() {
      const degraded = read()?.degraded;
      if (degraded === undefined) return;
      this.reset();
      for (const [policy, c] of Object.entries(degraded)) {
        // every rule, 0s too: a series that appears at its first value hides that value from rate()
        for (const rule of ['open', 'closed', 'local'] as const) this.inc({ policy, rule }, c[rule]);
      }
    },
  });
  storeGauge('sluice_store_connected', '1 while the Redis client is connected, else 0.', (st) => (st.connected ? 1 : 0));
  storeGauge('sluice_store_breaker_state', 'The Redis circuit breaker: 0 closed, 1 half-open (probing), 2 open (Redis not called).', (st) => BREAKER_STATE[st.breaker]);
  registry.registerMetric(new SnapshotHistogram(
    'sluice_store_call_duration_seconds',
    'Redis script calls (decisions and merges, failed ones included), in seconds.',
    () => store()?.latency,
  ) as unknown as Metric);
  // Registered with every store, not only when a sync policy exists at start: a reload may add one.
  const sync = (): SyncStats | null | undefined => store()?.sync;
  countOf(registers, 'sluice_sync_merges_total', 'Write-behind merges into Redis done (sync policies).', sync, (sy) => sy.merges);
  countOf(registers, 'sluice_sync_failures_total', 'Write-behind merges that failed or timed out; each is retried under the same id.', sync, (sy) => sy.failures);
  countOf(registers, 'sluice_sync_dropped_total', 'Write-behind deltas dropped because too many distinct keys were waiting to be merged.', sync, (sy) => sy.dropped);
  gaugeOf(registers, 'sluice_sync_lag_seconds', 'Seconds since the last successful write-behind merge: how old this instance\'s view of the others is.', sync, (sy) => sy.lagMs / 1000);
  gaugeOf(registers, 'sluice_sync_pending_keys', 'Keys whose consumed deltas wait to be merged into Redis (including a merge in doubt).', sync, (sy) => sy.pendingKeys);
}
