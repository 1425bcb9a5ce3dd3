/**
 * Shadow mode (issue #8, item 4): a `shadow: true` policy is evaluated and counted but never denies, and a
 * candidate `shadowOf` a live policy is evaluated on every live check without changing its decisions. The
 * clock is controlled, so every count is exact.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter, type PolicySpec } from '../../../src/index.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { createMetrics } from '../../../src/metrics/registry.js';
import { ManualClock } from '../../helpers/clock.js';
import { configError } from '../../helpers/limiter.js';
import { send, ServerPool } from '../../helpers/server.js';
import { parseMetrics } from '../../fault/support.js';

const TRIAL: PolicySpec = { algorithm: 'fixed_window', limit: 5, period: '1m', shadow: true };
const FREE: PolicySpec = { algorithm: 'token_bucket', limit: 2, period: '1m', descriptors: ['tenant', 'action'] };
/** The candidate: 2 a minute per tenant (all actions together), shadowing free. */
const NEXT: PolicySpec = { algorithm: 'token_bucket', limit: 2, period: '1m', descriptors: ['tenant'], shadow: true, shadowOf: 'free' };

let limiters: Limiter[] = [];
const servers = new ServerPool();
afterEach(async () => {
  await servers.closeAll();
  await Promise.all(limiters.map((l) => l.close()));
  limiters = [];
});

async function make(policies: Record<string, PolicySpec>, shards: number, clock: ManualClock, logger?: { info(o: object, m: string): void }): Promise<Limiter> {
  const l = await createLimiter({ policies, shards, clock: clock.now, maxKeys: 1024, logger });
  limiters.push(l);
  return l;
}

describe.each([0, 2])('shadow mode with %i shards', (shards) => {
  it('a shadow policy of limit 5: 8 checks, 8 admitted, counted 5 allow + 3 would_deny', async () => {
    const clock = new ManualClock();
    const limiter = await make({ trial: TRIAL }, shards, clock);
    const ds: Decision[] = [];
    for (let i = 0; i < 8; i++) ds.push(await limiter.check({ policy: 'trial', key: 'acme', cost: 1 }));
    expect(ds.every((d) => d.allowed)).toBe(true);
    expect(ds[0]).toEqual({
      allowed: true, limit: 5, remaining: 4, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'trial',
      shadow: { allowed: true, remaining: 4, retryAfterMs: 0 },
    });
    expect(ds[5]).toEqual({
      allowed: true, limit: 5, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'trial',
      shadow: { allowed: false, remaining: 0, retryAfterMs: 60_000 },
    });
    expect(ds.map((d) => d.shadow!.allowed)).toEqual([true, true, true, true, true, false, false, false]);
    expect((await limiter.stats()).shadow).toEqual({ trial: { allow: 5, wouldDeny: 3 } });

    const text = await createMetrics(limiter).render();
    const m = parseMetrics(text);
    expect(m.get('sluice_shadow_decisions_total{policy="trial",result="allow"}')).toBe(5);
    expect(m.get('sluice_shadow_decisions_total{policy="trial",result="would_deny"}')).toBe(3);

    // the would-denies spent nothing: the next window admits exactly 5 again
    clock.advance(60_000);
    for (let i = 0; i < 6; i++) await limiter.check({ policy: 'trial', key: 'acme', cost: 1 });
    expect((await limiter.stats()).shadow).toEqual({ trial: { allow: 10, wouldDeny: 4 } });
  });

  it('a candidate shadowOf a live policy leaves every live decision as it was, and counts its own exactly', async () => {
    // tenant acme: actions a, b, a, a, b; tenant beta: a, a. Some by descriptors, some by the joined key.
    const checks = [
      { descriptors: { tenant: 'acme', action: 'a' } },
      { descriptors: { tenant: 'acme', action: 'b' } },
      { key: 'acme:a' },
      { descriptors: { tenant: 'acme', action: 'a' } },
      { key: 'acme:b' },
      { descriptors: { tenant: 'beta', action: 'a' } },
      { key: 'beta:a' },
    ];
    const run = async (limiter: Limiter): Promise<Decision[]> => {
      const out: Decision[] = [];
      for (const c of checks) out.push(await limiter.check({ policy: 'free', cost: 1, ...c }));
      // and a batch issued in one turn
      out.push(...(await Promise.all(checks.map((c) => limiter.check({ policy: 'free', cost: 1, ...c })))));
      return out;
    };
    const clock = new ManualClock();
    const without = await run(await make({ free: FREE }, shards, clock));
    const limiter = await make({ free: FREE, next: NEXT }, shards, clock);
    const withCandidate = await run(limiter);
    expect(withCandidate).toEqual(without);
    expect(without.map((d) => d.allowed)).toEqual([
      true, true, true, false, true, true, true,
      false, false, false, false, false, false, false,
    ]);
    // the candidate saw 14 checks: acme 10 (2 admitted), beta 4 (2 admitted)
    expect((await limiter.stats()).shadow).toEqual({ next: { allow: 4, wouldDeny: 10 } });
    // its admitted checks spent its own state, under the tenant-only key: a peek shows acme empty
    expect(await limiter.check({ policy: 'next', key: 'acme', cost: 0 })).toEqual({
      allowed: true, limit: 2, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'next',
      shadow: { allowed: true, remaining: 0, retryAfterMs: 0 },
    });
  });

  it('a candidate without descriptors takes the live check\'s whole key', async () => {
    const clock = new ManualClock();
    const limiter = await make({
      free: FREE,
      whole: { algorithm: 'fixed_window', limit: 1, period: '1m', shadow: true, shadowOf: 'free' },
    }, shards, clock);
    await limiter.check({ policy: 'free', descriptors: { tenant: 'acme', action: 'a' }, cost: 1 });
    await limiter.check({ policy: 'free', descriptors: { tenant: 'acme', action: 'b' }, cost: 1 });
    await limiter.check({ policy: 'free', key: 'acme:a', cost: 1 });
    expect((await limiter.stats()).shadow).toEqual({ whole: { allow: 2, wouldDeny: 1 } });
    expect((await limiter.check({ policy: 'whole', key: 'acme:a', cost: 0 })).remaining).toBe(0);
    expect((await limiter.check({ policy: 'whole', key: 'acme:b', cost: 0 })).remaining).toBe(0);
    expect((await limiter.check({ policy: 'whole', key: 'acme:c', cost: 0 })).remaining).toBe(1);
  });
});

describe('shadow mode across a reload', () => {
  it('a candidate added by a reload is evaluated from then on; its counts outlive its removal', async () => {
    const clock = new ManualClock();
    const limiter = await make({ free: FREE }, 0, clock);
    const check = (): Promise<Decision> => limiter.check({ policy: 'free', descriptors: { tenant: 'acme', action: 'a' }, cost: 1 });
    expect((await check()).allowed).toBe(true);
    await limiter.reload({ free: FREE, next: NEXT });
    expect((await check()).allowed).toBe(true); // the live bucket: 2nd of 2
    expect((await check()).allowed).toBe(false);
    expect((await limiter.stats()).shadow).toEqual({ next: { allow: 2, wouldDeny: 0 } });
    await limiter.reload({ free: FREE });
    expect((await check()).allowed).toBe(false);
    expect((await limiter.stats()).shadow).toEqual({ next: { allow: 2, wouldDeny: 0 } });
  });
});

describe('shadow mode: logs', () => {
  it('logs a would-deny at most once a second per shadow policy, with the count since the last line', async () => {
    const clock = new ManualClock();
    const lines: Array<{ obj: object; msg: string }> = [];
    const limiter = await make({
      one: { algorithm: 'fixed_window', limit: 1, period: '1h', shadow: true },
      two: { algorithm: 'fixed_window', limit: 1, period: '1h', shadow: true },
    }, 0, clock, { info: (obj, msg) => lines.push({ obj, msg }) });
    const spend = async (policy: string, n: number): Promise<void> => {
      for (let i = 0; i < n; i++) await limiter.check({ policy, key: 'k', cost: 1 });
    };
    await spend('one', 4); // 1 admitted, 3 would-deny: the first logs at once, two wait
    await spend('two', 2); // 1 admitted, 1 would-deny: its own line
    expect(lines).toEqual([
      { obj: { policy: 'one', wouldDeny: 1 }, msg: 'shadow policy would deny' },
      { obj: { policy: 'two', wouldDeny: 1 }, msg: 'shadow policy would deny' },
    ]);
    clock.advance(999);
    await spend('one', 1);
    expect(lines).toHaveLength(2);
    clock.advance(1);
    await spend('one', 1);
    expect(lines[2]).toEqual({ obj: { policy: 'one', wouldDeny: 4 }, msg: 'shadow policy would deny' });
    expect((await limiter.stats()).shadow).toEqual({ one: { allow: 1, wouldDeny: 5 }, two: { allow: 1, wouldDeny: 1 } });
  });
});

describe('shadow mode: validation', () => {
  const T = { algorithm: 'token_bucket', limit: 1, period: 1000 };
  it.each<[string, Record<string, unknown>, string, string]>([
    ['shadow not a boolean', { p: { ...T, shadow: 'yes' } }, 'policy "p": shadow: must be true or false (got "yes")', 'shadow'],
    ['shadowOf without shadow', { live: T, p: { ...T, shadowOf: 'live' } }, 'policy "p": shadowOf: requires shadow: true (a candidate never denies)', 'shadowOf'],
    ['shadowOf a missing policy', { p: { ...T, shadow: true, shadowOf: 'nope' } }, 'policy "p": shadowOf: no policy named "nope" in policies', 'shadowOf'],
    ['shadowOf itself', { p: { ...T, shadow: true, shadowOf: 'p' } }, 'policy "p": shadowOf: a policy cannot shadow itself', 'shadowOf'],
    ['shadowOf a shadow', { s: { ...T, shadow: true }, p: { ...T, shadow: true, shadowOf: 's' } },
      'policy "p": shadowOf: policy "s" is itself a shadow policy: a candidate shadows a live policy', 'shadowOf'],
    ['descriptors the live policy lacks', { live: { ...T, descriptors: ['tenant'] }, p: { ...T, shadow: true, shadowOf: 'live', descriptors: ['tenant', 'ip'] } },
      'policy "p": shadowOf: this policy\'s key cannot be derived from policy "live"\'s checks: descriptor ip not among the live policy\'s (it has descriptors tenant); use a subset of them, or none (the live check\'s whole key)', 'shadowOf'],
    ['descriptors on a live policy without', { live: T, p: { ...T, shadow: true, shadowOf: 'live', descriptors: ['tenant'] } },
      'policy "p": shadowOf: this policy\'s key cannot be derived from policy "live"\'s checks: descriptor tenant not among the live policy\'s (it has no descriptors); use a subset of them, or none (the live check\'s whole key)', 'shadowOf'],
    ['a shadow with a guard', { g: T, p: { ...T, shadow: true, guard: 'g' } },
      'policy "p": guard: a shadow policy cannot have a guard: its admitted checks would spend the live guard\'s tokens', 'guard'],
    ['a guard that is a shadow', { g: { ...T, shadow: true }, p: { ...T, guard: 'g' } },
      'policy "p": guard: policy "g" is a shadow policy: a guard must be live (a shadow never denies)', 'guard'],
  ])('refuses %s, naming the field', (_what, policies, message, field) => {
    const err = configError(policies);
    expect(err.message).toBe(message);
    expect(err.field).toBe(field);
  });

  it('compiles shadow and shadowOf, and they change the policy set\'s version', async () => {
    const map = compilePolicies({ free: FREE, next: NEXT });
    expect(map.get('next')).toMatchObject({ shadow: true, shadowOf: 'free', allow: [], deny: [] });
    expect(map.get('free')).toMatchObject({ shadow: false, shadowOf: null });
    const clock = new ManualClock();
    const a = await make({ free: FREE, next: NEXT }, 0, clock);
    const b = await make({ free: FREE, next: { ...NEXT, shadowOf: undefined } }, 0, clock);
    expect(a.version).not.toBe(b.version);
  });
});

describe('shadow mode over HTTP', () => {
  it('GET /metrics shows the shadow counters, and /v1/check admits', async () => {
    const s = await servers.start({ policies: { free: FREE, next: NEXT, trial: TRIAL } });
    for (let i = 0; i < 3; i++) {
      const a = await send(`${s.url}/v1/check?policy=free&tenant=acme&action=a`);
      expect(a.json.allowed).toBe(i < 2);
    }
    for (let i = 0; i < 7; i++) {
      const a = await send(`${s.url}/v1/check?policy=trial&key=acme`);
      expect(a.json.allowed).toBe(true);
      if (i === 5) {
        expect(a.json).toEqual({
          allowed: true, limit: 5, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'trial',
          shadow: { allowed: false, remaining: 0, retryAfterMs: 60_000 },
        });
      }
    }
    const m = parseMetrics((await send(`${s.url}/metrics`)).text);
    expect(m.get('sluice_shadow_decisions_total{policy="next",result="allow"}')).toBe(2);
    expect(m.get('sluice_shadow_decisions_total{policy="next",result="would_deny"}')).toBe(1);
    expect(m.get('sluice_shadow_decisions_total{policy="trial",result="allow"}')).toBe(5);
    expect(m.get('sluice_shadow_decisions_total{policy="trial",result="would_deny"}')).toBe(2);
    expect(m.get('sluice_decisions_total{policy="trial",result="allowed"}')).toBe(7);
    expect(m.get('sluice_decisions_total{policy="free",result="denied"}')).toBe(1);
  });
});
