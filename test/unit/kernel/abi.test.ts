/**
 * The kernel ABI pinned across the two sides: build/kernel.wasm exports the constants of assembly/layout.ts
 * (byte offsets and strides, result and status codes) as globals, and each must equal src/shard/abi.ts's
 * mirror (f64 or u32 indices times their width). A change on one side alone fails here, not in a decision.
 */
import { describe, expect, it } from 'vitest';
import * as abi from '../../../src/shard/abi.js';
import { kernelModule } from '../../../src/shard/kernel.js';

const exported = new WebAssembly.Instance(kernelModule(), { env: { abort: () => { throw new Error('abort'); } } }).exports;

function global(name: string): number {
  const g = exported[name] as unknown;
  // a WebAssembly.Global (not in TypeScript's lib here): an object with a `value`
  if (typeof g !== 'object' || g === null || !('value' in g)) throw new Error(`build/kernel.wasm exports no global ${name}`);
  return Number(g.value);
}

const F64 = 8;
const U32 = 4;

describe('kernel ABI: src/shard/abi.ts against the kernel\'s exports', () => {
  it('leg input rows: stride and field offsets (f64s)', () => {
    expect(global('LEG_IN_STRIDE')).toBe(abi.LEG_IN * F64);
    expect(global('IN_HASH_LO')).toBe(abi.IN_HASH_LO * F64);
    expect(global('IN_HASH_HI')).toBe(abi.IN_HASH_HI * F64);
    expect(global('IN_LIMIT')).toBe(abi.IN_LIMIT * F64);
    expect(global('IN_COST')).toBe(abi.IN_COST * F64);
  });

  it('the group length packed above the limit id', () => {
    expect(2 ** global('GROUP_BITS')).toBe(abi.GROUP_SHIFT);
    expect(global('LIMIT_ID_MASK')).toBe(abi.GROUP_SHIFT - 1);
    expect(global('MAX_GROUP')).toBe(abi.MAX_GROUP);
    expect(2 ** (global('GROUP_BITS') + 8)).toBe(abi.GROUP_SHIFT * abi.GROUP_SPAN);
    expect(global('GROUP_MASK') + 1).toBe(abi.GROUP_SPAN);
  });

  it('the leg\'s maxDelayMs packed above the group length (onLimit: delay)', () => {
    expect(2 ** global('DELAY_BITS')).toBe(abi.DELAY_SHIFT);
    expect(abi.DELAY_SHIFT).toBe(abi.GROUP_SHIFT * abi.GROUP_SPAN);
    expect(global('MAX_DELAY_MS')).toBe(abi.MAX_DELAY_MS);
    expect(abi.MAX_DELAY_MS * abi.DELAY_SHIFT + abi.DELAY_SHIFT).toBeLessThanOrEqual(2 ** 53);
    expect(global('OUT_DELAY')).toBe(abi.OUT_DELAY * F64);
  });

  it('leg output and peek rows: stride and field offsets (f64s)', () => {
    expect(global('LEG_OUT_STRIDE')).toBe(abi.LEG_OUT * F64);
    expect(global('OUT_CODE')).toBe(abi.OUT_CODE * F64);
    expect(global('OUT_REMAINING')).toBe(abi.OUT_REMAINING * F64);
    expect(global('OUT_RESET_AFTER')).toBe(abi.OUT_RESET_AFTER * F64);
    expect(global('OUT_RETRY_AFTER')).toBe(abi.OUT_RETRY_AFTER * F64);
    expect(global('PEEK_FOUND')).toBe(abi.PEEK_FOUND * F64);
    expect(global('PEEK_W0')).toBe(abi.PEEK_W0 * F64);
    expect(global('PEEK_W1')).toBe(abi.PEEK_W1 * F64);
    expect(global('PEEK_LAST_SEEN')).toBe(abi.PEEK_LAST_SEEN * F64);
  });

  it('leg result codes', () => {
    expect(global('CODE_ALLOW')).toBe(abi.CODE_ALLOW);
    expect(global('CODE_DENY')).toBe(abi.CODE_DENY);
    expect(global('CODE_NEVER')).toBe(abi.CODE_NEVER);
    expect(global('CODE_BAD_LIMIT')).toBe(abi.CODE_BAD_LIMIT);
  });

  it('state rows: stride and the state fields (f64s)', () => {
    expect(global('STATE_STRIDE')).toBe(abi.STATE_ROW * F64);
    expect(global('STATE_W0')).toBe(abi.STATE_W0 * F64);
    expect(global('STATE_W1')).toBe(abi.STATE_W1 * F64);
    expect(global('STATE_LAST_SEEN')).toBe(abi.STATE_LAST_SEEN * F64);
  });

  it('hash rows: strides and field offsets (u32s)', () => {
    expect(global('HASH_IN_STRIDE')).toBe(abi.HASH_IN * U32);
    expect(abi.HASH_IN_OFFSET).toBe(0); // the kernel reads the offset at the row's start
    expect(global('HASH_IN_LENGTH')).toBe(abi.HASH_IN_LENGTH * U32);
    expect(global('HASH_IN_SEED_LO')).toBe(abi.HASH_IN_SEED_LO * U32);
    expect(global('HASH_IN_SEED_HI')).toBe(abi.HASH_IN_SEED_HI * U32);
    expect(global('HASH_OUT_STRIDE')).toBe(abi.HASH_OUT * U32);
    expect(abi.HASH_OUT_LO).toBe(0); // the kernel writes the low half at the row's start
    expect(global('HASH_OUT_HI')).toBe(abi.HASH_OUT_HI * U32);
  });

  it('status codes of the calls', () => {
    expect(global('OK')).toBe(abi.STATUS.OK);
    expect(global('INIT_AGAIN')).toBe(abi.STATUS.INIT_AGAIN);
    expect(global('INIT_NO_ROOM')).toBe(abi.STATUS.INIT_NO_ROOM);
    expect(global('BAD_LIMIT')).toBe(abi.STATUS.BAD_LIMIT);
    expect(global('TOO_MANY')).toBe(abi.STATUS.TOO_MANY);
    expect(global('REMOVE_TOO_MANY')).toBe(abi.STATUS.REMOVE_TOO_MANY);
  });

  it('the status codes are what the calls return (a second init, a batch past the size)', () => {
    const k = exported as unknown as {
      init(a: number, b: number, c: number, d: number): number; checkBatch(n: number, now: number): number;
      peekBatch(n: number): number; removeBatch(n: number): number; setState(n: number, now: number): number;
      setLimit(id: number, alg: number, l: number, p: number, b: number, c: number): number;
    };
    expect(k.init(16, 4, 2, 0)).toBe(abi.STATUS.OK);
    expect(k.init(16, 4, 2, 0)).toBe(abi.STATUS.INIT_AGAIN);
    // 4 legs of 4 f64s hold 2 state rows of 6, not 3 (the rows name limit id 0, not set yet: nothing is stored)
    expect(k.setState(3, 0)).toBe(abi.STATUS.TOO_MANY);
    expect(k.setState(2, 0)).toBe(abi.STATUS.OK);
    expect(k.checkBatch(5, 0)).toBe(abi.STATUS.TOO_MANY);
    expect(k.peekBatch(5)).toBe(abi.STATUS.TOO_MANY);
    expect(k.removeBatch(5)).toBe(abi.STATUS.REMOVE_TOO_MANY);
    expect(k.setLimit(2, 0, 1, 1000, 1, 0)).toBe(abi.STATUS.BAD_LIMIT);
    expect(k.setLimit(0, 0, 1, 1000, 1, 0)).toBe(abi.STATUS.OK);
  });
});
