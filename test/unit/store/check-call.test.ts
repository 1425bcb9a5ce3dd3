/**
 * The check script's request as sluice encodes it (src/store/check-call.ts) against what ioredis writes for
 * the same arguments: byte for byte, with ASCII and non-ASCII keys, as FCALL of the check library, as EVALSHA
 * and as EVAL; and with the keys given as prebuilt RESP bytes (src/store/key-wire.ts), the same bytes again.
 * Then the legs' marking: a check of one leg on a key no other leg of the call names is sent with UNIQUE_KEY
 * (16) added to its algorithm number (lua/check.lua decides it without a slot), and no other leg is.
 */
import { describe, expect, it } from 'vitest';
import { Command } from 'ioredis';
import { asEval, encodeCheck, encodeCheckWire, legDoubles, packLegs, UNIQUE_KEY } from '../../../src/store/check-call.js';
import { keyWire } from '../../../src/store/key-wire.js';
import { checkLibrary } from '../../../src/store/scripts.js';

const SHA = 'a'.repeat(40);

/** lua/check.lua's ARGV[4] as the store packed it before: 6 little-endian doubles per leg. */
function packed(args: number[]): Buffer {
  const b = Buffer.alloc(args.length * 8);
  args.forEach((v, i) => b.writeDoubleLE(v, i * 8));
  return b;
}

/** The bytes ioredis writes for `name` with `args`. */
function ioredisBytes(name: string, args: Array<string | number | Buffer>): Buffer {
  const c = new Command(name, args);
  (c as unknown as { stringifyArguments(): void }).stringifyArguments();
  const w = (c as unknown as { toWritable(s: unknown): string | Buffer }).toWritable(null);
  return Buffer.isBuffer(w) ? w : Buffer.from(w);
}

describe('check request encoding', () => {
  const cases: Array<{ name: string; keys: string[]; sent: number[] }> = [
    // one check of 3 legs: no leg is marked
    { name: 'ASCII keys', keys: ['sluice:{api:1:k1}:0', 'sluice:{api:1:k1}:1', 'sluice:{api:1:t%3Ax}:0'], sent: [0, 0, 0] },
    { name: 'a non-ASCII key among ASCII ones', keys: ['p:{a:1:ascii}:0', 'p:{a:1:ключ-€-😀}:0', 'p:{a:1:z}:0'], sent: [0, 0, 0] },
    // a check of one leg on its own key: marked
    { name: 'one key', keys: ['k'], sent: [16] },
  ];
  for (const { name, keys, sent } of cases) {
    it(`${name}: the same bytes as ioredis's EVALSHA and EVAL`, () => {
      const args: number[] = [];
      keys.forEach((_, i) => args.push(0, 100 + i, 60_000, 1e9, 1 + i, i === 0 ? keys.length : 0));
      // what goes out: the algorithm numbers as marked
      const out = args.map((v, i) => (i % 6 === 0 ? sent[i / 6] : v));
      const now = 1_796_140_681_558;
      const mine = encodeCheck(SHA, keys, 1, now, args, 0);
      expect(mine.equals(ioredisBytes('evalsha', [SHA, keys.length, ...keys, 1, now, keys.length, packed(out)]))).toBe(true);
      const lua = '-- a script − with a non-ASCII comment\nreturn 1';
      expect(asEval(mine, keys.length, SHA, lua).equals(ioredisBytes('eval', [lua, keys.length, ...keys, 1, now, keys.length, packed(out)]))).toBe(true);
      // the keys as RESP bytes: one element per key, and all of them in one element (a check's legs)
      expect(encodeCheckWire(SHA, keys, keys.map((k) => keyWire([k])), 1, now, args, 0).equals(mine)).toBe(true);
      expect(encodeCheckWire(SHA, keys, [keyWire(keys)], 1, now, args, 0).equals(mine)).toBe(true);
      // as FCALL of the library's function
      const fn = checkLibrary().fn;
      expect(encodeCheckWire(fn, keys, [keyWire(keys)], 1, now, args, 0, 'fcall')
        .equals(ioredisBytes('fcall', [fn, keys.length, ...keys, 1, now, keys.length, packed(out)]))).toBe(true);
      // the Cluster's calls pack their legs alike
      expect(packLegs(keys, args, 0).equals(packed(out))).toBe(true);
    });
  }

  it('names the library and its function after the source: sluice_ + 16 hex digits, registered in its text', () => {
    const lib = checkLibrary();
    expect(lib.name).toMatch(/^sluice_[0-9a-f]{16}$/);
    expect(lib.fn).toBe(`${lib.name}_check`);
    expect(lib.text.startsWith(`#!lua name=${lib.name}\n`)).toBe(true);
    expect(lib.text.trimEnd().endsWith(`redis.register_function('${lib.fn}', check)`)).toBe(true);
  });

  it('reads the legs from `from` on', () => {
    const args = [7, 7, 7, 0, 5, 60_000, 5, 1, 1];
    expect(encodeCheck(SHA, ['k'], 0, 12, args, 3).equals(ioredisBytes('evalsha', [SHA, 1, 'k', 0, 12, 1, packed([16, 5, 60_000, 5, 1, 1])]))).toBe(true);
    expect(encodeCheckWire(SHA, ['k'], [keyWire(['k'])], 0, 12, args, 3).equals(encodeCheck(SHA, ['k'], 0, 12, args, 3))).toBe(true);
  });

  it('copies the legs of a call larger than its first scratch (64 checks of 8 legs)', () => {
    const keys = Array.from({ length: 512 }, (_, i) => `p:{a:1:k${i}}:${i % 8}`);
    const args: number[] = [];
    keys.forEach((_, i) => args.push(0, i, 60_000, 1e9 + i, 1, i % 8 === 0 ? 8 : 0));
    expect(encodeCheckWire(SHA, keys, [keyWire(keys)], 1, 5, args, 0).equals(encodeCheck(SHA, keys, 1, 5, args, 0))).toBe(true);
  });
});

describe('legs marked UNIQUE_KEY', () => {
  /** The algorithm numbers legDoubles sends for these keys and group lengths (token buckets, algorithm 0). */
  const sent = (keys: string[], groups: number[], alg = 0): number[] => {
    const args: number[] = [];
    keys.forEach((_, i) => args.push(alg, 10, 60_000, 10, 1, groups[i]));
    const f = new Float64Array(keys.length * 6);
    legDoubles(keys, args, 0, f);
    // the other numbers go as given
    for (let i = 0; i < args.length; i++) if (i % 6 !== 0) expect(f[i]).toBe(args[i]);
    return Array.from({ length: keys.length }, (_, i) => f[i * 6]);
  };

  it('is 16', () => {
    expect(UNIQUE_KEY).toBe(16);
  });

  it('marks each check of one leg whose key no other leg names', () => {
    expect(sent(['a', 'b', 'c'], [1, 1, 1])).toEqual([16, 16, 16]);
    // any algorithm: a sliding log's (5) too
    expect(sent(['a', 'b'], [1, 1], 5)).toEqual([21, 21]);
  });

  it('marks no leg of a key named twice, however far apart, and no other leg of that key', () => {
    expect(sent(['a', 'b', 'a'], [1, 1, 1])).toEqual([0, 16, 0]);
    expect(sent(['a', 'a', 'a', 'b'], [1, 1, 1, 1])).toEqual([0, 0, 0, 16]);
  });

  it('marks no leg of a check of several legs, nor a single check sharing a key with one (a guard)', () => {
    // check 1: legs own + guard; check 2: one leg on the guard's key; check 3: one leg on its own key
    expect(sent(['own', 'guard', 'guard', 'x'], [2, 0, 1, 1])).toEqual([0, 0, 0, 16]);
  });

  it('reads the group length below maxDelayMs (onLimit: delay): a delayed check of one leg is marked', () => {
    const D = 500 * 65536;
    const args = [0, 10, 60_000, 10, 1, 1 + D, 0, 10, 60_000, 10, 1, 2 + D, 0, 10, 60_000, 10, 1, D];
    const f = new Float64Array(18);
    legDoubles(['a', 'b', 'c'], args, 0, f);
    expect([f[0], f[6], f[12]]).toEqual([16, 0, 0]);
  });

  it('forgets the keys of one call before the next', () => {
    expect(sent(['a', 'a'], [1, 1])).toEqual([0, 0]);
    expect(sent(['a'], [1])).toEqual([16]);
  });
});
