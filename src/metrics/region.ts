/**
 * `sluice_region_*`: the region's reconciler (src/engine/regions/reconciler.ts), read from
 * `limiter.stats().region` once per scrape; registered only with the region option. Labels are the policy
 * (configured names: bounded) and the region (this instance's).
 *
 * | metric | type | labels |
 * |---|---|---|
 * | sluice_region_global_usage_tokens | gauge | policy, region: the highest global usage of one watched key (every region's last report), tokens per period |
 * | sluice_region_global_limit_tokens | gauge | policy, region: the policy's limit, tokens per period (what the usage is measured against) |
 * | sluice_region_global_usage_ratio | gauge | policy, region: the two above divided |
 * | sluice_region_usage_tokens | gauge | policy, region: this region's usage, summed over the watched keys, tokens per period |
 * | sluice_region_share_tokens | gauge | policy, region: this region's share, summed over the watched keys, tokens per period |
 * | sluice_region_keys | gauge | policy, region: keys watched |
 * | sluice_region_leader | gauge | region: 1 while this instance is the region's reconciler |
 * | sluice_region_reconcile_lag_seconds | gauge | region: since the last round in which every watched key reached the global Redis (-1: never) |
 * | sluice_region_reconcile_rounds_total | counter | region: rounds done as leader |
 * | sluice_region_reconcile_errors_total | counter | region, target = region / global: failed calls to the region's Redis and to the global one |
 * | sluice_region_share_moved_tokens_total | counter | region, direction = took / gave: tokens of limit taken from the global pool, given to it |
 * | sluice_region_untracked_keys_total | counter | region: keys not watched because the set was full |
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RegionStats } from '../types/stats.js';

export function registerRegionMetrics(registers: Registry[], read: () => RegionStats | undefined): void {
  const perPolicy = (name: string, help: string, value: (p: RegionStats['policies'][number]) => number): void => {
    new Gauge({
      name, help, labelNames: ['policy', 'region'], registers,
      collect() {
        const st = read();
        if (st === undefined) return;
        this.reset();
        for (const p of st.policies) this.set({ policy: p.policy, region: st.region }, value(p));
      },
    });
  };
  perPolicy('sluice_region_global_usage_tokens', 'Global usage of the busiest watched key of a scope: global policy (every region\'s last report), tokens per period.', (p) => p.globalUsage);
  perPolicy('sluice_region_global_limit_tokens', 'The limit the global usage is measured against, tokens per period.', (p) => p.limit);
  perPolicy('sluice_region_global_usage_ratio', 'Global usage of the busiest watched key over the limit.', (p) => (p.limit > 0 ? p.globalUsage / p.limit : 0));
  perPolicy('sluice_region_usage_tokens', 'This region\'s usage, summed over the watched keys, tokens per period.', (p) => p.usage);
  perPolicy('sluice_region_share_tokens', 'This region\'s share, summed over the watched keys, tokens per period.', (p) => p.share);
  perPolicy('sluice_region_keys', 'Keys of the policy the region\'s reconciler watches.', (p) => p.keys);
  const gauge = (name: string, help: string, value: (st: RegionStats) => number): void => {
    new Gauge({
      name, help, labelNames: ['region'], registers,
      collect() {
        const st = read();
        if (st === undefined) return;
        this.set({ region: st.region }, value(st));
      },
    });
  };
  gauge('sluice_region_leader', '1 while this instance is its region\'s reconciler (elected through the region\'s Redis).', (st) => (st.leader ? 1 : 0));
  gauge('sluice_region_reconcile_lag_seconds', 'Seconds since the last round in which every watched key reached the global Redis (-1: never).', (st) => (st.lagMs < 0 ? -1 : st.lagMs / 1000));
  const counter = (name: string, help: string, labels: string[], values: (st: RegionStats) => Array<[Record<string, string>, number]>): void => {
    new Counter({
      name, help, labelNames: ['region', ...labels], registers,
      collect() {
        const st = read();
        if (st === undefined) return;
        this.reset();
        for (const [l, v] of values(st)) this.inc({ region: st.region, ...l }, v);
      },
    });
  };
  counter('sluice_region_reconcile_rounds_total', 'Reconcile rounds done as the region\'s leader.', [], (st) => [[{}, st.rounds]]);
  counter('sluice_region_reconcile_errors_total', 'Failed reconciler calls, to the region\'s Redis and to the global Redis.', ['target'],
    (st) => [[{ target: 'region' }, st.regionErrors], [{ target: 'global' }, st.globalErrors]]);
  counter('sluice_region_share_moved_tokens_total', 'Tokens of limit this region took from the global pool, and gave to it.', ['direction'],
    (st) => [[{ direction: 'took' }, st.took], [{ direction: 'gave' }, st.gave]]);
  counter('sluice_region_untracked_keys_total', 'scope: global keys the reconciler did not watch because its set was full.', [], (st) => [[{}, st.overflow]]);
}
