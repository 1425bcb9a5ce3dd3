/**
 * The store's deadline (src/store/deadline.ts), its reply reading (src/store/reply.ts) and the failure kinds
 * (src/store/failure-kind.ts): which errors are about Redis's health (they count toward the breaker) and
 * which about one call.
 */
import { describe, expect, it, vi, afterEach } from 'vitest';
import { deadline, Liveness, StoreTimeoutError } from '../../../src/store/deadline.js';
import { LEG_WIDE, spentBy, widen } from '../../../src/store/reply.js';
import { failureKind } from '../../../src/store/failure-kind.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A promise with its resolve, and whether it settled (to look without awaiting). */
function pending<T>(): { p: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const p = new Promise<T>((r) => (resolve = r));
  return { p, resolve };
}

function state<T>(p: Promise<T>): { s: 'pending' | 'resolved' | 'rejected'; v?: unknown } {
  const o: { s: 'pending' | 'resolved' | 'rejected'; v?: unknown } = { s: 'pending' };
  p.then((v) => { o.s = 'resolved'; o.v = v; }, (e) => { o.s = 'rejected'; o.v = e; });
  return o;
}

describe('deadline: slow is not down', () => {
  it('a call on a silent connection fails after timeoutMs', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
    const live = new Liveness();
    const call = pending<number>();
    const st = state(deadline(call.p, 20, live));
    await vi.advanceTimersByTimeAsync(19);
    expect(st.s).toBe('pending');
    await vi.advanceTimersByTimeAsync(2);
    expect(st.s).toBe('rejected');
    expect(st.v).toBeInstanceOf(StoreTimeoutError);
  });

  it('a call queued behind replies that keep coming waits past timeoutMs, and gets its answer', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
    const live = new Liveness();
    const call = pending<number>();
    const st = state(deadline(call.p, 20, live));
    // Redis answers the calls ahead of it every 15 ms for 150 ms
    for (let t = 0; t < 10; t++) {
      await vi.advanceTimersByTimeAsync(15);
      live.replied();
    }
    expect(st.s).toBe('pending');
    call.resolve(7);
    await vi.advanceTimersByTimeAsync(0);
    expect(st).toStrictEqual({ s: 'resolved', v: 7 });
  });

  it('replies stop: it fails timeoutMs after the last one; a reply after that is handed over as a late one', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
    const live = new Liveness();
    const call = pending<number>();
    const late: number[] = [];
    const st = state(deadline(call.p, 20, live, (v) => late.push(v)));
    await vi.advanceTimersByTimeAsync(15);
    live.replied(); // at 15
    await vi.advanceTimersByTimeAsync(19); // 34: 19 ms of silence
    expect(st.s).toBe('pending');
    await vi.advanceTimersByTimeAsync(2); // 36: 21 ms of silence
    expect(st.s).toBe('rejected');
    call.resolve(3);
    await vi.advanceTimersByTimeAsync(0);
    expect(late).toStrictEqual([3]);
  });

  it('a hard cap bounds a call whatever the connection does', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
    const live = new Liveness();
    const st = state(deadline(pending<number>().p, 20, live, undefined, 100));
    for (let t = 0; t < 9; t++) {
      await vi.advanceTimersByTimeAsync(10);
      live.replied();
    }
    expect(st.s).toBe('pending');
    await vi.advanceTimersByTimeAsync(11);
    expect(st.s).toBe('rejected');
  });
});

describe('the check script\'s reply', () => {
  // ARGV: clock flag, now, n; then per leg: algorithm, L, P, B, cost, group length
  const args = [1, 0, 3, 0, 5, 1000, 5, 2, 1, /* leg 1 */ 2, 5, 1000, 5, 2, 2, /* leg 2 */ 2, 9, 1000, 9, 2, 0];
  it('widens: outputs, the time, and the states of every leg of a denied check', () => {
    // check A (leg 0) admitted; check B (legs 1, 2) denied on leg 2
    const raw = [0, 3, 400, 0, /* leg 1 */ 0, 4, 900, 0, /* leg 2 */ 1, 0, 900, 900, /* t */ 1234,
      /* leg 1 state */ 1, 0, 1100, /* leg 2 state */ 9, 0, 1100];
    const w = widen(raw, args, 3);
    expect(w.length).toBe(3 * LEG_WIDE);
    expect(w.slice(0, 8)).toStrictEqual([0, 3, 400, 0, 1234, NaN, NaN, NaN]);
    expect(w.slice(8, 16)).toStrictEqual([0, 4, 900, 0, 1234, 1, 0, 1100]);
    expect(w.slice(16, 24)).toStrictEqual([1, 0, 900, 900, 1234, 9, 0, 1100]);
  });

  it('counts what a late call spent: the cost of each check whose every leg was admitted', () => {
    expect(spentBy([0, 3, 400, 0, 0, 4, 900, 0, 1, 0, 900, 900, 1234], args, 3)).toBe(2);
    expect(spentBy([0, 3, 400, 0, 0, 4, 900, 0, 0, 7, 900, 0, 1234], args, 3)).toBe(4);
  });

  it('reads the group length under a leg\'s maxDelayMs (onLimit: delay: + maxDelayMs · 65536)', () => {
    // check A (leg 0) delayed by up to 250 ms and admitted with a 100 ms wait; check B (legs 1, 2) as above
    const delayed = args.slice();
    delayed[3 + 5] = 1 + 250 * 65536;
    const raw = [0, 0, 1100, 100, /* leg 1 */ 0, 4, 900, 0, /* leg 2 */ 1, 0, 900, 900, /* t */ 1234,
      /* leg 1 state */ 1, 0, 1100, /* leg 2 state */ 9, 0, 1100];
    const w = widen(raw, delayed, 3);
    expect(w.slice(0, 8)).toStrictEqual([0, 0, 1100, 100, 1234, NaN, NaN, NaN]);
    expect(w.slice(8, 16)).toStrictEqual([0, 4, 900, 0, 1234, 1, 0, 1100]);
    expect(w.slice(16, 24)).toStrictEqual([1, 0, 900, 900, 1234, 9, 0, 1100]);
    expect(spentBy(raw, delayed, 3)).toBe(2);
  });
});

describe('failure kinds', () => {
  const reply = (message: string): Error => Object.assign(new Error(message), { name: 'ReplyError' });
  it('Redis saying it cannot serve is `unavailable` (it counts toward the breaker)', () => {
    for (const m of [
      "OOM command not allowed when used memory > 'maxmemory'.",
      "ERR Error running script (call to f_0123): @user_script:1: OOM command not allowed when used memory > 'maxmemory'.",
      'BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.',
      'LOADING Redis is loading the dataset in memory',
      "READONLY You can't write against a read only replica.",
      'MASTERDOWN Link with MASTER is down', 'CLUSTERDOWN The cluster is down', 'TRYAGAIN Multiple keys request during rehashing of slot',
      'MISCONF Redis is configured to save RDB snapshots, but it is currently not able to persist on disk.',
      'NOREPLICAS Not enough good replicas to write.',
    ]) expect(failureKind(reply(m)), m).toBe('unavailable');
  });
  it('an error about the call is a script error (it does not count toward the breaker)', () => {
    expect(failureKind(reply('WRONGTYPE Operation against a key holding the wrong kind of value'))).toBe('scriptErrors');
    expect(failureKind(reply('ERR Error running script (call to f_0123): @user_script:9: attempt to compare nil with number'))).toBe('scriptErrors');
  });
  it('a code inside a script error text (a key name, a message) is not Redis saying it cannot serve', () => {
    for (const m of [
      // lua/lease.lua names the key it could not read: the key here is `t: BUSY`
      'sluice lease: malformed lease x in t: BUSY',
      'ERR user_script:1: OOM in a message of the script script: 962b4c95, on @user_script:1.',
      'ERR Error running script (call to f_0123): @user_script:3: bad leg for key k: READONLY',
      'WRONGTYPE key a: LOADING holds another type',
    ]) expect(failureKind(reply(m)), m).toBe('scriptErrors');
    // Redis 6's wrapping with the line twice, and the code after a dash, as redis.call raised it
    expect(failureKind(reply("ERR Error running script (call to f_0123): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.")))
      .toBe('unavailable');
  });
  it('timeouts, breaker rejections and connection errors', () => {
    expect(failureKind(new StoreTimeoutError(20))).toBe('timeouts');
    expect(failureKind(Object.assign(new Error('Breaker is open'), { code: 'EOPENBREAKER' }))).toBe('breakerRejections');
    expect(failureKind(new Error('Connection is closed.'))).toBe('connectionErrors');
  });
});
