/**
 * SyncWriter under merges that are slow, fail, or time out (issue #20, items 1-3), against a fake store:
 * admissions made while a merge is in flight survive its install; failing merges back off; a merge that
 * timed out is split, its parts naming it; close() retries until its deadline, then reports and arms nothing.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StoreTimeoutError, type MergeOptions, type RedisStore } from '../../../src/store/redis.js';
import { MIN_SPLIT, SyncWriter } from '../../../src/store/sync.js';
import { leg, record } from '../../helpers/sync-legs.js';

interface Call {
  keys: string[];
  deltas: number[];
  id: string;
  parents: readonly string[];
  maxMs: number | undefined;
}

type Reply = (keys: string[], args: number[], nowMs: number) => Promise<number[]>;

/** A store whose merge answers with `reply` (default: state = (delta, 0, now) per key). */
function fakeStore(): { store: RedisStore; calls: Call[]; reply: { fn: Reply } } {
  const calls: Call[] = [];
  const reply = { fn: (async (keys, args, nowMs) => keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs])) as Reply };
  const store = {
    merge: (keys: string[], args: number[], nowMs: number, id: string, o: MergeOptions = {}): Promise<number[]> => {
      calls.push({ keys, deltas: keys.map((_, k) => args[5 * k + 4]), id, parents: o.parents ?? [], maxMs: o.maxMs });
      return reply.fn(keys, args, nowMs);
    },
  } as unknown as RedisStore;
  return { store, calls, reply };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('SyncWriter: admissions during a merge in flight (item 3)', () => {
  it.each([
    // algorithm, merged state from Redis, cost admitted during the flight, the state installed
    ['token_bucket', 0, [40_000, 0, 5_000], 3, [37_000, 0, 5_000]], // x = tokens·P: 3 tokens of P = 1000
    ['gcra', 1, [5_200, 30, 5_000], 2, [5_220, 30, 5_000]], // TAT pushed by 2·P/L = 20 ms
    ['gcra, TAT in the past', 1, [4_000, 0, 5_000], 1, [5_010, 0, 5_000]],
    ['fixed_window', 2, [7, 0, 5_000], 4, [11, 0, 5_000]],
    ['sliding_window', 3, [7, 2, 5_000], 4, [7, 6, 5_000]],
  ])('%s: the merged state is installed with what was admitted meanwhile spent', async (_name, alg, merged, cost, want) => {
    const { store, reply } = fakeStore();
    let release!: () => void;
    reply.fn = () => new Promise((r) => (release = () => r(merged)));
    const installed: number[][] = [];
    const w = new SyncWriter(store, () => 5_000, (_legs, states) => void installed.push([...states]), { intervalMs: 60_000 });
    const l = leg(1, { algorithmCode: alg, limit: 100, periodMs: 1000 });
    record(w, l, 1);
    const flight = w.flush();
    await Promise.resolve();
    record(w, l, cost); // admitted while the merge is in flight: Redis has not seen it yet
    release();
    await flight;
    expect(installed).toStrictEqual([want]);
    // and it is merged next, so Redis ends with both
    reply.fn = async (keys, args, nowMs) => keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs]);
    await w.flush();
    expect(w.stats()).toMatchObject({ merges: 2, pendingKeys: 0 });
    await w.close(0);
  });
});

describe('SyncWriter: merges that fail or time out (item 1)', () => {
  it('splits a merge that timed out into halves that name it, down to MIN_SPLIT legs, each applied once', async () => {
    const { store, calls, reply } = fakeStore();
    reply.fn = () => Promise.reject(new StoreTimeoutError(20));
    const w = new SyncWriter(store, () => 1_000, () => undefined, { intervalMs: 60_000 });
    const n = 4 * MIN_SPLIT;
    for (let i = 0; i < n; i++) record(w, leg(i), 1);
    await w.flush();
    expect(calls.map((c) => c.keys.length)).toStrictEqual([n]);
    await w.flush(); // the first half of the split
    expect(calls[1].keys).toStrictEqual(calls[0].keys.slice(0, n / 2));
    expect(calls[1].parents).toStrictEqual([calls[0].id]);
    await w.flush(); // that half, split again
    expect(calls[2].keys).toStrictEqual(calls[0].keys.slice(0, n / 4));
    expect(calls[2].parents).toStrictEqual([calls[0].id, calls[1].id]);
    await w.flush(); // MIN_SPLIT legs: retried as it is
    expect(calls[3]).toStrictEqual(calls[2]);
    reply.fn = async (keys, args, nowMs) => keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs]);
    await w.flush();
    const done = calls.slice(4);
    expect(done.map((c) => c.keys.length)).toStrictEqual([MIN_SPLIT, MIN_SPLIT, 2 * MIN_SPLIT]);
    expect(done[0]).toMatchObject({ id: calls[2].id });
    expect(done[2].parents).toStrictEqual([calls[0].id]); // the other half of the first split
    // every key exactly once among the merges that succeeded, with its delta
    expect(done.flatMap((c) => c.keys).sort()).toStrictEqual(calls[0].keys.slice().sort());
    expect(w.stats()).toMatchObject({ merges: 3, failures: 4, pendingKeys: 0 });
    await w.close(0);
  });

  it('does not split a merge that failed for another reason (Redis down says nothing about its size)', async () => {
    const { store, calls, reply } = fakeStore();
    reply.fn = () => Promise.reject(new Error('connect ECONNREFUSED'));
    const w = new SyncWriter(store, () => 1_000, () => undefined, { intervalMs: 60_000 });
    for (let i = 0; i < 4 * MIN_SPLIT; i++) record(w, leg(i), 1);
    await w.flush();
    await w.flush();
    expect(calls[1]).toStrictEqual(calls[0]);
    await w.close(0);
  });

  it('waits longer after each failure (intervalMs doubling, at most MAX_BACKOFF_MS, ±25%), and intervalMs again after a success', async () => {
    vi.useFakeTimers();
    const { store, calls, reply } = fakeStore();
    let fail = true;
    reply.fn = async (keys, args, nowMs) => {
      if (fail) throw new Error('down');
      return keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs]);
    };
    const w = new SyncWriter(store, () => 1_000, () => undefined, { intervalMs: 20 });
    record(w, leg(1), 1);
    const at: number[] = [];
    const t0 = Date.now();
    for (let i = 0; i < 9; i++) {
      const before = calls.length;
      while (calls.length === before) await vi.advanceTimersByTimeAsync(1);
      at.push(Date.now() - t0);
    }
    const gaps = at.slice(1).map((t, i) => t - at[i]);
    // the first attempt after intervalMs; then 40, 80, ..., capped at 1000 (each ±25%, plus the 1 ms step)
    expect(at[0]).toBe(20);
    const nominal = [40, 80, 160, 320, 640, 1000, 1000, 1000];
    gaps.forEach((g, i) => {
      expect(g).toBeGreaterThanOrEqual(Math.floor(0.75 * nominal[i]));
      expect(g).toBeLessThanOrEqual(Math.ceil(1.25 * nominal[i]) + 1);
    });
    fail = false;
    const before = calls.length;
    while (calls.length === before) await vi.advanceTimersByTimeAsync(1);
    expect(w.stats()).toMatchObject({ merges: 1, pendingKeys: 0 });
    record(w, leg(1), 1);
    const t1 = Date.now();
    while (calls.length === before + 1) await vi.advanceTimersByTimeAsync(1);
    expect(Date.now() - t1).toBe(20);
    await w.close(0);
  });

  it('past maxBytes of keys held, drops new keys\' deltas, counts them, and warns at most once a second', async () => {
    const { store } = fakeStore();
    const warned: object[] = [];
    const w = new SyncWriter(store, () => 1_000, () => undefined, {
      intervalMs: 60_000, maxBytes: 3 * (200 + 2), warn: (o) => void warned.push(o),
    });
    for (let i = 0; i < 5; i++) record(w, leg(i), 1); // k0..k4: 2 bytes + 200 each; room for 3
    record(w, leg(0), 1); // known: still counted
    expect(w.stats()).toMatchObject({ dropped: 2, pendingKeys: 3 });
    expect(warned).toStrictEqual([{ dropped: 1, droppedTotal: 1, maxKeys: 1_000_000, maxBytes: 606 }]);
    await w.close(0);
  });
});

describe('SyncWriter.close (item 2)', () => {
  it('retries until its deadline, cuts each merge to the time left, then reports what it could not merge and arms no timer', async () => {
    vi.useFakeTimers();
    vi.spyOn(Math, 'random').mockReturnValue(0.5); // no jitter: waits of exactly 40, 80, 160 ms
    const { store, calls, reply } = fakeStore();
    reply.fn = () => Promise.reject(new Error('down'));
    const warned: Array<[object, string]> = [];
    const w = new SyncWriter(store, () => 1_000, () => undefined, { intervalMs: 20, warn: (o, m) => void warned.push([o, m]) });
    record(w, leg(1), 3);
    record(w, leg(2), 4);
    let lost: unknown = null;
    const t0 = Date.now();
    void w.close(300).then((l) => (lost = l));
    while (lost === null) await vi.advanceTimersByTimeAsync(1);
    expect(Date.now() - t0).toBe(300);
    expect(lost).toStrictEqual({ keys: 2, tokens: 7 });
    expect(warned).toStrictEqual([[{ keys: 2, tokens: 7, deadlineMs: 300 }, expect.stringMatching(/not merged/)]]);
    // attempts at 0, 40, 120, 280 ms, each cut to the time left
    expect(calls.map((c) => c.maxMs)).toStrictEqual([300, 260, 180, 20]);
    // nothing re-arms: a touch after close() schedules no merge
    record(w, leg(3), 1);
    expect(vi.getTimerCount()).toBe(0);
    vi.restoreAllMocks();
  });

  it('stops retrying once Redis answers, and reports nothing lost', async () => {
    const { store, calls, reply } = fakeStore();
    let fails = 2;
    reply.fn = async (keys, args, nowMs) => {
      if (fails-- > 0) throw new Error('down');
      return keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs]);
    };
    const w = new SyncWriter(store, () => 1_000, () => undefined, { intervalMs: 20 });
    record(w, leg(1), 3);
    expect(await w.close(5_000)).toStrictEqual({ keys: 0, tokens: 0 });
    expect(calls).toHaveLength(3);
    expect(w.stats()).toMatchObject({ merges: 1, failures: 2, pendingKeys: 0 });
  });
});
