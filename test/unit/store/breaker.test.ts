/**
 * The circuit breaker (src/store/breaker.ts) around a fake store call: besides opossum's percentage rule, it
 * opens after `volumeThreshold` (default 5) consecutive failures that count toward it, however many successes
 * fill its rolling window; a success between them starts the count again, and errors its filter calls healthy
 * (a bad key's script error) do not count.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createBreaker, probeWrite } from '../../../src/store/breaker.js';
import { StoreTimeoutError } from '../../../src/store/deadline.js';
import { failureKind } from '../../../src/store/failure-kind.js';

class BadKey extends Error {}

/** A store call answering by `mode`: ok, a timeout (as src/store/deadline.ts rejects), or a bad key's error. */
function fake(o?: Parameters<typeof createBreaker>[1]) {
  let mode: 'ok' | 'timeout' | 'bad' = 'ok';
  const b = createBreaker(async () => {
    if (mode === 'timeout') throw new StoreTimeoutError(200);
    if (mode === 'bad') throw new BadKey('a key holds another type');
    return 1;
  }, o, (e) => e instanceof BadKey);
  const fire = async (m: typeof mode, n = 1): Promise<void> => {
    mode = m;
    for (let i = 0; i < n; i++) await b.breaker.fire().catch(() => undefined);
  };
  return { ...b, fire };
}

describe('breaker: consecutive failures', () => {
  const made: Array<{ breaker: { shutdown(): void } }> = [];
  const make = (o?: Parameters<typeof createBreaker>[1]) => {
    const f = fake(o);
    made.push(f);
    return f;
  };
  afterEach(() => {
    for (const f of made.splice(0)) f.breaker.shutdown();
  });

  it('opens after 5 consecutive timeouts following 1,000 successes (the window far below 50 %)', async () => {
    const f = make();
    await f.fire('ok', 1000);
    await f.fire('timeout', 4);
    expect(f.state()).toBe('closed');
    await f.fire('timeout');
    expect(f.state()).toBe('open');
  });

  it('a success between failures starts the count again', async () => {
    const f = make();
    await f.fire('ok', 1000);
    for (let i = 0; i < 10; i++) {
      await f.fire('timeout', 4);
      await f.fire('ok');
    }
    expect(f.state()).toBe('closed');
    await f.fire('timeout', 5);
    expect(f.state()).toBe('open');
  });

  it('errors the filter calls healthy do not count (and, answered by Redis, end a run)', async () => {
    const f = make();
    await f.fire('ok', 1000);
    await f.fire('bad', 50);
    expect(f.state()).toBe('closed');
    await f.fire('timeout', 4);
    await f.fire('bad');
    await f.fire('timeout', 4);
    expect(f.state()).toBe('closed');
    await f.fire('timeout');
    expect(f.state()).toBe('open');
  });

  it('keeps the percentage rule: over half of the window failed opens it with no 5 in a row', async () => {
    const f = make();
    for (let i = 0; i < 2; i++) {
      await f.fire('ok');
      await f.fire('timeout', 2);
    }
    // 4 failures of 6 calls, never more than 2 in a row
    expect(f.state()).toBe('open');
  });

  it('the run is the volume threshold: 3 opens after 3', async () => {
    const f = make({ volumeThreshold: 3 });
    await f.fire('ok', 100);
    await f.fire('timeout', 2);
    expect(f.state()).toBe('closed');
    await f.fire('timeout');
    expect(f.state()).toBe('open');
  });

  it('the count starts again after the circuit closes', async () => {
    const f = make({ resetMs: 20, maxResetMs: 20 });
    await f.fire('ok', 100);
    await f.fire('timeout', 5);
    expect(f.state()).toBe('open');
    await new Promise((r) => setTimeout(r, 40));
    expect(f.state()).toBe('halfOpen');
    await f.fire('ok'); // the probe closes it
    expect(f.state()).toBe('closed');
    await f.fire('ok', 1000);
    await f.fire('timeout', 4);
    expect(f.state()).toBe('closed');
    await f.fire('timeout');
    expect(f.state()).toBe('open');
  });
});

describe('probeWrite (a breaker\'s idle probe)', () => {
  const reply = (message: string): Error => Object.assign(new Error(message), { name: 'ReplyError' });
  // as src/store/redis.ts gives it: Redis answered, with a refusal that says nothing of its health
  const healthy = (e: unknown): boolean => failureKind(e) === 'scriptErrors';
  const asked: unknown[][] = [];
  const client = (answer: () => Promise<unknown>) => ({
    set: (...a: unknown[]) => {
      asked.push(a);
      return answer();
    },
  });
  const within = (p: Promise<unknown>): Promise<unknown> => p;

  it('sends SET key "" XX (it writes nothing), and resolves when Redis answers, or refuses for a reason that is not its health', async () => {
    await expect(probeWrite(client(() => Promise.resolve(null)), 'p:breaker-probe', within, healthy)).resolves.toBeUndefined();
    expect(asked.at(-1)).toEqual(['p:breaker-probe', '', 'XX']);
    await expect(probeWrite(client(() => Promise.reject(reply("NOPERM this user has no permissions to run the 'set' command"))), 'k', within, healthy))
      .resolves.toBeUndefined();
  });

  it('rejects when Redis refuses it as unwell, or does not answer', async () => {
    for (const e of [reply("OOM command not allowed when used memory > 'maxmemory'."), reply("READONLY You can't write against a read only replica."),
      reply('LOADING Redis is loading the dataset in memory'), new StoreTimeoutError(20)]) {
      await expect(probeWrite(client(() => Promise.reject(e)), 'k', within, healthy)).rejects.toBe(e);
    }
  });
});

describe('breaker heartbeat (closed and idle: its own probe)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('probes every heartbeatMs without calls, opens on a failed probe, not while calls are made, and stops at shutdown', async () => {
    vi.useFakeTimers();
    let probes = 0;
    let failing = false;
    const { breaker, state } = createBreaker(async () => 1, { heartbeatMs: 1000, resetMs: 60_000, maxResetMs: 60_000 }, () => false, async () => {
      probes++;
      if (failing) throw new StoreTimeoutError(200);
    });
    try {
      await vi.advanceTimersByTimeAsync(999);
      expect(probes).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      expect(probes).toBe(1);
      expect(state()).toBe('closed');
      // a call in each beat: no probe (the calls say how the store is)
      for (let i = 0; i < 3; i++) {
        await breaker.fire();
        await vi.advanceTimersByTimeAsync(1000);
      }
      expect(probes).toBe(1);
      // idle again, the store frozen: the next beat's probe fails and opens the circuit
      failing = true;
      await vi.advanceTimersByTimeAsync(1000);
      expect(probes).toBe(2);
      expect(state()).toBe('open');
    } finally {
      breaker.shutdown();
    }
    // shut down: no probe after
    await vi.advanceTimersByTimeAsync(5000);
    expect(probes).toBe(2);
  });

  it('heartbeatMs 0, or no probe: none', async () => {
    vi.useFakeTimers();
    let probes = 0;
    const off = createBreaker(async () => 1, { heartbeatMs: 0 }, () => false, async () => {
      probes++;
    });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(probes).toBe(0);
    expect(off.state()).toBe('closed');
    off.breaker.shutdown();
  });
});
