/**
 * The engine's metrics, read from `limiter.stats()` once per scrape (`read` gives the last stats, or null
 * before the first): what the policies' lists and shadow policies decided, the engine's gauges, and each
 * shard's.
 *
 * | metric | type | labels |
 * |---|---|---|
 * | sluice_shadow_decisions_total | counter | policy, result = allow / would_deny: shadow policies' evaluations (`stats.shadow`) |
 * | sluice_list_decisions_total | counter | policy, list = allow / deny: checks decided by a policy's allow or deny list (`stats.lists`) |
 * | sluice_pending_checks | gauge | checks queued in the front plus in flight to shards |
 * | sluice_keys | gauge | keys held by the kernels |
 * | sluice_evictions_total | counter | keys evicted to make room (drops when a shard restarts: a counter reset) |
 * | sluice_kernel_memory_bytes | gauge | linear memory of the deciding kernels (fixed at start) |
 * | sluice_shard_queue_depth | gauge | shard: checks sent to the shard's worker and not answered yet |
 * | sluice_shard_queue_batches | gauge | shard: batches (one per turn) sent to the shard's worker and not answered yet |
 * | sluice_shard_up | gauge | shard: 1 while it has a worker, 0 while down (its checks fail at once) |
 * | sluice_shard_downs_total, sluice_shard_recoveries_total | counter | shard: times it went down; came back |
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { LimiterStats } from '../types/stats.js';

/** The last `limiter.stats()` a scrape read, or null before the first. */
export type StatsReader = () => LimiterStats | null;

/** Registers `sluice_shadow_decisions_total` and `sluice_list_decisions_total`. */
export function registerListAndShadowMetrics(registers: Registry[], read: StatsReader): void {
  new Counter({
    name: 'sluice_shadow_decisions_total',
    help: 'Shadow policies\' evaluations, by policy and result: allow, or would_deny (the check was admitted anyway).',
    labelNames: ['policy', 'result'],
    registers,
    collect() {
      const shadow = read()?.shadow;
      if (shadow === undefined) return;
      this.reset();
      for (const [policy, c] of Object.entries(shadow)) {
        this.inc({ policy, result: 'allow' }, c.allow);
        this.inc({ policy, result: 'would_deny' }, c.wouldDeny);
      }
    },
  });
  new Counter({
    name: 'sluice_list_decisions_total',
    help: 'Checks decided by a policy\'s allow list (admitted, nothing spent) or deny list (refused), by policy and list.',
    labelNames: ['policy', 'list'],
    registers,
    collect() {
      const lists = read()?.lists;
      if (lists === undefined) return;
      this.reset();
      for (const [policy, c] of Object.entries(lists)) {
        this.inc({ policy, list: 'allow' }, c.allow);
        this.inc({ policy, list: 'deny' }, c.deny);
      }
    },
  });
}

/** Registers the engine's gauges: pending checks, keys held, evictions, kernel memory. */
export function registerEngineGauges(registers: Registry[], read: StatsReader): void {
  /** A gauge of one figure of the stats, left as it was while there are none (or the figure is missing). */
  const statGauge = (name: string, help: string, value: (st: LimiterStats) => number | undefined): void => {
    new Gauge({
      name, help, registers,
      collect() {
        const stats = read();
        const v = stats === null ? undefined : value(stats);
        if (v !== undefined) this.set(v);
      },
    });
  };
  statGauge('sluice_pending_checks', 'Checks queued in the front plus checks in flight to shard workers.', (st) => st.pending);
  statGauge('sluice_keys', 'Keys held by the kernels (bounded by maxKeys).', (st) => st.keys);
  new Counter({
    name: 'sluice_evictions_total',
    help: 'Keys evicted to make room for new ones. Drops when a shard worker restarts with an empty table (read as a counter reset).',
    registers,
    collect() {
      const stats = read();
      if (stats === null) return;
      this.reset();
      this.inc(stats.evictions);
    },
  });
  statGauge('sluice_kernel_memory_bytes', 'Linear memory of the deciding kernels, allocated once at start.',
    (st) => (typeof st.memoryBytes === 'number' ? st.memoryBytes : undefined));
}

type PerShard = LimiterStats['perShard'][number];

/** Registers the per-shard metrics (label `shard`: its index), from `stats.perShard`. */
export function registerShardMetrics(registers: Registry[], read: StatsReader): void {
  const perShard = (kind: 'gauge' | 'counter', name: string, help: string, value: (st: PerShard) => number): void => {
    /** Resets `m` and puts every shard's value (a gauge sets it; a counter, reset, adds it). */
    const fill = (m: { reset(): void }, put: (labels: { shard: string }, v: number) => void): void => {
      const shards = read()?.perShard;
      if (!shards) return;
      m.reset();
      shards.forEach((st, s) => put({ shard: String(s) }, value(st)));
    };
    if (kind === 'gauge') new Gauge({ name, help, labelNames: ['shard'], registers, collect() { fill(this, (l, v) => this.set(l, v)); } });
    else new Counter({ name, help, labelNames: ['shard'], registers, collect() { fill(this, (l, v) => this.inc(l, v)); } });
  };
  perShard('gauge', 'sluice_shard_queue_depth', 'Checks sent to a shard worker (queued for it or being decided) and not answered yet.', (st) => st.queuedChecks);
  perShard('gauge', 'sluice_shard_queue_batches', 'Batches (one per event-loop turn) sent to a shard worker and not answered yet.', (st) => st.queuedBatches);
  perShard('gauge', 'sluice_shard_up', '1 while a shard has a worker; 0 while it is down (its checks fail at once with SHARD_FAILED, restarts are attempted).', (st) => (st.up ? 1 : 0));
  perShard('counter', 'sluice_shard_downs_total', 'Times a shard went down: its worker died and could not be replaced.', (st) => st.downs);
  perShard('counter', 'sluice_shard_recoveries_total', 'Times a shard that was down came back with a fresh worker (an empty table).', (st) => st.recoveries);
}
