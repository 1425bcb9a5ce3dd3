/**
 * The subscription re-arm rule (src/engine/ready-after.ts): the wait before a peeked key could admit a cost,
 * by the binding limit's algorithm, under the policy set in force.
 */
import { describe, expect, it } from 'vitest';
import { ReadyAfter } from '../../../src/engine/ready-after.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { type CompiledPolicy } from '../../../src/config/policy-spec.js';
import type { Decision } from '../../../src/types/decision.js';

const peek = (policy: string, remaining: number, resetAfterMs: number): Decision =>
  ({ allowed: true, limit: 0, remaining, resetAfterMs, retryAfterMs: 0, policy });

describe('ReadyAfter', () => {
  let set: ReadonlyMap<string, CompiledPolicy> = compilePolicies({
    bucket: { algorithm: 'token_bucket', limit: 10, period: 60_000 },
    fixed: { algorithm: 'fixed_window', limit: 10, period: 60_000 },
    zero: { algorithm: 'gcra', limit: 0, period: 1000 },
  });
  const ready = new ReadyAfter(() => set);

  it('a token bucket frees limit tokens per period: (cost − remaining − 1) · period / limit, at least 1 ms', () => {
    expect(ready.waitMs(peek('bucket', 2, 48_000), 5)).toBe(12_000); // 2 tokens missing at 6 s each
    expect(ready.waitMs(peek('bucket', 4, 36_000), 5)).toBe(1); // up to one token more than remaining
  });

  it('a fixed window frees its tokens at its end: resetAfterMs, at least 1 ms', () => {
    expect(ready.waitMs(peek('fixed', 0, 25_000), 3)).toBe(25_000);
    expect(ready.waitMs(peek('fixed', 0, 0), 3)).toBe(1);
  });

  it('1 s for a limit of 0 or a name no policy of the set in force has; the set is re-read after a reload', () => {
    expect(ready.waitMs(peek('zero', 0, 0), 1)).toBe(1000);
    expect(ready.waitMs(peek('gone', 0, 0), 1)).toBe(1000);
    set = compilePolicies({ gone: { algorithm: 'token_bucket', limit: 100, period: 1000 } });
    expect(ready.waitMs(peek('gone', 0, 0), 11)).toBe(100);
    expect(ready.waitMs(peek('bucket', 2, 48_000), 5)).toBe(1000);
  });

  it('admits a cost the peek has the tokens for, or any cost when the store failed and the policy fails open', () => {
    expect(ready.admits(peek('bucket', 3, 0), 3)).toBe(true);
    expect(ready.admits(peek('bucket', 2, 0), 3)).toBe(false);
    expect(ready.admits({ ...peek('bucket', 0, 0), degraded: true, degradedBy: 'open' }, 3)).toBe(true);
    expect(ready.admits({ ...peek('bucket', 2, 0), degraded: true, degradedBy: 'local' }, 3)).toBe(false);
    const closed: Decision = { allowed: false, limit: 10, remaining: 0, resetAfterMs: 1000, retryAfterMs: 1000, policy: 'bucket', degraded: true, degradedBy: 'closed' };
    expect(ready.admits(closed, 1)).toBe(false);
  });

  it('a peek denied by a store failure under closed waits its retryAfterMs, not a token’s time', () => {
    const closed: Decision = { allowed: false, limit: 10, remaining: 0, resetAfterMs: 1000, retryAfterMs: 1000, policy: 'bucket', degraded: true, degradedBy: 'closed' };
    expect(ready.waitMs(closed, 1)).toBe(1000);
    expect(ready.waitMs(closed, 5)).toBe(1000);
  });
});
