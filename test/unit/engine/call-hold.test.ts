/**
 * Small script calls wait behind the one in flight (src/engine/deciders/strict.ts, StrictDecider.held): with
 * the Redis store's `holdUnder` of 16, a turn that would send a call of fewer than 16 checks while another
 * call is in flight holds them (if it brought at least `holdTurn` strict checks: 8 on Redis, every turn here
 * unless a test says otherwise); later turns add to the held call; it goes out when a call answers, or as soon
 * as it has 16 checks, or before an admin reset's delete. The order in which the checks reach the store is the
 * order they were made. When the call it waited behind timed out, the held checks take the failure rule at
 * once and are never sent. The calls are caught on a MemoryStore, which runs each when
 * it is sent and answers when the test releases it.
 */
import { describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { MemoryStore } from '../../../src/store/memory.js';
import { StoreTimeoutError } from '../../../src/store/deadline.js';
import type { Store } from '../../../src/store/contract.js';
import type { Decision } from '../../../src/types/decision.js';
import { RedisStore } from '../../../src/store/redis.js';
import { sharedRedis } from '../../helpers/redis.js';

const T = 1_000_000;
const tb = { algorithm: 'token_bucket' as const, limit: 10, period: 60_000, consistency: 'strict' as const, onStoreError: 'closed' as const };

interface Held {
  keys: string[];
  answer(): void;
  fail(e: Error): void;
}

/** A limiter on a MemoryStore whose script calls wait until the test answers or fails them. */
async function setup(holdTurn = 0): Promise<{ l: Limiter; calls: Held[]; log: string[] }> {
  const store = new MemoryStore({ clock: () => T, overLimitCache: false });
  const calls: Held[] = [];
  /** The store's calls and deletes, in the order they were made. */
  const log: string[] = [];
  const name = (k: string): string => /:(k\d+)\}/.exec(k)![1];
  const spy = Object.create(store) as Store;
  // the Redis store's defaults
  Object.defineProperty(spy, 'pipelineCalls', { value: 2 });
  Object.defineProperty(spy, 'holdUnder', { value: 16 });
  // every turn holds, unless the test asks for the Redis store's 8
  Object.defineProperty(spy, 'holdTurn', { value: holdTurn });
  spy.remove = (keys, guardKey) => {
    log.push(`remove ${keys.map(name).join(' ')}`);
    return store.remove(keys, guardKey);
  };
  spy.decideWide = (keys, args, now) => new Promise<number[]>((resolve, reject) => {
    const ran = store.decideWide(keys, [...args], now);
    log.push(`call ${keys.map(name).join(' ')}`);
    calls.push({
      keys: keys.map((k) => /:(k\d+)\}/.exec(k)![1]),
      // run by the store when sent, as Redis runs calls in the order they reach it; answered when the test says
      answer: () => void ran.then(resolve, reject),
      fail: reject,
    });
  });
  const l = await createLimiter({ policies: { p: tb }, store: spy, clock: () => T });
  return { l, calls, log };
}

/** One turn: checks of keys k<from> … k<from + n − 1>, then the loop moves on (the turn's flush has run). */
async function turn(l: Limiter, from: number, n: number): Promise<Array<Promise<Decision>>> {
  const ps = Array.from({ length: n }, (_, i) => l.check({ policy: 'p', key: `k${from + i}`, cost: 1 }));
  await new Promise((r) => setImmediate(r));
  return ps;
}

const range = (from: number, n: number): string[] => Array.from({ length: n }, (_, i) => `k${from + i}`);

describe('a small strict call waits behind the call in flight', () => {
  it('holds turns of fewer than 16 checks until the call ahead answers, then sends them as one call, in order', async () => {
    const { l, calls } = await setup();
    try {
      const first = await turn(l, 0, 1);
      expect(calls.map((c) => c.keys)).toEqual([['k0']]);
      const a = await turn(l, 1, 3);
      const b = await turn(l, 4, 5);
      // nothing sent while k0's call is in flight
      expect(calls.length).toBe(1);
      calls[0].answer();
      expect((await first[0]).remaining).toBe(9);
      await new Promise((r) => setImmediate(r));
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 8)]);
      calls[1].answer();
      expect((await Promise.all([...a, ...b])).map((d) => [d.allowed, d.remaining, d.degraded ?? false]))
        .toEqual(Array.from({ length: 8 }, () => [true, 9, false]));
      // nothing in flight: a turn of one goes at once
      const last = await turn(l, 9, 1);
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 8), ['k9']]);
      calls[2].answer();
      expect((await last[0]).remaining).toBe(9);
    } finally {
      await l.close();
    }
  });

  it('sends the held call once it has 16 checks, without waiting', async () => {
    const { l, calls } = await setup();
    try {
      const ps = [...await turn(l, 0, 1), ...await turn(l, 1, 10)];
      expect(calls.length).toBe(1);
      ps.push(...await turn(l, 11, 6));
      // 10 + 6: the held call reached 16 in this turn and went out beside k0's
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 16)]);
      ps.push(...await turn(l, 17, 2));
      expect(calls.length).toBe(2);
      calls[1].answer();
      calls[0].answer();
      await new Promise((r) => setImmediate(r));
      // an answer sends what was held meanwhile
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 16), range(17, 2)]);
      calls[2].answer();
      expect((await Promise.all(ps)).every((d) => d.allowed && d.remaining === 9)).toBe(true);
    } finally {
      await l.close();
    }
  });

  it('when the call ahead timed out, the held checks take the failure rule at once and are never sent', async () => {
    const { l, calls } = await setup();
    try {
      const first = await turn(l, 0, 1);
      const held = await turn(l, 1, 4);
      calls[0].fail(new StoreTimeoutError(20));
      const ds = await Promise.all([...first, ...held]);
      expect(ds.map((d) => [d.allowed, d.degraded, d.degradedBy])).toEqual(Array.from({ length: 5 }, () => [false, true, 'closed']));
      expect(calls.length).toBe(1);
    } finally {
      await l.close();
    }
  });

  it('when the call ahead failed otherwise (a script error), the held call is sent', async () => {
    const { l, calls } = await setup();
    try {
      const first = await turn(l, 0, 1);
      const held = await turn(l, 1, 2);
      calls[0].fail(new Error('ERR user_script:1: something'));
      expect((await first[0]).degraded).toBe(true);
      await new Promise((r) => setImmediate(r));
      expect(calls.map((c) => c.keys)).toEqual([['k0'], ['k1', 'k2']]);
      calls[1].answer();
      expect((await Promise.all(held)).map((d) => [d.allowed, d.remaining])).toEqual([[true, 9], [true, 9]]);
    } finally {
      await l.close();
    }
  });

  it('an admin reset sends the held call before its delete: a check made before the reset is counted before it', async () => {
    const { l, calls, log } = await setup();
    try {
      const first = await turn(l, 0, 1);
      const held = await turn(l, 1, 1);
      expect(calls.length).toBe(1);
      const reset = l.reset({ policy: 'p', key: 'k1' });
      await new Promise((r) => setImmediate(r));
      expect(log).toEqual(['call k0', 'call k1', 'remove k1']);
      calls[0].answer();
      calls[1].answer();
      expect((await held[0]).remaining).toBe(9);
      expect((await first[0]).remaining).toBe(9);
      await reset;
      // the reset removed k1's state after the check spent from it: full again
      const p = l.check({ policy: 'p', key: 'k1', cost: 0 });
      await new Promise((r) => setImmediate(r));
      calls[2].answer();
      expect((await p).remaining).toBe(10);
    } finally {
      await l.close();
    }
  });

  it('an admin inspect sends the held call before its reads: it sees a check made before it', async () => {
    const { l, calls, log } = await setup();
    try {
      const first = await turn(l, 0, 1);
      const held = await turn(l, 1, 1);
      const inspected = l.inspect({ policy: 'p', key: 'k1' });
      await new Promise((r) => setImmediate(r));
      const sent = [...log];
      for (let n = 0; n < calls.length; n++) {
        calls[n].answer();
        await new Promise((r) => setImmediate(r));
      }
      // the held call, then the inspect's own cost-0 check
      expect(sent).toEqual(['call k0', 'call k1', 'call k1']);
      expect((await inspected).limits.map((s) => [s.held, s.remaining])).toEqual([[true, 9]]);
      expect((await Promise.all([...first, ...held])).map((d) => d.remaining)).toEqual([9, 9]);
    } finally {
      await l.close();
    }
  });

  it('with the Redis store\'s holdTurn of 8, a turn of fewer strict checks sends its call at once, a busier one holds', async () => {
    const { l, calls } = await setup(8);
    try {
      const ps = [...await turn(l, 0, 1), ...await turn(l, 1, 7)];
      // 7 checks in a turn: few checks at a time, sent beside k0's call
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 7)]);
      ps.push(...await turn(l, 8, 8));
      // 8: held
      expect(calls.length).toBe(2);
      ps.push(...await turn(l, 16, 2));
      // a smaller turn sends what was held with its own checks, at once
      expect(calls.map((c) => c.keys)).toEqual([['k0'], range(1, 7), range(8, 10)]);
      for (const c of calls) c.answer();
      expect((await Promise.all(ps)).every((d) => d.allowed && d.remaining === 9)).toBe(true);
    } finally {
      await l.close();
    }
  });

  it('the Redis store holds calls under 16 checks by default; redis.holdUnder 0 sends every call at once', async () => {
    const redis = await sharedRedis();
    const stores = [RedisStore.create({ url: redis.url }), RedisStore.create({ url: redis.url, holdUnder: 0 })];
    try {
      expect(stores.map((st) => [st.holdUnder, st.holdTurn])).toEqual([[16, 8], [0, 0]]);
      expect(new MemoryStore().holdUnder).toBe(0);
    } finally {
      await Promise.all(stores.map((st) => st.close()));
      await redis.stop();
    }
  });
});
