/**
 * Lease mode's metrics (lease policies), read from `limiter.stats().lease` once per scrape: present once a
 * lease policy was checked, each by policy (configured names: bounded). Registered with a store only (lease
 * mode takes its tokens from Redis).
 *
 * | metric | type | labels |
 * |---|---|---|
 * | sluice_lease_acquired_total, sluice_lease_acquired_tokens_total | counter | policy: lease calls granted tokens; the tokens |
 * | sluice_lease_returned_tokens_total | counter | policy: unused tokens given back (idle keys, close) |
 * | sluice_lease_expired_total | counter | policy: other instances' leases found expired in Redis |
 * | sluice_lease_lapsed_tokens_total | counter | policy: tokens held here past their lease's end, unspent |
 * | sluice_lease_waits_total | counter | policy: checks that waited for a lease call |
 * | sluice_lease_tokens_held | gauge | policy: tokens held now |
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { LeasePolicyCounts } from '../types/stats.js';
import type { StatsReader } from './engine.js';

/** Registers lease mode's metrics. */
export function registerLeaseMetrics(registers: Registry[], read: StatsReader): void {
  const leaseCounter = (name: string, help: string, value: (c: LeasePolicyCounts) => number): void => {
    new Counter({
      name, help, labelNames: ['policy'], registers,
      collect() {
        const le = read()?.lease;
        if (le === undefined) return;
        this.reset();
        for (const [policy, c] of Object.entries(le.policies)) this.inc({ policy }, value(c));
      },
    });
  };
  leaseCounter('sluice_lease_acquired_total', 'Lease calls that were granted tokens (lease policies).', (c) => c.acquired);
  leaseCounter('sluice_lease_acquired_tokens_total', 'Tokens granted to this instance by lease calls.', (c) => c.acquiredTokens);
  leaseCounter('sluice_lease_returned_tokens_total', 'Unused leased tokens given back to Redis (idle keys, close).', (c) => c.returnedTokens);
  leaseCounter('sluice_lease_expired_total', 'Other instances\' leases this instance found expired in Redis (their tokens counted as used).', (c) => c.expired);
  leaseCounter('sluice_lease_lapsed_tokens_total', 'Leased tokens this instance held unspent past their lease\'s end (counted as used).', (c) => c.lapsedTokens);
  leaseCounter('sluice_lease_waits_total', 'Lease-policy checks that waited for a lease call (their tokens were not held here).', (c) => c.waits);
  new Gauge({
    name: 'sluice_lease_tokens_held',
    help: 'Leased tokens this instance holds now, by policy.',
    labelNames: ['policy'], registers,
    collect() {
      const le = read()?.lease;
      if (le === undefined) return;
      this.reset();
      for (const policy of Object.keys(le.policies)) this.set({ policy }, le.heldByPolicy[policy] ?? 0);
    },
  });
}
