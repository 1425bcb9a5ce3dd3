/**
 * Review of the held strict call (src/engine/deciders/strict.ts, StrictDecider.held): what it must keep of the
 * rules every call keeps. The calls are caught on a MemoryStore (holdUnder 16, pipelineCalls 2, as the Redis
 * store's defaults) whose answers the test releases.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { StoreTimeoutError } from '../../../src/store/deadline.js';
import { UNIQUE_KEY, type Store } from '../../../src/store/contract.js';
import type { PolicySpec } from '../../../src/index.js';
import type { Decision } from '../../../src/types/decision.js';

const T = 1_000_000;
const tb = { algorithm: 'token_bucket' as const, limit: 10, period: 60_000, consistency: 'strict' as const, onStoreError: 'closed' as const };

interface Caught {
  keys: string[];
  /** Each leg's algorithm code as sent (UNIQUE_KEY added when marked). */
  codes: number[];
  answer(): void;
  fail(e: Error): void;
}

async function setup(policies: Record<string, PolicySpec>, opts: { maxPending?: number } = {}): Promise<{ l: Limiter; calls: Caught[] }> {
  const store = new MemoryStore({ clock: () => T, overLimitCache: false });
  const calls: Caught[] = [];
  const spy = Object.create(store) as Store;
  Object.defineProperty(spy, 'pipelineCalls', { value: 2 });
  Object.defineProperty(spy, 'holdUnder', { value: 16 });
  spy.decideWide = (keys, args, now) => new Promise<number[]>((resolve, reject) => {
    const copy = [...args];
    calls.push({
      keys: [...keys],
      codes: keys.map((_, j) => copy[6 * j]),
      answer: () => void store.decideWide(keys, copy, now).then(resolve, reject),
      fail: reject,
    });
  });
  const l = await createLimiter({ policies, store: spy, clock: () => T, ...opts });
  return { l, calls };
}

/** One turn of checks, then the loop moves on (the turn's flush has run). */
async function turn(l: Limiter, checks: Array<[string, string]>): Promise<Array<Promise<Decision>>> {
  const ps = checks.map(([policy, key]) => l.check({ policy, key, cost: 1 }));
  ps.forEach((p) => p.catch(() => undefined));
  await new Promise((r) => setImmediate(r));
  return ps;
}

describe('the held strict call, reviewed', () => {
  it('counts held checks as pending: maxPending bounds them like checks in flight', async () => {
    const { l, calls } = await setup({ p: tb }, { maxPending: 4 });
    try {
      const ps: Array<Promise<Decision>> = [];
      for (let i = 0; i < 10; i++) ps.push(...await turn(l, [['p', `k${i}`]]));
      // answer what went out (and what the answers send)
      for (let n = 0; n < calls.length; n++) {
        calls[n].answer();
        await new Promise((r) => setImmediate(r));
      }
      const settled = await Promise.allSettled(ps);
      // one call in flight, the others held: at most 4 checks pending at once, the rest refused OVERLOADED
      expect(settled.map((s) => (s.status === 'fulfilled' ? 'decided' : (s.reason as { code?: string }).code))).toEqual([
        ...Array.from({ length: 4 }, () => 'decided'), ...Array.from({ length: 6 }, () => 'OVERLOADED')]);
    } finally {
      await l.close();
    }
  });

  // p gains a guard, or loses one: its version (a hash of its own limits) and so its keys stay; its checks get,
  // or lose, a guard leg
  it.each([
    ['gains', { p: tb, g: { ...tb, limit: 1000 } }, { ...tb, guard: 'g' }],
    ['loses', { p: { ...tb, guard: 'g' }, g: { ...tb, limit: 1000 } }, tb],
  ] as const)('a reload in which p %s a guard while a call is held: no call marks UNIQUE_KEY a key another check of the call names', async (_, policies, next) => {
    const { l, calls } = await setup(policies);
    try {
      const ps = [...await turn(l, [['p', 'x']])];
      ps.push(...await turn(l, [['p', 'a']]));
      expect(calls.length).toBe(1);
      await l.reload({ ...policies, p: next });
      ps.push(...await turn(l, [['p', 'a']]));
      calls[0].answer();
      await new Promise((r) => setImmediate(r));
      for (const c of calls.slice(1)) c.answer();
      await Promise.allSettled(ps);
      for (const c of calls) {
        c.keys.forEach((k, j) => {
          if (c.codes[j] >= UNIQUE_KEY) expect(c.keys.filter((x) => x === k).length, `${k} marked in ${c.keys.join(' ')}`).toBe(1);
        });
      }
    } finally {
      await l.close();
    }
  });

  it('under `local`, a timeout does not decide held checks before the earlier checks of a call still in flight', async () => {
    // k: 2 tokens left as Redis last said; then A (another key), B (k and 19 others: sent, 16+), H (k: held)
    const lp = { ...tb, limit: 3, onStoreError: 'local' as const };
    const { l, calls } = await setup({ p: lp });
    try {
      const first = await turn(l, [['p', 'k']]);
      calls[0].answer();
      expect((await first[0]).remaining).toBe(2);
      const a = await turn(l, [['p', 'z']]);
      const b = await turn(l, [['p', 'k'], ['p', 'k'], ...Array.from({ length: 18 }, (_, i): [string, string] => ['p', `o${i}`])]);
      const h = await turn(l, [['p', 'k']]);
      expect(calls.map((c) => c.keys.length)).toEqual([1, 1, 20]);
      calls[1].fail(new StoreTimeoutError(20));
      await new Promise((r) => setImmediate(r));
      calls[2].fail(new StoreTimeoutError(20));
      const ds = await Promise.all([...a, ...b.slice(0, 2), ...h]);
      // k's checks in the order they were made: B's two take the 2 tokens, H's (made last) is denied
      expect(ds.slice(1).map((d) => [d.allowed, d.degradedBy])).toEqual([[true, 'local'], [true, 'local'], [false, 'local']]);
    } finally {
      await l.close();
    }
  });

  it('when the call ahead timed out but an earlier-sent call is still in flight, its answer sends the held call', async () => {
    const { l, calls } = await setup({ p: tb });
    try {
      const a = await turn(l, [['p', 'z']]);
      const b = await turn(l, Array.from({ length: 16 }, (_, i): [string, string] => ['p', `o${i}`]));
      const h = await turn(l, [['p', 'k']]);
      expect(calls.map((c) => c.keys.length)).toEqual([1, 16]);
      calls[0].fail(new StoreTimeoutError(20));
      expect((await a[0]).degradedBy).toBe('closed');
      // still held: B, sent before it, decides its fate
      await new Promise((r) => setImmediate(r));
      expect(calls.length).toBe(2);
      calls[1].answer();
      await Promise.all(b);
      await new Promise((r) => setImmediate(r));
      expect(calls.map((c) => c.keys.length)).toEqual([1, 16, 1]);
      calls[2].answer();
      expect((await h[0]).degraded ?? false).toBe(false);
    } finally {
      await l.close();
    }
  });

  it('close() while a call is held waits for it to be sent and answered', async () => {
    const { l, calls } = await setup({ p: tb });
    const first = await turn(l, [['p', 'k0']]);
    const held = await turn(l, [['p', 'k1'], ['p', 'k2']]);
    let closed = false;
    const closing = l.close().then(() => (closed = true));
    await new Promise((r) => setImmediate(r));
    expect(closed).toBe(false);
    calls[0].answer();
    await first[0];
    await new Promise((r) => setImmediate(r));
    expect(calls.map((c) => c.keys.length)).toEqual([1, 2]);
    expect(closed).toBe(false);
    calls[1].answer();
    await closing;
    expect((await Promise.all(held)).map((d) => d.remaining)).toEqual([9, 9]);
  });

  it('a reload sends the held call at once, ahead of any call built after it', async () => {
    const policies = { p: tb, q: tb };
    const { l, calls } = await setup(policies);
    try {
      const ps = [...await turn(l, [['p', 'a']]), ...await turn(l, [['p', 'b']])];
      expect(calls.length).toBe(1);
      await l.reload({ ...policies, q: { ...tb, limit: 20 } });
      const sent = calls.map((c) => c.keys.map((k) => /:(\w+)\}/.exec(k)![1]));
      for (let n = 0; n < calls.length; n++) {
        calls[n].answer();
        await new Promise((r) => setImmediate(r));
      }
      expect(sent).toEqual([['a'], ['b']]);
      expect((await Promise.all(ps)).map((d) => d.remaining)).toEqual([9, 9]);
    } finally {
      await l.close();
    }
  });
});
