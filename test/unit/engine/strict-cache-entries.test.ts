/**
 * StrictCache's bookkeeping of entries (src/engine/strict/): `peek` only reads (the strict decider's
 * first loop over a batch, to warm the CPU's cache), and an admission of a one-leg check leaves its numbers on
 * the entry, rebuilt into `states` only when read (`statesOf`), to exactly the state an eager rebuild gives.
 */
import { describe, expect, it } from 'vitest';
import { compilePolicies } from '../../../src/config/policies.js';
import { buildRuntimes, type PolicyRuntime } from '../../../src/engine/runtime.js';
import { LimitTable } from '../../../src/engine/limits.js';
import { Hasher } from '../../../src/keys/hasher.js';
import { Kernel, kernelModule } from '../../../src/shard/kernel.js';
import { StrictCache } from '../../../src/engine/strict/cache.js';
import { rebuild } from '../../../src/engine/strict/state-rebuild.js';
import { LEG_WIDE } from '../../../src/store/reply.js';

function runtimes(spec: Parameters<typeof compilePolicies>[0] = {
  one: { algorithm: 'token_bucket', limit: 10, period: '1m', burst: 20, consistency: 'strict', onStoreError: 'local' },
  gcra: { algorithm: 'gcra', limit: 10, period: '1m', burst: 5, consistency: 'strict', onStoreError: 'closed' },
}): Map<string, PolicyRuntime> {
  const compiled = compilePolicies(spec);
  const table = new LimitTable(64);
  const plan = table.plan(compiled);
  table.commit(plan);
  const hasher = new Hasher(new Kernel(kernelModule(), { maxKeys: 1, maxBatch: 16, limits: table.limits }), 16);
  return buildRuntimes(compiled, plan.ids, hasher, 'p:');
}

/** One leg's widened answer (src/store/reply.ts): code, remaining, resetAfterMs, retryAfterMs, time, then NaN states (admitted). */
function admitted(remaining: number, resetAfterMs: number, t: number): number[] {
  const row = new Array<number>(LEG_WIDE).fill(Number.NaN);
  row[0] = 0;
  row[1] = remaining;
  row[2] = resetAfterMs;
  row[3] = 0;
  row[4] = t;
  return row;
}

describe('StrictCache entries', () => {
  it('peek reads an entry without making, moving or evicting one', () => {
    const rt = runtimes().get('one')!;
    const cache = new StrictCache(2, true);
    expect(cache.peek('p:', rt, 'a')).toBe(0);
    expect(cache.size).toBe(0);
    const a = cache.entry('p:', rt, 'a');
    const b = cache.entry('p:', rt, 'b');
    a.inflight = 3;
    expect(cache.peek('p:', rt, 'a')).toBe(3);
    expect(cache.peek('p:', rt, 'c')).toBe(0);
    expect(cache.size).toBe(2);
    // peek made no room for c: a and b are the entries held, unchanged
    expect(cache.entry('p:', rt, 'a')).toBe(a);
    expect(cache.entry('p:', rt, 'b')).toBe(b);
    // entry() does: b goes (the oldest without a call in flight), a stays
    cache.entry('p:', rt, 'c');
    expect(cache.size).toBe(2);
    expect(cache.entry('p:', rt, 'a')).toBe(a);
    expect(cache.peek('p:', rt, 'a')).toBe(3);
  });

  it('an admission of one leg is rebuilt when read, to the state an eager rebuild gives', () => {
    const rts = runtimes();
    // token bucket (L 10, P 60 s, B 20): tokens·P = max(13·P, B·P − 42,000·L) = 780,000. GCRA (L 10, P 60 s,
    // B 5): debt = min(17,999·L, B·P − 2·P) = 179,990, so TAT = t + 17,999 ms and 0 left over
    for (const [name, r, z, t, want] of [
      ['one', 13, 42_000, 1_700_000_000_123, [780_000, 0, 1_700_000_000_123]],
      ['gcra', 2, 17_999, 1_700_000_000_777, [1_700_000_018_776, 0, 1_700_000_000_777]],
    ] as const) {
      const rt = rts.get(name)!;
      const cache = new StrictCache(10, true);
      const e = cache.entry('p:', rt, 'k');
      cache.learn(e, admitted(r, z, t), 0, 1);
      expect(e.pending).toBe(true);
      expect([...e.states]).toEqual([-1, -1, -1]); // not rebuilt yet
      const eager = new Float64Array(3);
      rebuild(rt, 0, r, z, t, eager, 0);
      expect([...eager]).toEqual(want);
      expect([...cache.statesOf(e)]).toEqual(want);
      expect(e.pending).toBe(false);
      expect(e.deniedCost).toBe(-1);
    }
  });

  it('a reload rebuilds a waiting admission and keeps it; a drop while a call is in flight forgets it', () => {
    const rt = runtimes().get('one')!;
    const cache = new StrictCache(10, true);
    const e = cache.entry('p:', rt, 'k');
    cache.learn(e, admitted(13, 42_000, 1000), 0, 1);
    // the same policy's runtime rebuilt (a reload): the entry is kept, and so is what Redis holds for its key
    const reloaded = runtimes().get('one')!;
    expect(cache.entry('p:', reloaded, 'k')).toBe(e);
    expect(e.pending).toBe(false);
    expect([...cache.statesOf(e)]).toEqual([780_000, 0, 1000]);
    cache.learn(e, admitted(13, 42_000, 2000), 0, 1);
    e.inflight = 1;
    cache.drop(e.keys[0]);
    expect(cache.size).toBe(1); // kept while its call is in flight, emptied
    expect(e.pending).toBe(false);
    expect([...cache.statesOf(e)]).toEqual([-1, -1, -1]);
  });

  it('a denial after a waiting admission replaces it, and a drop forgets both', () => {
    const rt = runtimes().get('one')!;
    const cache = new StrictCache(10, true);
    const e = cache.entry('p:', rt, 'k');
    cache.learn(e, admitted(1, 57_000, 1000), 0, 1);
    const denied = admitted(0, 60_000, 2000);
    denied[0] = 1;
    denied[3] = 6000;
    denied[5] = 0; // w0: tokens·P, none
    denied[6] = 0;
    denied[7] = 2000; // lastSeen
    cache.learn(e, denied, 0, 1);
    expect(e.pending).toBe(false);
    expect(e.deniedCost).toBe(1);
    expect([...cache.statesOf(e)]).toEqual([0, 0, 2000]);
    cache.learn(e, admitted(5, 30_000, 3000), 0, 1);
    expect(e.pending).toBe(true);
    cache.drop(e.keys[0]);
    expect(cache.size).toBe(0);
    const again = cache.entry('p:', rt, 'k');
    expect(again.pending).toBe(false);
    expect([...cache.statesOf(again)]).toEqual([-1, -1, -1]);
  });

  it('checks of interleaved policies find their own entries, a reload\'s runtime the same ones, another prefix others', () => {
    const rts = runtimes();
    const one = rts.get('one')!, gcra = rts.get('gcra')!;
    const cache = new StrictCache(10, true);
    const a = cache.entry('p:', one, 'k');
    const b = cache.entry('p:', gcra, 'k');
    expect(b).not.toBe(a);
    // alternating policies, as checks of free and paid tenants come: each finds its own entry every time
    for (let i = 0; i < 3; i++) {
      expect(cache.entry('p:', one, 'k')).toBe(a);
      expect(cache.entry('p:', gcra, 'k')).toBe(b);
    }
    // a reload builds new runtimes for the same policies and versions: same Redis keys, so the same entries
    const again = runtimes();
    expect(cache.entry('p:', again.get('one')!, 'k')).toBe(a);
    expect(cache.entry('p:', again.get('gcra')!, 'k')).toBe(b);
    expect(cache.entry('p:', one, 'k')).toBe(a);
    // another prefix names other Redis keys: other entries, for the runtime seen before too
    const c = cache.entry('q:', one, 'k');
    expect(c).not.toBe(a);
    expect(cache.entry('p:', one, 'k')).toBe(a);
    expect(cache.entry('q:', one, 'k')).toBe(c);
    expect(cache.size).toBe(3);
  });

  it('a reload drops the denial but keeps the last-known state of each leg whose key and algorithm stay', () => {
    const cache = new StrictCache(10, true);
    const e = cache.entry('p:', runtimes().get('one')!, 'k');
    // denied at Redis time t with 0.5 token left: the reply carries the state (w0 = 30,000 tokens·P)
    const t = 1_700_000_000_000;
    const row = [1, 0, 114_000, 54_000, t, 30_000, 0, t - 10];
    cache.learn(e, row, 0, 1);
    expect(e.deniedCost).toBe(1);
    // the same policy and version from a reload: its keys stay
    expect(cache.entry('p:', runtimes().get('one')!, 'k')).toBe(e);
    expect(e.deniedCost).toBe(-1);
    expect([...cache.statesOf(e)]).toEqual([30_000, 0, t - 10]);
    // an admission's numbers waiting on the entry are rebuilt by the runtime that sent them, then kept
    cache.learn(e, admitted(13, 42_000, t), 0, 1);
    expect(e.pending).toBe(true);
    cache.entry('p:', runtimes().get('one')!, 'k');
    expect(e.pending).toBe(false);
    expect([...cache.statesOf(e)]).toEqual([780_000, 0, t]);
    // a version given in the config keeps the keys when the numbers change; the algorithm changing too drops
    // the state (GCRA reads w0 as a time)
    const v = (algorithm: 'token_bucket' | 'gcra', limit: number) => runtimes({ one: { algorithm, limit, period: '1m', burst: 20, version: 'v1', consistency: 'strict', onStoreError: 'local' } }).get('one')!;
    const f = cache.entry('p:', v('token_bucket', 10), 'k2');
    cache.learn(f, row, 0, 1);
    cache.entry('p:', v('token_bucket', 20), 'k2');
    expect([...cache.statesOf(f)]).toEqual([30_000, 0, t - 10]);
    cache.entry('p:', v('gcra', 20), 'k2');
    expect([...cache.statesOf(f)]).toEqual([-1, -1, -1]);
  });

  it('an answer to a call sent under the runtime a reload replaced is not learned: its legs may not be the entry\'s now', () => {
    const cache = new StrictCache(10, true);
    const v = (spec: Record<string, unknown>) => runtimes({ p: { ...spec, version: 'v1', consistency: 'strict', onStoreError: 'local' } as never }).get('p')!;
    // one limit of 1 an hour, admitted at t (nothing left), then a check of it sent to Redis
    const one = v({ algorithm: 'token_bucket', limit: 1, period: '1h' });
    const e = cache.entry('p:', one, 'k');
    const t = 1_700_000_000_000;
    cache.learn(e, admitted(0, 3_600_000, t), 0, 1, t, t);
    e.inflight++;
    // a reload to two limits under the version given (same keys), and a check under it sent too
    const two = v({ limits: [{ algorithm: 'token_bucket', limit: 1, period: '1h' }, { algorithm: 'token_bucket', limit: 5, period: '1h' }] });
    expect(cache.entry('p:', two, 'k')).toBe(e);
    e.inflight++;
    expect([...cache.statesOf(e)]).toEqual([0, 0, t, -1, -1, -1]);
    // the first call's answer (one leg, denied: its state, then the call's next check's row) comes back, then
    // the second call fails (not learned)
    const denied = [1, 0, 3_600_000, 3_599_000, t + 1000, 0, 0, t];
    cache.learn(e, [...denied, ...admitted(4, 720_000, t + 1000)], 0, 1, t + 1000, t + 1000, one);
    e.inflight -= 2;
    // nothing learned from it: the second leg is not read from another check's row, and no denial stands on it
    expect([...cache.statesOf(e)]).toEqual([0, 0, t, -1, -1, -1]);
    expect(e.deniedCost).toBe(-1);
    expect(cache.overLimit(e, 1, t + 1000, 0)).toBeNull();
  });

  it('a denial is evaluated on the clock of the server that gave it; a reconnection forgets denials and offsets', () => {
    const rt = runtimes().get('one')!; // 10 a minute: one token·P (60,000) refills in 6,000 ms
    const cache = new StrictCache(10, true);
    // a master whose clock reads as this instance's, sampled often: the smallest bound, 1 ms
    for (let s0 = 0; s0 < 1000; s0 += 100) cache.sample(s0, s0, s0);
    // a key on a master 4,000 ms ahead, denied at its time 5,000 (this instance's 1,000) with nothing left
    const e = cache.entry('p:', rt, 'k');
    cache.learn(e, [1, 0, 120_000, 6000, 5000, 0, 0, 5000], 0, 1, 1000);
    expect(e.hi).toBe(4001);
    // at 6,000 here (10,000 there): 999 ms to wait by the key's own bound (Redis says 1,000: a round trip short)
    expect(cache.overLimit(e, 1, 6000, 0)).toMatchObject({ allowed: false, retryAfterMs: 999 });
    // at 7,000 here the key's master has refilled the token: not answered here (one bound for all said 5,000 ms more)
    expect(cache.overLimit(e, 1, 7000, 0)).toBeNull();
    expect(e.deniedCost).toBe(-1);
    // this instance's clock steps back 3,000 ms: the bounds renewed since say so, and win over the denial's own
    const f = cache.entry('p:', rt, 'f');
    cache.learn(f, [1, 0, 120_000, 6000, 5000, 0, 0, 5000], 0, 1, 1000);
    cache.sample(20_000, 13_000, 13_000);
    expect(cache.overLimit(f, 1, 13_000, 0)).toBeNull(); // 13,000 + 7,001: refilled
    // a new connection: no denial is answered, whatever the bounds
    const g = cache.entry('p:', rt, 'g');
    cache.learn(g, [1, 0, 120_000, 6000, 20_000, 0, 0, 20_000], 0, 1, 13_000);
    expect(cache.overLimit(g, 1, 13_500, 0)).toMatchObject({ allowed: false });
    cache.reconnected();
    expect(cache.overLimit(g, 1, 13_500, 0)).toBeNull();
  });

  it('on a Cluster, a master ahead sampled after a renewal does not shorten the wait of a key on another', () => {
    const rt = runtimes({ slow: { algorithm: 'token_bucket', limit: 1, period: '1m', burst: 1, consistency: 'strict', onStoreError: 'closed' } }).get('slow')!;
    // a key on master B, whose clock reads as this instance's, denied at 1,000 with its one token spent: full
    // again at 61,000 there
    const denied = [1, 0, 60_000, 60_000, 1000, 0, 0, 1000];
    const waits: number[] = [];
    for (const oneClock of [false, true]) {
      const cache = new StrictCache(10, true, true, oneClock);
      for (let s0 = 0; s0 <= 1000; s0 += 100) cache.sample(s0, s0, s0);
      const e = cache.entry('p:', rt, 'k');
      cache.learn(e, denied, 0, 1, 1000, 1000);
      // 10 s on, the bounds start over, and the first call answered is master A's, 4,000 ms ahead
      cache.sample(15_000, 11_000, 11_000);
      const d = cache.overLimit(e, 1, 11_000, 0);
      expect(d).toMatchObject({ allowed: false });
      waits.push(d!.retryAfterMs!);
    }
    // a Cluster (Store.oneClock false): B's own bound, 1 ms (Redis on B says 50,000); one server's clock would
    // have taken A's 4,001 for it
    expect(waits).toEqual([49_999, 45_999]);
  });

  it('the wall clock stepping back, with no call since, is read against the monotonic clock: no denial Redis would not give', () => {
    const rt = runtimes().get('one')!; // 10 a minute: one token refills in 6,000 ms
    let mono = 500;
    const cache = new StrictCache(10, true, true, true, () => mono);
    // denied at Redis's 1,000 (this instance's 1,000, its monotonic 500), nothing left: refilled at 7,000
    cache.at(1000);
    cache.sample(1000, 1000, 1000);
    const e = cache.entry('p:', rt, 'k');
    cache.learn(e, [1, 0, 120_000, 6000, 1000, 0, 0, 1000], 0, 1, 1000, 1000);
    // 4,000 ms on: 2,000 to wait (1,999: the call's bound)
    mono = 4500;
    cache.at(5000);
    expect(cache.overLimit(e, 1, 5000, 0)).toMatchObject({ allowed: false, retryAfterMs: 1999 });
    // 7,000 ms on, the wall clock stepped back 3,000 (it reads 5,000): Redis has refilled, so not answered here
    // (by the wall clock alone, 2,000 ms more of denials)
    mono = 7500;
    cache.at(5000);
    expect(cache.overLimit(e, 1, 5000, 0)).toBeNull();
    // without a monotonic clock (a clock of the caller's) the limiter's clock is taken as it is
    const plain = new StrictCache(10, true);
    const f = plain.entry('p:', rt, 'k');
    plain.sample(1000, 1000, 1000);
    plain.learn(f, [1, 0, 120_000, 6000, 1000, 0, 0, 1000], 0, 1, 1000, 1000);
    expect(plain.overLimit(f, 1, 5000, 0)).toMatchObject({ allowed: false, retryAfterMs: 1999 });
  });

  it('the wall clock stepping back while the denying call is in flight: the bound is read at the send\'s lead, no denial Redis would not give', () => {
    const rt = runtimes().get('one')!; // 10 a minute: one token refills in 6,000 ms
    let mono = 0;
    const cache = new StrictCache(10, true, true, true, () => mono);
    // sent at this instance's 10,000 (monotonic 0; Redis's clock reads as this instance's)
    cache.at(10_000);
    const lead = cache.lead;
    const e = cache.entry('p:', rt, 'k');
    // answered 1 ms on, after the wall clock stepped back 3,000 (it reads 7,001): denied at Redis's 10,000,
    // nothing left, a token again at Redis's 16,000
    mono = 1;
    cache.sample(10_000, 10_000, 7001, lead);
    cache.learn(e, [1, 0, 120_000, 6000, 10_000, 0, 0, 10_000], 0, 1, 10_000, 7001, rt, Number.POSITIVE_INFINITY, lead);
    // 4,000 ms on (Redis's 14,000, the wall clock's 11,000): 2,000 to wait (1,999: the call's bound); the
    // answer's lead taken for the send's had given 4,999
    mono = 4000;
    cache.at(11_000);
    expect(cache.overLimit(e, 1, 11_000, 0)).toMatchObject({ allowed: false, retryAfterMs: 1999 });
    // 6,000 ms on (Redis's 16,000): Redis admits, so the cache does not answer (it had denied, 2,999 to wait)
    mono = 6000;
    cache.at(13_000);
    expect(cache.overLimit(e, 1, 13_000, 0)).toBeNull();
  });

  /**
   * A cache on a monotonic clock (`clock.mono`) holding a denial of key k ('one': 10 a minute) learned at Redis's
   * 10,000, this instance's 10,000 and monotonic 0, nothing left: a token again at Redis's 16,000.
   */
  function deniedAt10k(oneClock: boolean): { cache: StrictCache; e: ReturnType<StrictCache['entry']>; clock: { mono: number } } {
    const rt = runtimes().get('one')!;
    const clock = { mono: 0 };
    const cache = new StrictCache(10, true, true, oneClock, () => clock.mono);
    cache.at(10_000);
    const lead = cache.lead;
    const e = cache.entry('p:', rt, 'k');
    cache.sample(10_000, 10_000, 10_000, lead);
    cache.learn(e, [1, 0, 120_000, 6000, 10_000, 0, 0, 10_000], 0, 1, 10_000, 10_000, rt, Number.POSITIVE_INFINITY, lead);
    return { cache, e, clock };
  }

  it('the wall clock stepping ahead, with no call since: the denial is evaluated that much late (its wait short by the step), never early', () => {
    const { cache, e, clock } = deniedAt10k(true);
    // 2,000 ms on (Redis's 12,000), the wall clock stepped ahead 3,000 (it reads 15,000): Redis says 4,000 to
    // wait; the cache, which cannot tell this step from a suspend (next test), reads the wall clock: 999
    clock.mono = 2000;
    cache.at(15_000);
    expect(cache.overLimit(e, 1, 15_000, 0)).toMatchObject({ allowed: false, retryAfterMs: 999 });
    // 3,001 ms on (Redis's 13,001): the cache holds the denial no longer, and the check goes to Redis (which
    // denies it, 2,999 to wait)
    clock.mono = 3001;
    cache.at(16_001);
    expect(cache.overLimit(e, 1, 16_001, 0)).toBeNull();
  });

  it.each([['one Redis', true], ['a Cluster', false]])('the monotonic clock stopped in a suspend (the wall clock and Redis\'s went on), on %s: no denial once Redis has refilled', (_, oneClock) => {
    const { cache, e, clock } = deniedAt10k(oneClock);
    // suspended 5,000 ms: the monotonic clock stood still, the wall clock and Redis's read 15,000: 1,000 to wait
    cache.at(15_000);
    expect(cache.overLimit(e, 1, 15_000, 0)).toMatchObject({ allowed: false, retryAfterMs: 999 });
    // 1,000 ms on (Redis's 16,000): refilled, not answered here; taken for a step ahead, the suspend had kept
    // the denial 5,000 ms more (4,999 to wait)
    clock.mono = 1000;
    cache.at(16_000);
    expect(cache.overLimit(e, 1, 16_000, 0)).toBeNull();
  });

  it('a seed reads a state\'s Redis time through the bound its own answer gave (the key\'s master), not another master\'s', () => {
    const rt = runtimes().get('one')!;
    const cache = new StrictCache(10, true);
    // a master whose clock reads as this instance's: the largest lower bound lately, −1 ms
    for (let s0 = 10_000; s0 < 11_000; s0 += 100) cache.sample(s0, s0, s0);
    // a key on a master 4,000 ms behind, answered at this instance's 10,000 (its 6,000)
    const e = cache.entry('p:', rt, 'k');
    cache.learn(e, [1, 0, 120_000, 6000, 6000, 0, 0, 6000], 0, 1, 10_000, 10_000);
    expect(e.lo).toBe(-4001);
    // its lastSeen 6,000 there is 10,000 here (10,001: no earlier than true, so never more refill); through the
    // other master's bound it would read 6,001, handing the kernel 4 s of refill Redis never gave
    expect(cache.toLocal(6000, 20_000, e.lo)).toBe(10_001);
    expect(cache.toLocal(6000, 20_000)).toBe(6001);
  });

  it.each([['one Redis', true], ['a Cluster', false]])('a seed after the wall clock went ahead of the monotonic one, on %s: no more refill than Redis gave', (_, oneClock) => {
    const { cache, e, clock } = deniedAt10k(oneClock);
    // the state's lastSeen, Redis's 10,000, is this instance's 10,001 (the answer's bound)
    expect(cache.toLocal(10_000, 12_000, e.lo, e.loLead)).toBe(10_001);
    // 2,000 ms on (monotonic 2,000, Redis's 12,000), the wall clock stepped ahead 3,000: it reads 15,000, and
    // lastSeen is 13,001 here (2,000 ms of refill, as Redis gives); taken as it was, 10,001 had given 5,000
    clock.mono = 2000;
    cache.at(15_000);
    expect(cache.toLocal(10_000, 15_000, e.lo, e.loLead)).toBe(13_001);
    // the bounds seen lately, on one Redis, read the same way
    if (oneClock) expect(cache.toLocal(10_000, 15_000)).toBe(13_001);
    // a wall clock that stepped back is not followed (the later time: less refill, the safe side)
    cache.at(8000);
    expect(cache.toLocal(10_000, 20_000, e.lo, e.loLead)).toBe(10_001);
  });

  it('a seed after a suspend (the monotonic clock stood still): the suspend\'s refill is not given, the safe side', () => {
    const { cache, e } = deniedAt10k(true);
    // suspended 5,000 ms: the wall clock and Redis's read 15,000, the monotonic clock still 0. It cannot be told
    // from a step ahead: lastSeen is read 5,000 later, and the kernel refills from 15,000 (now)
    cache.at(15_000);
    expect(cache.toLocal(10_000, 15_000, e.lo, e.loLead)).toBe(15_000);
  });
});
