/**
 * Placing store batches on a Redis Cluster (src/store/slots.ts): hash tags as Redis reads them, one part per
 * slot, a check's legs never split, a guarded check's own keys moved into its guard's slot, replies mapped
 * back by leg index. Slots themselves are cluster-key-slot's (what ioredis routes by); the integration test
 * checks them against real masters.
 */
import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import { hashTag, keyInSlot, placedKey, splitChecks, splitKeys } from '../../../src/store/slots.js';
import { storeKey } from '../../../src/keys/store-key.js';

describe('hashTag', () => {
  it('is what stands between the first { and the next }, or the whole key when that is empty or missing', () => {
    expect(hashTag('sluice:{free:v1:acme}:0')).toBe('free:v1:acme');
    expect(hashTag('a{b}c{d}')).toBe('b');
    expect(hashTag('a{}c{d}')).toBe('a{}c{d}');
    expect(hashTag('a{b')).toBe('a{b');
    expect(hashTag('a}b{c}')).toBe('c');
    expect(hashTag('plain')).toBe('plain');
  });

  it('agrees with the slot cluster-key-slot computes', () => {
    for (const k of ['sluice:{free:v1:acme}:0', 'x{y}z', 'sluice:{g:v:*}{free:v:a}:1']) {
      expect(calculateSlot(`{${hashTag(k)}}`)).toBe(calculateSlot(k));
    }
  });
});

describe('splitChecks', () => {
  const P = 'sluice:';
  const own = (key: string, j: number): string => storeKey(P, 'free', 'v1', key, j);
  const guard = (j: number): string => storeKey(P, 'global', 'v2', '*', j);
  /** 6 numbers per leg (algorithm, L, P, B, cost, group length on a group's first leg), marked by leg index. */
  const legArgs = (groups: number[]): number[] => groups.flatMap((g) => Array.from({ length: g }, (_, i) => [0, 10, 1000, 10, 1, i === 0 ? g : 0])).flat();

  it('puts each check whole in its slot, in batch order within a part, and says where each leg came from', () => {
    const keys = [own('a', 0), own('a', 1), own('b', 0), own('c', 0), own('a', 0)];
    const args = legArgs([2, 1, 1, 1]);
    const parts = splitChecks(P, keys, args, 6, 5);
    const slots = new Set(keys.map((k) => calculateSlot(k)));
    expect(parts.length).toBe(slots.size);
    const a = parts.find((p) => p.keys[0] === own('a', 0))!;
    expect(a.legs).toStrictEqual([0, 1, 4]);
    expect(a.keys).toStrictEqual([own('a', 0), own('a', 1), own('a', 0)]);
    expect(a.args).toStrictEqual([0, 10, 1000, 10, 1, 2, 0, 10, 1000, 10, 1, 0, 0, 10, 1000, 10, 1, 1]);
    expect(a.slot).toBe(calculateSlot(own('a', 0)));
    expect(parts.flatMap((p) => p.legs).sort()).toStrictEqual([0, 1, 2, 3, 4]);
    for (const p of parts) for (const k of p.keys) expect(calculateSlot(k)).toBe(p.slot);
  });

  it('moves a guarded check\'s own keys into the guard\'s slot, the same name every time', () => {
    // two guarded checks (own leg + two guard legs) and an unguarded one
    const keys = [own('a', 0), guard(0), guard(1), own('b', 0), guard(0), guard(1), storeKey(P, 'plain', 'v3', 'a', 0)];
    const parts = splitChecks(P, keys, legArgs([3, 3, 1]), 6, 5);
    const g = parts.find((p) => p.slot === calculateSlot(guard(0)))!;
    expect(g.keys).toStrictEqual([
      'sluice:{global:v2:*}{free:v1:a}:0', guard(0), guard(1), 'sluice:{global:v2:*}{free:v1:b}:0', guard(0), guard(1),
    ]);
    expect(g.legs).toStrictEqual([0, 1, 2, 3, 4, 5]);
    expect(g.tag).toBe('global:v2:*');
    for (const k of g.keys) expect(calculateSlot(k)).toBe(g.slot);
    expect(placedKey(P, 'global:v2:*', own('a', 0))).toBe(g.keys[0]);
    expect(parts.find((p) => p.legs.includes(6))!.keys).toStrictEqual([storeKey(P, 'plain', 'v3', 'a', 0)]);
  });

  it('reads a missing or oversize group length as the lua driver does (at least 1, at most what is left)', () => {
    const keys = [own('a', 0), own('b', 0)];
    const args = [0, 10, 1000, 10, 1, 0, 0, 10, 1000, 10, 1, 5];
    const parts = splitChecks(P, keys, args, 6, 5);
    expect(parts.flatMap((p) => p.legs).sort()).toStrictEqual([0, 1]);
  });
});

describe('splitKeys', () => {
  it('splits independent keys by slot, with each part\'s tag in its slot', () => {
    const keys = Array.from({ length: 50 }, (_, i) => storeKey('s:', 'p', 'v', `k${i}`, 0));
    const args = keys.flatMap((_, i) => [0, 10, 1000, 10, i]);
    const parts = splitKeys(keys, args, 5);
    expect(parts.flatMap((p) => p.legs).sort((x, y) => x - y)).toStrictEqual(keys.map((_, i) => i));
    for (const p of parts) {
      expect(calculateSlot(`s:merged:x:1:{${p.tag}}`)).toBe(p.slot);
      p.legs.forEach((leg, i) => {
        expect(p.keys[i]).toBe(keys[leg]);
        expect(p.args.slice(5 * i, 5 * i + 5)).toStrictEqual([0, 10, 1000, 10, leg]);
      });
    }
  });
});

describe('keyInSlot', () => {
  it('gives a key of the slot asked for, under the head given, with the first decimal tag that hashes there', () => {
    for (const slot of [0, 1, 5461, 10923, 16383]) {
      const key = keyInSlot('sluice:breaker-probe:', slot);
      expect(key.startsWith('sluice:breaker-probe:{')).toBe(true);
      expect(calculateSlot(key)).toBe(slot);
      const tag = Number(hashTag(key));
      for (let i = 0; i < tag; i++) expect(calculateSlot(String(i))).not.toBe(slot);
    }
  });
});
