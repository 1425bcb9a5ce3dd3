import type { LeasePolicyCounts } from '../../types/stats.js';

/** Lease mode's counts since start, by policy (the metrics `sluice_lease_*`, read at each scrape). */
export class LeaseCounters {
  private readonly by = new Map<string, LeasePolicyCounts>();

  private of(policy: string): LeasePolicyCounts {
    let c = this.by.get(policy);
    if (c === undefined) this.by.set(policy, (c = { acquired: 0, acquiredTokens: 0, returnedTokens: 0, expired: 0, lapsedTokens: 0, waits: 0 }));
    return c;
  }

  acquired(policy: string, tokens: number): void {
    const c = this.of(policy);
    c.acquired++;
    c.acquiredTokens += tokens;
  }

  returned(policy: string, tokens: number): void {
    if (tokens > 0) this.of(policy).returnedTokens += tokens;
  }

  expired(policy: string, n: number): void {
    if (n > 0) this.of(policy).expired += n;
  }

  lapsed(policy: string, tokens: number): void {
    this.of(policy).lapsedTokens += tokens;
  }

  waits(policy: string): void {
    this.of(policy).waits++;
  }

  snapshot(): Record<string, LeasePolicyCounts> {
    const out: Record<string, LeasePolicyCounts> = {};
    for (const [p, c] of this.by) out[p] = { ...c };
    return out;
  }
}
