/**
 * A subscription herd on /v1/stream (issue #20, item 5): subscriptions are bounded per instance as well as
 * per connection (past the bound a check gets its decision and `subscribed: false`), and subscriptions that
 * come due together are peeked at most `maxFiresPerTick` per tick, the rest in the next ticks, oldest first.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { TestSocket, closeAllServers, sleep, startStreamServer } from './ws-support.js';

afterEach(closeAllServers);

// one check a second per key: after one admission, a check of cost 1 is denied for exactly 1 s
const POLICIES: Record<string, PolicySpec> = { p: { algorithm: 'fixed_window', limit: 1, period: '1s' } };

/** Spends key k<i> for i in [from, to), then subscribes a check of cost 1 on each (denied, 1 s to wait). */
async function subscribeAll(c: TestSocket, from: number, to: number): Promise<Array<[number, boolean]>> {
  const n = c.answerCount;
  c.sendJson(Array.from({ length: to - from }, (_, i) => ({ id: `spend-${from + i}`, policy: 'p', key: `k${from + i}`, cost: 1 })));
  c.sendJson(Array.from({ length: to - from }, (_, i) => ({ id: from + i, policy: 'p', key: `k${from + i}`, cost: 1, subscribe: true })));
  await c.answers(n + 2 * (to - from));
  return c.texts.slice(n).filter((a) => typeof a.id === 'number').map((a) => [a.id as number, a.subscribed as boolean]);
}

describe('subscriptions over many connections', () => {
  it('past maxInstanceSubscriptions a check is answered with subscribed: false, and counted', async () => {
    const s = await startStreamServer({ policies: POLICIES, stream: { maxSubscriptions: 100, maxInstanceSubscriptions: 150 } });
    const a = await TestSocket.open(s.wsUrl);
    const b = await TestSocket.open(s.wsUrl);
    expect((await subscribeAll(a, 0, 100)).every(([, sub]) => sub)).toBe(true);
    const onB = await subscribeAll(b, 100, 200);
    expect(onB.filter(([, sub]) => sub).map(([id]) => id)).toStrictEqual(Array.from({ length: 50 }, (_, i) => 100 + i));
    expect(onB.filter(([, sub]) => !sub)).toHaveLength(50);
    expect(s.stream.stats()).toMatchObject({ subscriptions: 150, subscriptionsRefused: 50 });
    // room comes back as subscriptions end: a's connection closes, b subscribes again
    a.close();
    await a.closed();
    for (let i = 0; s.stream.stats().subscriptions !== 50; i++) {
      if (i > 500) throw new Error('a\'s subscriptions were not dropped within 5 s');
      await sleep(10);
    }
    expect((await subscribeAll(b, 150, 200)).every(([, sub]) => sub)).toBe(true);
    expect(s.stream.stats().subscriptions).toBe(100);
  });

  it('a herd due at once is peeked at most maxFiresPerTick per tick, and every push arrives, none early', async () => {
    const s = await startStreamServer({ policies: POLICIES, stream: { maxSubscriptions: 100, maxFiresPerTick: 40 } });
    const a = await TestSocket.open(s.wsUrl);
    const b = await TestSocket.open(s.wsUrl);
    await subscribeAll(a, 0, 100);
    await subscribeAll(b, 100, 150);
    const ready = (): number => [...a.texts, ...b.texts].filter((x) => x.ready === true).length;
    s.stream.tick(); // nothing is due yet
    expect(ready()).toBe(0);
    s.clock.advance(1000); // all 150 come due together
    const after: number[] = [];
    for (let t = 0; t < 4; t++) {
      const before = ready();
      s.stream.tick();
      const want = Math.min(150, before + 40);
      await a.until(() => ready() === want, 5000, `${want} pushes`);
      after.push(ready());
    }
    expect(after).toStrictEqual([40, 80, 120, 150]);
    expect(s.stream.stats()).toMatchObject({ subscriptions: 0, pushed: 150, deferredTicks: 3 });
  });
});
