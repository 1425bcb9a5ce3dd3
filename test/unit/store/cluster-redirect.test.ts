/**
 * src/store/cluster-redirect.ts and the resend order it keeps (src/store/library-way.ts resendInTurn): a MOVED or
 * ASK reply read as a redirection, the command sent to the node it names on that node's own client (ASKING first
 * for an ASK, the slot map read again after a MOVED), and a redirected resend made in its slot's turn, after
 * the resends of calls that failed before it. The Cluster is a stand-in with the members sendRedirected uses.
 */
import type { Cluster, Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { followed, redirectOf, sendRedirected, splitByMigration } from '../../../src/store/cluster-redirect.js';
import { resendInTurn, SETTLED, type ResendTurn } from '../../../src/store/library-way.js';

/** A Cluster stand-in: what it was asked, in order. */
function fakeCluster(): { c: Cluster; log: string[] } {
  const log: string[] = [];
  const nodes = new Map<string, Redis>();
  const c = {
    isCluster: true,
    natMapper: (key: string) => ({ host: key.slice(0, key.lastIndexOf(':')), port: Number(key.slice(key.lastIndexOf(':') + 1)) }),
    connectionPool: {
      findOrCreate: (o: { host: string; port: number }) => {
        const name = `${o.host}:${o.port}`;
        let n = nodes.get(name);
        if (n === undefined) {
          log.push(`pool+ ${name}`);
          n = { asking: () => (log.push(`ASKING ${name}`), Promise.resolve('OK')), name } as unknown as Redis;
          nodes.set(name, n);
        }
        return n;
      },
    },
    refreshSlotsCache: () => log.push('refresh slots'),
  } as unknown as Cluster;
  return { c, log };
}

describe('cluster-redirect', () => {
  it('reads MOVED and ASK replies, and nothing else, as redirections', () => {
    expect(redirectOf(new Error('MOVED 9182 127.0.0.1:7002'))).toEqual({ ask: false, slot: 9182, node: '127.0.0.1:7002' });
    expect(redirectOf(new Error('ASK 12 10.0.0.5:6380'))).toEqual({ ask: true, slot: 12, node: '10.0.0.5:6380' });
    expect(redirectOf(new Error('ERR Function not found'))).toBeNull();
    expect(redirectOf(new Error('TRYAGAIN Multiple keys request during rehashing of slot'))).toBeNull();
    expect(redirectOf(new Error('MOVED 9182'))).toBeNull();
    expect(redirectOf(undefined)).toBeNull();
    expect(splitByMigration(new Error('TRYAGAIN Multiple keys request during rehashing of slot'))).toBe(true);
    expect(splitByMigration(new Error('ASK 12 10.0.0.5:6380'))).toBe(false);
    expect(splitByMigration(null)).toBe(false);
  });

  it('sends an ASK\'s command to the node it names after ASKING, on the same client; a MOVED\'s after reading the slot map', async () => {
    const { c, log } = fakeCluster();
    const sent = (tag: string) => (n: Redis): Promise<string> => {
      log.push(`${tag} ${(n as unknown as { name: string }).name}`);
      return Promise.resolve(tag);
    };
    expect(await sendRedirected(c, { ask: true, slot: 3, node: '127.0.0.1:7005' }, sent('FCALL'))).toBe('FCALL');
    expect(await sendRedirected(c, { ask: false, slot: 3, node: '127.0.0.1:7005' }, sent('EVALSHA'))).toBe('EVALSHA');
    expect(log).toEqual(['pool+ 127.0.0.1:7005', 'ASKING 127.0.0.1:7005', 'FCALL 127.0.0.1:7005', 'refresh slots', 'EVALSHA 127.0.0.1:7005']);
  });

  it('refuses a Cluster without the members it uses', () => {
    expect(() => sendRedirected({} as Cluster, { ask: true, slot: 0, node: 'h:1' }, () => Promise.resolve(0))).toThrow(TypeError);
  });

  it('makes a redirected resend after the resends of the calls that failed before it on its turn', async () => {
    const turn: ResendTurn = { last: SETTLED };
    const order: string[] = [];
    let loaded!: () => void;
    const load = new Promise<void>((r) => (loaded = r));
    // the first failure's resend waits for a library load (LibraryWay.resend's way); the second's is a redirection
    const first = resendInTurn(turn, () => load, () => (order.push('first'), Promise.resolve(1)));
    const second = resendInTurn(turn, () => undefined, () => (order.push('second'), Promise.resolve(2)));
    const third = resendInTurn(turn, () => undefined, () => (order.push('third'), Promise.resolve(3)));
    await Promise.resolve();
    expect(order).toEqual([]);
    loaded();
    expect(await Promise.all([first, second, third])).toEqual([1, 2, 3]);
    expect(order).toEqual(['first', 'second', 'third']);
  });

  it('follows a command\'s redirections up to the hops given, and passes any other failure on', async () => {
    const { c, log } = fakeCluster();
    const name = (n: Redis | Cluster): string => (n === c ? 'cluster' : (n as unknown as { name: string }).name);
    // by the slot map: MOVED to 7002; there: ASK to 7003; there: decided
    const answers: Record<string, () => Promise<string>> = {
      cluster: () => Promise.reject(new Error('MOVED 5 127.0.0.1:7002')),
      '127.0.0.1:7002': () => Promise.reject(new Error('ASK 5 127.0.0.1:7003')),
      '127.0.0.1:7003': () => Promise.resolve('value'),
    };
    expect(await followed(c, (n) => answers[name(n)]())).toBe('value');
    expect(log).toEqual(['pool+ 127.0.0.1:7002', 'refresh slots', 'pool+ 127.0.0.1:7003', 'ASKING 127.0.0.1:7003']);
    // one hop allowed: the second redirection is the failure
    await expect(followed(c, (n) => answers[name(n)](), 1)).rejects.toThrow('ASK 5 127.0.0.1:7003');
    // not a redirection: as it came
    await expect(followed(c, () => Promise.reject(new Error('OOM command not allowed')))).rejects.toThrow('OOM command not allowed');
  });

  it('makes a retry after the pause asked for, and the next failure\'s resend after it', async () => {
    vi.useFakeTimers();
    try {
      const turn: ResendTurn = { last: SETTLED };
      const order: string[] = [];
      const retry = resendInTurn(turn, () => new Promise<void>((r) => setTimeout(r, 30)), () => (order.push('retry'), Promise.resolve(1)));
      const next = resendInTurn(turn, () => undefined, () => (order.push('next'), Promise.resolve(2)));
      await vi.advanceTimersByTimeAsync(29);
      expect(order).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(await Promise.all([retry, next])).toEqual([1, 2]);
      expect(order).toEqual(['retry', 'next']);
    } finally {
      vi.useRealTimers();
    }
  });
});
