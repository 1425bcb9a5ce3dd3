/**
 * `onStoreError: local` and the held strict call (src/engine/deciders/strict.ts, StrictDecider.held): a call
 * held while a key was seeded, and sent after the seed, is not a call that was in flight then. Its answer is
 * what the store holds after the seed, so it ends the stall for the key as any call sent after the seed does
 * (test/unit/engine/strict-seed-inflight.test.ts): the next stall starts the key from that answer, not from
 * what the kernel kept of the older seed.
 *
 * A call the store times out while a later one is still in flight leaves the held call held (it goes out when
 * that one answers): the key is decided locally meanwhile. The calls are caught on a MemoryStore (the Redis
 * store's pipelineCalls 2 and holdUnder 16; every turn holds) whose answers and failures the test gives; the
 * clock stands still (no refill). Token bucket, 5 a minute.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { StoreTimeoutError } from '../../../src/store/deadline.js';
import type { Store } from '../../../src/store/contract.js';
import type { Decision } from '../../../src/types/decision.js';

const T = 1_000_000;
const p = { algorithm: 'token_bucket' as const, limit: 5, period: 60_000, consistency: 'strict' as const, onStoreError: 'local' as const };

interface Caught {
  keys: string[];
  answer(): void;
  fail(e: Error): void;
}

async function setup(): Promise<{ l: Limiter; calls: Caught[] }> {
  const store = new MemoryStore({ clock: () => T, overLimitCache: false });
  const calls: Caught[] = [];
  const spy = Object.create(store) as Store;
  Object.defineProperty(spy, 'pipelineCalls', { value: 2 });
  Object.defineProperty(spy, 'holdUnder', { value: 16 });
  Object.defineProperty(spy, 'holdTurn', { value: 0 });
  spy.decideWide = (keys, args, now) => new Promise<number[]>((resolve, reject) => {
    const copy = [...args];
    calls.push({
      keys: keys.map((k) => /:(\w+)\}/.exec(k)![1]),
      // decided by the store when the test answers it (nothing else reaches the store meanwhile here)
      answer: () => void store.decideWide(keys, copy, now).then(resolve, reject),
      fail: reject,
    });
  });
  const l = await createLimiter({ policies: { p }, store: spy, clock: () => T });
  return { l, calls };
}

/** One turn of checks (key, cost), then the loop moves on (the turn's flush has run). */
async function turn(l: Limiter, checks: Array<[string, number]>): Promise<Array<Promise<Decision>>> {
  const ps = checks.map(([key, cost]) => l.check({ policy: 'p', key, cost }));
  await new Promise((r) => setImmediate(r));
  return ps;
}

const brief = (d: Decision): string => `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded === true ? ` ${d.degradedBy}` : ''}`;
const others = (n: number): Array<[string, number]> => Array.from({ length: n }, (_, i) => [`o${i}`, 1]);

/**
 * k learned at 4 left; then A (k: sent), B (16 other keys: sent) and H (z: held behind them). A times out with
 * B in flight: k is seeded with its 4 and decided locally (3 left in the kernel); H stays held.
 */
async function stallWithHeldCall(l: Limiter, calls: Caught[]): Promise<{ b: Array<Promise<Decision>> }> {
  const first = await turn(l, [['k', 1]]);
  calls[0].answer();
  expect(brief(await first[0])).toBe('allow r=4');
  const a = await turn(l, [['k', 1]]);
  const b = await turn(l, others(16));
  await turn(l, [['z', 1]]);
  expect(calls.map((c) => c.keys.length)).toEqual([1, 1, 16]);
  calls[1].fail(new StoreTimeoutError(20));
  expect(brief(await a[0])).toBe('allow r=3 local');
  return { b };
}

/** The next stall: each check of k goes in a call of its own, which fails (the connection lost). */
async function nextStall(l: Limiter, calls: Caught[], n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const [d] = await turn(l, [['k', 1]]);
    calls[calls.length - 1].fail(new Error('connection lost'));
    out.push(brief(await d));
  }
  return out;
}

describe('a held call sent after a key was seeded', () => {
  it('a check of the key added to it after the seed: its answer ends the stall, the next starts from that answer', async () => {
    const { l, calls } = await setup();
    try {
      const { b } = await stallWithHeldCall(l, calls);
      // k again, cost 3: added to the held call, after the seed
      const h = await turn(l, [['k', 3]]);
      expect(calls.length).toBe(3);
      calls[2].answer();
      await Promise.all(b);
      await new Promise((r) => setImmediate(r));
      expect(calls[3].keys).toEqual(['z', 'k']);
      calls[3].answer();
      // the store held 4 (the local admission is never told to it): 4 − 3 = 1 left
      expect(brief(await h[0])).toBe('allow r=1');
      // the next stall starts k from that 1, not from the 3 the kernel kept of the older seed
      expect(await nextStall(l, calls, 3)).toEqual(['allow r=0 local', 'deny r=0 local', 'deny r=0 local']);
    } finally {
      await l.close();
    }
  });

  it('a check of the key held before the seed and sent after it: its answer ends the stall as well', async () => {
    const { l, calls } = await setup();
    try {
      const first = await turn(l, [['k', 1]]);
      calls[0].answer();
      expect(brief(await first[0])).toBe('allow r=4');
      const a = await turn(l, [['k', 1]]);
      const b = await turn(l, others(16));
      // k, cost 3: held behind A and B, before the seed
      const h = await turn(l, [['k', 3]]);
      calls[1].fail(new StoreTimeoutError(20));
      expect(brief(await a[0])).toBe('allow r=3 local');
      calls[2].answer();
      await Promise.all(b);
      await new Promise((r) => setImmediate(r));
      expect(calls[3].keys).toEqual(['k']);
      calls[3].answer();
      expect(brief(await h[0])).toBe('allow r=1');
      expect(await nextStall(l, calls, 3)).toEqual(['allow r=0 local', 'deny r=0 local', 'deny r=0 local']);
    } finally {
      await l.close();
    }
  });

  it('a call already in flight at the seed does not end the stall: the kernel goes on from its own state', async () => {
    const { l, calls } = await setup();
    try {
      const first = await turn(l, [['k', 1]]);
      calls[0].answer();
      expect(brief(await first[0])).toBe('allow r=4');
      const a = await turn(l, [['k', 1]]);
      // B: k (cost 3) and 15 other keys, sent; then z, held
      const b = await turn(l, [['k', 3], ...others(15)]);
      await turn(l, [['z', 1]]);
      expect(calls.map((c) => c.keys.length)).toEqual([1, 1, 16]);
      calls[1].fail(new StoreTimeoutError(20));
      expect(brief(await a[0])).toBe('allow r=3 local');
      calls[2].answer();
      // the store held 4: 1 left; that answer cannot count the local admission made after B was sent
      expect(brief(await b[0])).toBe('allow r=1');
      await new Promise((r) => setImmediate(r));
      expect(calls[3].keys).toEqual(['z']);
      calls[3].answer();
      expect(await nextStall(l, calls, 4)).toEqual(['allow r=2 local', 'allow r=1 local', 'allow r=0 local', 'deny r=0 local']);
    } finally {
      await l.close();
    }
  });
});
