/**
 * src/wire/answer.ts writes a check's rate-limit fields and decision JSON as bytes: they must be the bytes of
 * the strings the server wrote before (rateLimitPolicyHeader, rateLimitHeader, Retry-After, decisionJson), for
 * every decision it takes, and it must decline (null: the caller writes the strings) every decision it does not.
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { type CompiledPolicy } from '../../../src/config/policy-spec.js';
import { AnswerBytes, answerTable } from '../../../src/wire/answer.js';
import { bindingLimit, rateLimitHeader, rateLimitPolicyHeader, retryAfterSeconds } from '../../../src/wire/headers.js';
import { decisionJson } from '../../../src/wire/codec.js';
import type { Decision } from '../../../src/types/decision.js';

const policies = compilePolicies({
  free: { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 100, guard: 'global' },
  global: { algorithm: 'token_bucket', limit: 200_000, period: '1m', burst: 20_000 },
  tiers: {
    limits: [
      { name: 'per-second', algorithm: 'sliding_window', limit: 10, period: 1000 },
      { name: 'per-day', algorithm: 'fixed_window', limit: 5000, period: '1d' },
      { name: 'g.c-r_a', algorithm: 'gcra', limit: 7, period: 1500, burst: 3 },
    ],
    guard: 'global',
  },
  log: { algorithm: 'sliding_log', limit: 3, period: 500 },
  huge: { algorithm: 'gcra', limit: 2_000_000_000_000_000, period: 1000, burst: 3_000_000_000_000_000 },
});

const dec = new TextDecoder();
const text = (b: Uint8Array | null): string | null => (b === null ? null : dec.decode(b));

/** What the server's string path writes for `d` (src/server/http.ts rateLimitFields and writeDecisionNow). */
function strings(set: ReadonlyMap<string, CompiledPolicy>, policy: string, d: Decision, deniedStatus: boolean, contentType: boolean): { head: string; json: string } {
  const p = set.get(policy)!;
  const header = rateLimitPolicyHeader(p, p.guard === null ? undefined : set.get(p.guard));
  const retry = deniedStatus && !d.allowed && d.retryAfterMs !== null ? `\r\nRetry-After: ${retryAfterSeconds(d.retryAfterMs)}` : '';
  const head = `${header}\r\nRateLimit: ${rateLimitHeader(d, bindingLimit(set, policy, d.policy))}${retry}`;
  return { head: contentType ? `${head}\r\nContent-Type: application/json` : head, json: decisionJson(d) };
}

/** xorshift32, seeded: the same decisions every run. */
function rng(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

describe('AnswerBytes: the bytes of the string answer', () => {
  const table = answerTable(policies);
  const w = new AnswerBytes();
  const limitsOf = (policy: string): string[] => {
    const p = policies.get(policy)!;
    return [...p.limits, ...(p.guard === null ? [] : policies.get(p.guard)!.limits)].map((l) => l.name);
  };

  it('for 20,000 decisions of every policy and limit, admitted and denied, /v1/check and /v1/auth', () => {
    const r = rng(0x5eed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
    const numbers = [0, 1, 9, 10, 99, 100, 599, 600, 601, 999, 1000, 1001, 59_999, 60_000, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 7,
      86_400_000, 999_999_999_999_999, 1_000_000_000_000_000, Number.MAX_SAFE_INTEGER];
    const num = (): number => (r() < 0.5 ? pick(numbers) : Math.floor(r() * 10 ** Math.floor(r() * 16)));
    let written = 0;
    for (let i = 0; i < 20_000; i++) {
      const policy = pick([...policies.keys()]);
      const allowed = r() < 0.5;
      const name = pick(limitsOf(policy));
      const d: Decision = {
        // the limit's own L (the usual case, written from a piece made per limit) or any other number
        allowed, limit: r() < 0.5 ? bindingLimit(policies, policy, name)!.limit : num(), remaining: num(), resetAfterMs: num(),
        retryAfterMs: allowed ? (r() < 0.9 ? 0 : num()) : r() < 0.2 ? null : r() < 0.1 ? 0 : num(), policy: name,
      };
      const deniedStatus = r() < 0.5;
      const contentType = !deniedStatus;
      const want = strings(policies, policy, d, deniedStatus, contentType);
      const head = text(w.header(d, table.get(policy), deniedStatus, contentType));
      expect(head).toBe(want.head);
      expect(text(w.json(d))).toBe(want.json);
      written++;
    }
    expect(written).toBe(20_000);
  });

  it('declines what it does not write: extra fields, an unknown limit or policy, numbers `${n}` writes otherwise', () => {
    const base: Decision = { allowed: true, limit: 100, remaining: 99, resetAfterMs: 600, retryAfterMs: 0, policy: 'free' };
    expect(text(w.header(base, table.get('free'), false, true))).toBe(strings(policies, 'free', base, false, true).head);
    const declined: Decision[] = [
      { ...base, reason: 'allowlist' },
      { ...base, degraded: true, degradedBy: 'open' },
      { ...base, delayMs: 10 },
      { ...base, stalenessMs: 5 },
      { ...base, shadow: { allowed: false, limit: 1, remaining: 0, resetAfterMs: 1, retryAfterMs: 1, policy: 'free' } } as unknown as Decision,
      { ...base, policy: 'nope' },
      { ...base, remaining: 1.5 },
      { ...base, remaining: -1 },
      { ...base, resetAfterMs: 2 ** 53 },
      { ...base, limit: Number.NaN },
      { ...base, allowed: false, retryAfterMs: 0.25 },
    ];
    for (const d of declined) {
      expect(w.header(d, table.get('free'), false, true)).toBeNull();
      expect(w.json(d)).toBeNull();
    }
    expect(w.header(base, undefined, false, true)).toBeNull();
  });

  it('a view per length, reused: nothing allocated per answer once a length was seen', () => {
    const d: Decision = { allowed: true, limit: 100, remaining: 42, resetAfterMs: 600, retryAfterMs: 0, policy: 'free' };
    const a = w.header(d, table.get('free'), false, true);
    const aj = w.json(d);
    const b = w.header({ ...d, remaining: 17 }, table.get('free'), false, true);
    const bj = w.json({ ...d, remaining: 17 });
    expect(b).toBe(a);
    expect(bj).toBe(aj);
    expect(text(b)).toContain('r=17');
  });
});
