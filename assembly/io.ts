// The batch I/O regions JS writes and reads (their rows: assembly/layout.ts), allocated once by init, and a
// leg's row read and its outcome written.
import {
  LEG_IN_STRIDE, LEG_OUT_STRIDE, HASH_IN_STRIDE, HASH_OUT_STRIDE, IN_HASH_LO, IN_HASH_HI, IN_LIMIT,
  OUT_CODE, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER, CODE_NEVER, CODE_BAD_LIMIT,
} from './layout';
import * as R from './result';

/** The leg input rows (LEG_IN_STRIDE bytes each; setState reads them as STATE_STRIDE rows). */
export let legIn: usize = 0;
/** The leg output rows (LEG_OUT_STRIDE bytes each; peekBatch writes them as peek rows). */
export let legOut: usize = 0;
/** The hash input rows (HASH_IN_STRIDE bytes each: a key's offset and length in the key region, its seed). */
export let hashIn: usize = 0;
/** The hash output rows (HASH_OUT_STRIDE bytes each). */
export let hashOut: usize = 0;
/** The region keys are hashed from (0 bytes for a kernel that only decides). */
export let keys: usize = 0;
/** Rows per region: the most legs (or keys) one call takes. */
export let batchMax: u32 = 0;

/** Bytes of the four row regions for batches of `maxBatch` (the key region aside). */
export function ioBytes(maxBatch: u32): u64 {
  return <u64>maxBatch * (LEG_IN_STRIDE + LEG_OUT_STRIDE + HASH_IN_STRIDE + HASH_OUT_STRIDE);
}

/** Allocates the row regions for batches of `maxBatch` and a key region of `keyBytes`, in that order. */
export function ioInit(maxBatch: u32, keyBytes: u32): void {
  batchMax = maxBatch;
  legIn = heap.alloc(<usize>maxBatch * LEG_IN_STRIDE);
  legOut = heap.alloc(<usize>maxBatch * LEG_OUT_STRIDE);
  hashIn = heap.alloc(<usize>maxBatch * HASH_IN_STRIDE);
  hashOut = heap.alloc(<usize>maxBatch * HASH_OUT_STRIDE);
  keys = heap.alloc(<usize>keyBytes);
}

/** A leg's IN_LIMIT word: limitId | group length << GROUP_BITS | maxDelayMs << DELAY_BITS (all below 2^53). */
@inline export function legWord(leg: u32): u64 {
  return <u64>load<f64>(legIn + <usize>leg * LEG_IN_STRIDE, IN_LIMIT);
}

/** A leg's key hash, from its two u32 halves. */
@inline export function legHash(leg: u32): u64 {
  const p = legIn + <usize>leg * LEG_IN_STRIDE;
  return (<u64><u32>load<f64>(p, IN_HASH_HI) << 32) | <u64><u32>load<f64>(p, IN_HASH_LO);
}

/** Writes the outcome in R.* as leg `leg`'s output row. */
@inline export function writeOut(leg: u32): void {
  const o = legOut + <usize>leg * LEG_OUT_STRIDE;
  store<f64>(o, R.code, OUT_CODE);
  store<f64>(o, <f64>R.remaining, OUT_REMAINING);
  store<f64>(o, <f64>R.resetAfter, OUT_RESET_AFTER);
  store<f64>(o, R.code == CODE_NEVER ? -1 : <f64>R.retryAfter, OUT_RETRY_AFTER);
}

/** Writes leg `leg`'s output row for a limit id that names no limit. */
export function badLeg(leg: u32): void {
  const o = legOut + <usize>leg * LEG_OUT_STRIDE;
  store<f64>(o, CODE_BAD_LIMIT, OUT_CODE);
  store<f64>(o, 0, OUT_REMAINING);
  store<f64>(o, 0, OUT_RESET_AFTER);
  store<f64>(o, -1, OUT_RETRY_AFTER);
}
