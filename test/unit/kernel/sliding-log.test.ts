/**
 * sliding_log in the kernel: the exact admitted cost in the trailing period (t − P, t], one ring entry per
 * ms in an arena block outside the slot. remaining = L − used after; resetAfter = newest entry + P − t;
 * retryAfter = until enough of the oldest entries have left. Expectations are hand-computed.
 */
import { describe, expect, it } from 'vitest';
import { Kernel, kernelModule } from '../../../src/shard/kernel.js';
import { ALGORITHM_CODES } from '../../../src/config/policy-spec.js';
import type { KernelLimit } from '../../../src/shard/protocol.js';
import { allow, check, deny, group, lim, never, newKernel, peek, TOKEN_BUCKET } from './harness.js';

const SL = ALGORITHM_CODES.sliding_log;
const LOG = 0; // L 5 / 1000 ms
const ZERO = 1;
const ONE_MS = 2; // L 64 / 1 ms: one entry at most
const TB = 3;
const LIMITS = [lim(SL, 5, 1000), lim(SL, 0, 1000), lim(SL, 64, 1), lim(TOKEN_BUCKET, 10, 1000)];
const t0 = 1_000_000;
const fresh = () => newKernel(LIMITS);

describe('sliding_log: exact trailing count', () => {
  it('counts each admitted cost until exactly P after it; equal timestamps each count', () => {
    const k = fresh();
    expect(check(k, 1, LOG, 1, t0)).toStrictEqual(allow(4, 1000));
    expect(check(k, 1, LOG, 1, t0)).toStrictEqual(allow(3, 1000)); // same ms: counted again
    expect(check(k, 1, LOG, 2, t0 + 300)).toStrictEqual(allow(1, 1000));
    expect(check(k, 1, LOG, 1, t0 + 600)).toStrictEqual(allow(0, 1000));
    // full: cost 1 waits for the two at t0 to leave (t0 + 1000); cost 3 also for the two at t0 + 300
    expect(check(k, 1, LOG, 1, t0 + 700)).toStrictEqual(deny(0, 900, 300));
    expect(check(k, 1, LOG, 3, t0 + 700)).toStrictEqual(deny(0, 900, 600));
    expect(check(k, 1, LOG, 1, t0 + 999)).toStrictEqual(deny(0, 601, 1));
    // at t0 + 1000 the two at t0 have left: used = 3
    expect(peek(k, 1, LOG, t0 + 1000)).toStrictEqual(allow(2, 600));
    expect(check(k, 1, LOG, 2, t0 + 1000)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, LOG, 1, t0 + 1299)).toStrictEqual(deny(0, 701, 1));
    expect(check(k, 1, LOG, 2, t0 + 1300)).toStrictEqual(allow(0, 1000));
  });

  it('no boundary burst: 5 at t0 + 999 and nothing more until t0 + 1999', () => {
    const k = fresh();
    expect(check(k, 1, LOG, 5, t0 + 999)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, LOG, 1, t0 + 1000)).toStrictEqual(deny(0, 999, 999));
    expect(check(k, 1, LOG, 5, t0 + 1999)).toStrictEqual(allow(0, 1000));
  });

  it('a denied check and a peek change nothing; costs above L never admit; limit 0 denies for good', () => {
    const k = fresh();
    expect(check(k, 1, LOG, 3, t0)).toStrictEqual(allow(2, 1000));
    expect(check(k, 1, LOG, 3, t0 + 10)).toStrictEqual(deny(2, 990, 990));
    expect(peek(k, 1, LOG, t0 + 10)).toStrictEqual(allow(2, 990));
    expect(check(k, 1, LOG, 6, t0 + 10)).toStrictEqual(never(2, 990));
    expect(check(k, 1, ZERO, 1, t0)).toStrictEqual(never(0, 0));
    expect(peek(k, 1, ZERO, t0)).toStrictEqual(allow(0, 0));
  });

  it('time never runs backwards for a key', () => {
    const k = fresh();
    expect(check(k, 1, LOG, 5, t0 + 500)).toStrictEqual(allow(0, 1000));
    expect(check(k, 1, LOG, 1, t0)).toStrictEqual(deny(0, 1000, 1000)); // decided at t0 + 500
  });

  it('a 1 ms period holds one entry, coalesced across checks of that ms', () => {
    const k = fresh();
    expect(check(k, 1, ONE_MS, 60, t0)).toStrictEqual(allow(4, 1));
    expect(check(k, 1, ONE_MS, 4, t0)).toStrictEqual(allow(0, 1));
    expect(check(k, 1, ONE_MS, 1, t0)).toStrictEqual(deny(0, 1, 1));
    expect(check(k, 1, ONE_MS, 64, t0 + 1)).toStrictEqual(allow(0, 1));
  });

  it('in a group with a token bucket: all admit or nothing is logged', () => {
    const k = fresh();
    expect(group(k, [{ key: 1, limit: LOG, cost: 4 }, { key: 2, limit: TB, cost: 10 }], t0)).toStrictEqual([allow(1, 1000), allow(0, 1000)]);
    // the bucket denies: the log keeps 4
    expect(group(k, [{ key: 1, limit: LOG, cost: 1 }, { key: 2, limit: TB, cost: 1 }], t0 + 50)).toStrictEqual([allow(1, 950), deny(0, 950, 50)]);
    expect(peek(k, 1, LOG, t0 + 50)).toStrictEqual(allow(1, 950));
  });
});

describe('sliding_log: memory', () => {
  function tiny(logKeys: number, maxKeys = 64): Kernel {
    return new Kernel(kernelModule(), { maxKeys, maxBatch: 16, limits: LIMITS, logKeys, logEntries: 64 });
  }

  it('one block per key with a log; freed on reset; blocks of 64 entries', () => {
    const k = tiny(8);
    for (let key = 1; key <= 3; key++) check(k, key, LOG, 1, t0);
    expect(k.logStats()).toStrictEqual({ blocksUsed: 3, entriesPerBlock: 64 });
    check(k, 1, LOG, 1, t0 + 1); // same key: same block
    expect(k.logStats().blocksUsed).toBe(3);
  });

  it('when every block is in use, a new log evicts an idle sliding-log key, never a token bucket', () => {
    const k = tiny(2);
    expect(check(k, 1, LOG, 5, t0)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, LOG, 5, t0 + 500)).toStrictEqual(allow(0, 1000));
    expect(check(k, 9, TB, 10, t0)).toStrictEqual(allow(0, 1000));
    // key 1's log is idle at t0 + 1000 (its entries left), key 2's is not: key 1 goes
    expect(check(k, 3, LOG, 1, t0 + 1000)).toStrictEqual(allow(4, 1000));
    expect(k.logStats().blocksUsed).toBe(2);
    expect(check(k, 2, LOG, 1, t0 + 1000)).toStrictEqual(deny(0, 500, 500));
    expect(check(k, 9, TB, 1, t0 + 1000)).toStrictEqual(allow(9, 100)); // still held: refilled to full
    expect(k.stats().evictions).toBe(1);
  });

  it('a limit whose bound min(L, P) exceeds the block is refused', () => {
    const big: KernelLimit = lim(SL, 65, 1000);
    expect(() => new Kernel(kernelModule(), { maxKeys: 8, maxBatch: 4, limits: [big] })).toThrow(/sliding_log needs min\(limit, period\) <= 64/);
    expect(() => new Kernel(kernelModule(), { maxKeys: 8, maxBatch: 4, limits: [lim(SL, 1_000_000, 64)] })).not.toThrow();
  });
});
