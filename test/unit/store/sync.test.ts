/**
 * SyncWriter's bookkeeping against a fake store: deltas coalesced per leg (found by its kernel hash, limit id
 * and namespace), legs remembered from merge to merge, merges in doubt retried as they were, maxKeys, forget().
 */
import { describe, expect, it } from 'vitest';
import type { RedisStore } from '../../../src/store/redis.js';
import { MAX_MERGE, SyncWriter } from '../../../src/store/sync.js';
import type { SyncLeg } from '../../../src/store/sync-deltas.js';
import { leg, record } from '../../helpers/sync-legs.js';

interface Call {
  keys: string[];
  args: number[];
  id: string;
}

/**
 * A store whose merge records its calls and fails while `down` is set (or on call number `failAt`); states
 * are (delta, 0, now).
 */
function fakeStore(): { store: RedisStore; calls: Call[]; down: { value: boolean; failAt?: number } } {
  const calls: Call[] = [];
  const down: { value: boolean; failAt?: number } = { value: false };
  const store = {
    merge: async (keys: string[], args: number[], nowMs: number, id: string): Promise<number[]> => {
      calls.push({ keys, args, id });
      if (down.value || calls.length === down.failAt) throw new Error('down');
      return keys.flatMap((_, k) => [args[5 * k + 4], 0, nowMs]);
    },
  } as unknown as RedisStore;
  return { store, calls, down };
}

/** Delta per key of one call. */
function deltas(c: Call): Record<string, number> {
  return Object.fromEntries(c.keys.map((k, i) => [k, c.args[5 * i + 4]]));
}

function writer(store: RedisStore, installed: SyncLeg[][] = [], maxKeys?: number, clock = (): number => 1_000): SyncWriter {
  return new SyncWriter(store, clock, (legs) => void installed.push(legs), { intervalMs: 60_000, maxKeys });
}

describe('SyncWriter', () => {
  it('sums each leg\'s costs into one delta per merge and remembers the leg across merges', async () => {
    const { store, calls } = fakeStore();
    const installed: SyncLeg[][] = [];
    const w = writer(store, installed);
    expect(record(w, leg(1), 2)).toBe(false);
    expect(record(w, leg(1), 3)).toBe(true);
    expect(record(w, leg(2), 1)).toBe(false);
    expect(w.stats().pendingKeys).toBe(2);
    await w.flush();
    expect(calls).toHaveLength(1);
    expect(deltas(calls[0])).toStrictEqual({ k1: 5, k2: 1 });
    expect(calls[0].args.slice(0, 4)).toStrictEqual([2, 100, 1000, 100]);
    expect(installed[0].map((l) => l.redisKey)).toStrictEqual(['k1', 'k2']);
    expect(w.stats().pendingKeys).toBe(0);
    // known legs start a new delta without being described again
    expect(record(w, leg(2), 4)).toBe(true);
    await w.flush();
    expect(deltas(calls[1])).toStrictEqual({ k2: 4 });
    await w.flush(); // nothing pending: no call
    expect(calls).toHaveLength(2);
    await w.close();
  });

  it('tells legs apart by hash, limit id and namespace', async () => {
    const { store, calls } = fakeStore();
    const w = writer(store);
    const a = leg(1);
    const variants = [a, leg(1, { redisKey: 'hi', hashHi: 99 }), leg(1, { redisKey: 'lid', limitId: 3 }), leg(1, { redisKey: 'ns', ns: 7 })];
    for (const l of variants) expect(record(w, l, 1)).toBe(false);
    for (const l of variants) expect(record(w, l, 1)).toBe(true);
    await w.flush();
    expect(deltas(calls[0])).toStrictEqual({ k1: 2, hi: 2, lid: 2, ns: 2 });
    await w.close();
  });

  it('keeps many legs exact through table growth', async () => {
    const { store, calls } = fakeStore();
    const w = writer(store);
    const n = 20_000;
    for (let round = 0; round < 3; round++) for (let i = 0; i < n; i++) record(w, leg(i), 1 + (i % 3));
    await w.flush();
    const d: Record<string, number> = {};
    for (const c of calls) Object.assign(d, deltas(c));
    expect(Object.keys(d)).toHaveLength(n);
    for (let i = 0; i < n; i++) expect(d[`k${i}`]).toBe(3 * (1 + (i % 3)));
    await w.close();
  });

  it('forgets legs untouched for a while (swept every 256 merges), and describes them again', async () => {
    const { store, calls } = fakeStore();
    const w = writer(store);
    for (let i = 0; i < 5_000; i++) record(w, leg(i), 1);
    await w.flush();
    // merges of one other leg only: the 5,000 are still known for a while, then forgotten
    record(w, leg(9_999_999, { redisKey: 'hot' }), 1);
    await w.flush();
    expect(record(w, leg(1), 1)).toBe(true);
    for (let r = 0; r < 256; r++) {
      record(w, leg(9_999_999, { redisKey: 'hot' }), 1);
      await w.flush();
    }
    expect(record(w, leg(0), 1)).toBe(false);
    expect(record(w, leg(9_999_999, { redisKey: 'hot' }), 1)).toBe(true);
    await w.flush();
    expect(deltas(calls.at(-1)!)).toStrictEqual({ k0: 1, hot: 1 });
    await w.close();
  });

  it('retries a merge in doubt under its id with its deltas; newer deltas wait and go next', async () => {
    const { store, calls, down } = fakeStore();
    const w = writer(store);
    record(w, leg(1), 2);
    down.value = true;
    await w.flush();
    expect(w.stats().failures).toBe(1);
    record(w, leg(1), 5); // a new delta for the same key, behind the one in doubt
    record(w, leg(2), 1);
    expect(w.stats().pendingKeys).toBe(3);
    await w.flush();
    expect(calls).toHaveLength(2);
    expect(calls[1]).toStrictEqual(calls[0]);
    down.value = false;
    await w.flush();
    expect(calls[2].id).toBe(calls[0].id);
    expect(deltas(calls[2])).toStrictEqual({ k1: 2 });
    expect(calls[3].id).not.toBe(calls[0].id);
    expect(deltas(calls[3])).toStrictEqual({ k1: 5, k2: 1 });
    expect(w.stats()).toMatchObject({ merges: 2, failures: 2, pendingKeys: 0 });
    await w.close();
  });

  it('drops deltas past maxKeys pending legs, and counts them', async () => {
    const { store, calls } = fakeStore();
    const w = writer(store, [], 2);
    record(w, leg(1), 1);
    record(w, leg(2), 1);
    record(w, leg(3), 1); // new: dropped
    record(w, leg(1), 1); // pending: added
    expect(w.stats()).toMatchObject({ dropped: 1, pendingKeys: 2 });
    await w.flush();
    expect(deltas(calls[0])).toStrictEqual({ k1: 2, k2: 1 });
    record(w, leg(3), 1);
    record(w, leg(1), 1);
    record(w, leg(2), 1); // known, but not pending: dropped
    expect(w.stats()).toMatchObject({ dropped: 2, pendingKeys: 2 });
    await w.flush();
    expect(deltas(calls[1])).toStrictEqual({ k3: 1, k1: 1 });
    await w.close();
  });

  it('forget() drops pending deltas and the in-doubt merge\'s, which keeps its id; the key records afresh', async () => {
    const { store, calls, down } = fakeStore();
    const w = writer(store);
    record(w, leg(1), 1);
    record(w, leg(2), 1);
    down.value = true;
    await w.flush(); // in doubt: k1, k2
    record(w, leg(1), 4);
    record(w, leg(3), 1);
    expect(await w.forget(['k1'])).toBe(2);
    expect(w.stats().pendingKeys).toBe(2);
    record(w, leg(1), 7);
    down.value = false;
    await w.flush();
    const [retry, next] = calls.slice(1);
    expect(retry.id).toBe(calls[0].id);
    expect(deltas(retry)).toStrictEqual({ k2: 1 });
    expect(deltas(next)).toStrictEqual({ k3: 1, k1: 7 });
    await w.close();
  });

  it('sends more than MAX_MERGE pending keys as several merges, each with its own id, retried in order', async () => {
    const { store, calls, down } = fakeStore();
    let now = 1_000;
    const w = writer(store, [], undefined, () => now);
    const n = 2 * MAX_MERGE + 10;
    for (let i = 0; i < n; i++) record(w, leg(i), 1 + (i % 2));
    down.failAt = 2;
    now = 5_000;
    await w.flush();
    expect(calls.map((c) => c.keys.length)).toStrictEqual([MAX_MERGE, MAX_MERGE]);
    // the second is in doubt and the third waits: not fresh yet
    expect(w.stats()).toMatchObject({ merges: 1, failures: 1, pendingKeys: MAX_MERGE + 10 });
    expect(w.staleness(5_000)).toBe(4_000);
    now = 6_000;
    await w.flush();
    expect(calls.map((c) => c.keys.length)).toStrictEqual([MAX_MERGE, MAX_MERGE, MAX_MERGE, 10]);
    expect(calls[2]).toStrictEqual(calls[1]);
    expect(new Set(calls.map((c) => c.id)).size).toBe(3);
    expect(w.staleness(6_000)).toBe(0);
    const all: Record<string, number> = {};
    for (const c of [calls[0], calls[2], calls[3]]) Object.assign(all, deltas(c));
    expect(Object.keys(all)).toHaveLength(n);
    for (let i = 0; i < n; i++) expect(all[`k${i}`]).toBe(1 + (i % 2));
    await w.close();
  });
});
