/**
 * The sync numbering of a shard's batches and synchronous calls (src/shard/admissions.ts): the front settles
 * numbers in any order (a channel call answered while batches numbered before it are in flight), and the
 * shard debits an installed state with exactly what the front had not settled when it computed it.
 */
import { describe, expect, it } from 'vitest';
import { AdmissionLog, ShardSeqs } from '../../../src/shard/admissions.js';
import { CODE_ALLOW, CODE_DENY, GROUP_SHIFT, LEG_IN, LEG_OUT } from '../../../src/shard/protocol.js';
import { STATE_ROW } from '../../../src/shard/kernel.js';

/** One leg per check on limit 7, for key hashes `keys`, each costing `cost`; `allowed[i]` false: denied. */
function batch(keys: number[], cost: number, allowed = keys.map(() => true)): { legs: Float64Array; out: Float64Array } {
  const legs = new Float64Array(keys.length * LEG_IN);
  const out = new Float64Array(keys.length * LEG_OUT);
  keys.forEach((k, i) => {
    legs.set([k, 0, 7 + GROUP_SHIFT, cost], i * LEG_IN);
    out[i * LEG_OUT] = allowed[i] ? CODE_ALLOW : CODE_DENY;
  });
  return { legs, out };
}

/** A fixed-window state row per key at count `w0`; returns the counts after the debit. */
function debited(log: AdmissionLog, keys: number[], w0: number, after: number, settled?: number[]): number[] {
  const rows = new Float64Array(keys.length * STATE_ROW);
  const params = new Float64Array(keys.length * 3);
  keys.forEach((k, i) => {
    rows.set([k, 0, 7, w0, 0, 1_000], i * STATE_ROW);
    params.set([2, 100, 60_000], i * 3); // fixed_window, 100 per minute
  });
  log.debit(rows, keys.length, params, after, settled);
  return keys.map((_, i) => rows[i * STATE_ROW + 3]);
}

describe('ShardSeqs', () => {
  it('settles numbers in any order: after is the settled prefix, ahead the numbers settled past it', () => {
    const q = new ShardSeqs();
    expect([q.next(), q.next(), q.next(), q.next()]).toStrictEqual([1, 2, 3, 4]);
    q.settle(3); // a synchronous call answered while batches 1 and 2 are in flight
    expect([q.after, q.ahead()]).toStrictEqual([0, [3]]);
    q.settle(1);
    expect([q.after, q.ahead()]).toStrictEqual([1, [3]]);
    q.settle(2);
    expect([q.after, q.ahead()]).toStrictEqual([3, []]);
    q.settle(2); // settling twice changes nothing
    q.settle(4);
    expect([q.after, q.ahead(), q.ack]).toStrictEqual([4, [], 4]);
  });

  it('acks no further than the after of an install not applied yet', () => {
    const q = new ShardSeqs();
    q.next();
    q.next();
    q.settle(1);
    const applied = q.installing(q.after); // told after = 1
    q.settle(2);
    // a call now may reach the shard before that install: it must not let the shard forget batch 2
    expect([q.after, q.ack]).toStrictEqual([2, 1]);
    applied();
    expect(q.ack).toBe(2);
  });
});

describe('AdmissionLog', () => {
  it('debits what the batches not settled admitted, with a call settled ahead of a batch in flight', () => {
    const log = new AdmissionLog();
    // the front: batch 1 sent (in flight), then call 2 answered and settled, then a state computed: after 0, settled [2]
    const b1 = batch([11, 12], 3);
    const c2 = batch([11], 5);
    // the shard decides the call first (it overtakes the queue), then batch 1
    log.record(2, 0, 1, c2.legs, c2.out);
    log.record(1, 0, 2, b1.legs, b1.out);
    // the state holds call 2's 5 (recorded on the front) but not batch 1's 3: only those are spent again
    expect(debited(log, [11, 12], 40, 0, [2])).toStrictEqual([43, 43]);
    // what the high-water mark alone (after 2) said: batch 1 counted as settled, its 3 tokens given back
    const log2 = new AdmissionLog();
    log2.record(2, 0, 1, c2.legs, c2.out);
    log2.record(1, 0, 2, b1.legs, b1.out);
    expect(debited(log2, [11, 12], 40, 2)).toStrictEqual([40, 40]);
  });

  it('logs only admitted legs with a cost, and forgets entries up to an ack whatever their order', () => {
    const log = new AdmissionLog();
    const denied = batch([11, 12], 4, [true, false]);
    log.record(3, 0, 2, denied.legs, denied.out);
    log.record(1, 0, 1, batch([11], 2).legs, batch([11], 2).out);
    log.record(2, 0, 1, batch([11], 0).legs, batch([11], 0).out);
    expect(debited(log, [11, 12], 10, 0)).toStrictEqual([16, 10]);
    // an ack of 1 forgets batch 1 though batch 3 was logged before it
    log.record(4, 1, 0, new Float64Array(0), new Float64Array(0));
    expect(debited(log, [11, 12], 10, 0)).toStrictEqual([14, 10]);
  });
});
