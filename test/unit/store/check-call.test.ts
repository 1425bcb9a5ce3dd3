/**
 * The check script's request as sluice encodes it (src/store/check-call.ts) against what ioredis writes for
 * the same arguments: byte for byte, with ASCII and non-ASCII keys, as FCALL of the check library, as EVALSHA
 * and as EVAL; and with the keys given as prebuilt RESP bytes (src/store/key-wire.ts), the same bytes again.
 * Legs that form a run (src/store/leg-runs.ts) go as the run's first leg, marked, the others left out, and the caller's
 * arguments are left as they were.
 */
import { describe, expect, it } from 'vitest';
import { Command } from 'ioredis';
import { asEval, encodeCheck, encodeCheckWire } from '../../../src/store/check-call.js';
import { keyWire } from '../../../src/store/key-wire.js';
import { UNIQUE_KEY } from '../../../src/store/contract.js';
import { RUN_MARK } from '../../../src/store/leg-runs.js';
import { checkLibrary, fcallRefused, functionMissing, loadFailure } from '../../../src/store/scripts.js';
import { packed } from '../../helpers/check-legs.js';

const SHA = 'a'.repeat(40);

/** The bytes ioredis writes for `name` with `args`. */
function ioredisBytes(name: string, args: Array<string | number | Buffer>): Buffer {
  const c = new Command(name, args);
  (c as unknown as { stringifyArguments(): void }).stringifyArguments();
  const w = (c as unknown as { toWritable(s: unknown): string | Buffer }).toWritable(null);
  return Buffer.isBuffer(w) ? w : Buffer.from(w);
}

describe('check request encoding', () => {
  const cases: Array<{ name: string; keys: string[] }> = [
    { name: 'ASCII keys', keys: ['sluice:{api:1:k1}:0', 'sluice:{api:1:k1}:1', 'sluice:{api:1:t%3Ax}:0'] },
    { name: 'a non-ASCII key among ASCII ones', keys: ['p:{a:1:ascii}:0', 'p:{a:1:ключ-€-😀}:0', 'p:{a:1:z}:0'] },
    { name: 'one key', keys: ['k'] },
  ];
  for (const { name, keys } of cases) {
    it(`${name}: the same bytes as ioredis's EVALSHA and EVAL`, () => {
      const args: number[] = [];
      keys.forEach((_, i) => args.push(0, 100 + i, 60_000, 1e9, 1 + i, i === 0 ? keys.length : 0));
      const now = 1_796_140_681_558;
      const mine = encodeCheck(SHA, keys, 1, now, args, 0);
      expect(mine.equals(ioredisBytes('evalsha', [SHA, keys.length, ...keys, 1, now, keys.length, packed(args)]))).toBe(true);
      const lua = '-- a script − with a non-ASCII comment\nreturn 1';
      expect(asEval(mine, keys.length, SHA, lua).equals(ioredisBytes('eval', [lua, keys.length, ...keys, 1, now, keys.length, packed(args)]))).toBe(true);
      // the keys as RESP bytes: one element per key, and all of them in one element (a check's legs)
      expect(encodeCheckWire(SHA, keys.length, keys.map((k) => keyWire([k])), 1, now, args, 0).equals(mine)).toBe(true);
      expect(encodeCheckWire(SHA, keys.length, [keyWire(keys)], 1, now, args, 0).equals(mine)).toBe(true);
      // as FCALL of the library's function
      const fn = checkLibrary().fn;
      expect(encodeCheckWire(fn, keys.length, [keyWire(keys)], 1, now, args, 0, 'fcall')
        .equals(ioredisBytes('fcall', [fn, keys.length, ...keys, 1, now, keys.length, packed(args)]))).toBe(true);
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
    expect(encodeCheck(SHA, ['k'], 0, 12, args, 3).equals(ioredisBytes('evalsha', [SHA, 1, 'k', 0, 12, 1, packed(args.slice(3))]))).toBe(true);
    expect(encodeCheckWire(SHA, 1, [keyWire(['k'])], 0, 12, args, 3).equals(encodeCheck(SHA, ['k'], 0, 12, args, 3))).toBe(true);
  });

  it('marks a run of legs on its first leg and leaves its later legs out, the caller\'s arguments as they were', () => {
    const keys = ['p:{a:1:k0}:0', 'p:{a:1:k1}:0', 'p:{a:1:k2}:0', 'p:{a:1:k3}:0'];
    const leg = [UNIQUE_KEY, 60, 60_000, 100, 1, 1];
    // three alike, then one of another cost: the head and that one are sent
    const args = [...leg, ...leg, ...leg, UNIQUE_KEY, 60, 60_000, 100, 2, 1];
    const sent = [UNIQUE_KEY + 2 * RUN_MARK, 60, 60_000, 100, 1, 1, UNIQUE_KEY, 60, 60_000, 100, 2, 1];
    const fn = checkLibrary().fn;
    expect(encodeCheckWire(fn, keys.length, [keyWire(keys)], 1, 5, args, 0, 'fcall')
      .equals(ioredisBytes('fcall', [fn, keys.length, ...keys, 1, 5, keys.length, packed(sent)]))).toBe(true);
    expect(args[0]).toBe(UNIQUE_KEY);
  });

  it('copies the legs of a call larger than its first scratch (64 checks of 8 legs)', () => {
    const keys = Array.from({ length: 512 }, (_, i) => `p:{a:1:k${i}}:${i % 8}`);
    const args: number[] = [];
    keys.forEach((_, i) => args.push(0, i, 60_000, 1e9 + i, 1, i % 8 === 0 ? 8 : 0));
    expect(encodeCheckWire(SHA, keys.length, [keyWire(keys)], 1, 5, args, 0).equals(encodeCheck(SHA, keys, 1, 5, args, 0))).toBe(true);
  });
});

describe('what a refused FUNCTION LOAD or FCALL says', () => {
  it('FCALL refused as a command (then EVALSHA), not a key\'s NOPERM nor a missing function', () => {
    const refused = [
      "ERR unknown command 'fcall', with args beginning with: 'sluice_x_check' '1' ", // Redis 7, renamed away
      'ERR unknown command `fcall`, with args beginning with: `sluice_x_check`, `1`, ', // Redis 6
      "NOPERM this user has no permissions to run the 'fcall' command", // Redis 7.0
      "NOPERM User u has no permissions to run the 'fcall' command", // Redis 7.2
    ];
    for (const m of refused) expect(fcallRefused(new Error(m)), m).toBe(true);
    const not = ['NOPERM No permissions to access a key', 'NOPERM this user has no permissions to access one of the keys used as arguments',
      'ERR Function not found', "OOM command not allowed when used memory > 'maxmemory'.", "ERR unknown command 'fcallx'"];
    for (const m of not) expect(fcallRefused(new Error(m)), m).toBe(false);
    expect(functionMissing(new Error('ERR Function not found'))).toBe(true);
  });

  it('a FUNCTION LOAD refused for good, for now, or already done', () => {
    expect(loadFailure(new Error("NOPERM this user has no permissions to run the 'function|load' command"))).toBe('refused');
    expect(loadFailure(new Error("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' "))).toBe('refused');
    expect(loadFailure(new Error("ERR Library 'sluice_x' already exists"))).toBe('loaded');
    expect(loadFailure(new Error("OOM command not allowed when used memory > 'maxmemory'."))).toBe('retry');
    expect(loadFailure(new Error("READONLY You can't write against a read only replica."))).toBe('retry');
  });
});
