/**
 * The reset channel (src/engine/reset-channel.ts) on a fake pub/sub: what a message must be to be applied,
 * an instance's own messages not applied again, a publish that fails kept and sent again when the channel is
 * ready, and every readiness reported (the limiter then forgets its over-limit denials: resets may have been
 * missed). End to end, on Redis and a MemoryStore: test/integration/reset-broadcast.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MAX_UNSENT, parseReset, ResetChannel, type HeardReset } from '../../../src/engine/reset-channel.js';
import type { PubSub, StoreChannel } from '../../../src/store/contract.js';

/** A channel whose publish fails while `down`; `ready()` calls the onReady listeners; `deliver` a message. */
function fakePubSub() {
  const published: string[] = [];
  const ready: Array<() => void> = [];
  let deliver: (m: string) => void = () => undefined;
  const f = {
    down: false,
    published,
    ready: () => ready.forEach((fn) => fn()),
    deliver: (m: string) => deliver(m),
    closed: false,
    pubsub: {
      channel(name: string, onMessage: (m: string) => void): StoreChannel {
        expect(name).toBe('pre:resets');
        deliver = onMessage;
        return {
          subscribed: Promise.resolve(),
          publish: (m) => (f.down ? Promise.reject(new Error('away')) : (published.push(m), Promise.resolve(1))),
          onReady: (fn) => ready.push(fn),
          onResubscribed: () => undefined,
          close: async () => { f.closed = true; },
        };
      },
    } satisfies PubSub,
  };
  return f;
}

const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('parseReset', () => {
  const ok = { v: 1, origin: 'o', policy: 'p', version: 'v1', key: 'tenant:7' };
  it('reads a reset', () => {
    expect(parseReset(JSON.stringify(ok))).toStrictEqual({ origin: 'o', policy: 'p', version: 'v1', key: 'tenant:7' });
    expect(parseReset(JSON.stringify({ ...ok, key: 'é'.repeat(512) }))?.key).toBe('é'.repeat(512));
  });

  it('refuses anything else', () => {
    const bad: unknown[] = [
      'x', '', '1', 'null', '[]', '"s"', JSON.stringify([ok]),
      { ...ok, v: 2 }, { ...ok, v: '1' }, { ...ok, origin: '' }, { ...ok, origin: 3 }, { ...ok, policy: undefined },
      { ...ok, version: null }, { ...ok, key: '' }, { ...ok, key: 5 }, { ...ok, key: 'é'.repeat(513) }, { ...ok, key: '\ud800' },
    ];
    for (const m of bad) expect(parseReset(typeof m === 'string' ? m : JSON.stringify(m)), JSON.stringify(m)).toBeNull();
    expect(parseReset(JSON.stringify({ ...ok, pad: 'x'.repeat(20_000) }))).toBeNull();
  });
});

describe('ResetChannel', () => {
  it('applies others\' resets, not its own; counts applied, ignored, malformed', async () => {
    const f = fakePubSub();
    const heard: HeardReset[] = [];
    const c = new ResetChannel({ pubsub: f.pubsub, prefix: 'pre:', apply: (r) => (heard.push(r), r.policy === 'p'), onReady: () => undefined });
    c.announce('p', 'v1', 'k');
    await flush();
    expect(f.published.map((m) => JSON.parse(m))).toStrictEqual([{ v: 1, origin: c.origin, policy: 'p', version: 'v1', key: 'k' }]);
    f.deliver(f.published[0]);
    f.deliver(JSON.stringify({ v: 1, origin: 'other', policy: 'p', version: 'v1', key: 'k' }));
    f.deliver(JSON.stringify({ v: 1, origin: 'other', policy: 'q', version: 'v1', key: 'k' }));
    f.deliver('{');
    expect(heard).toStrictEqual([{ origin: 'other', policy: 'p', version: 'v1', key: 'k' }, { origin: 'other', policy: 'q', version: 'v1', key: 'k' }]);
    expect(c.stats()).toStrictEqual({ sent: 1, applied: 1, ignored: 1, malformed: 1 });
    await c.close();
    expect(f.closed).toBe(true);
    f.deliver(JSON.stringify({ v: 1, origin: 'other', policy: 'p', version: 'v1', key: 'k' }));
    expect(heard).toHaveLength(2);
  });

  it('a publish that fails is sent again when the channel is ready (the newest MAX_UNSENT); each readiness is reported', async () => {
    const f = fakePubSub();
    let readies = 0;
    const c = new ResetChannel({ pubsub: f.pubsub, prefix: 'pre:', apply: () => true, onReady: () => readies++ });
    f.down = true;
    for (let i = 0; i < MAX_UNSENT + 2; i++) c.announce('p', 'v1', `k${i}`);
    await flush();
    expect(f.published).toStrictEqual([]);
    expect(c.stats().sent).toBe(0);
    f.down = false;
    f.ready();
    await flush();
    expect(readies).toBe(1);
    expect(f.published.map((m) => JSON.parse(m).key)).toStrictEqual(Array.from({ length: MAX_UNSENT }, (_, i) => `k${i + 2}`));
    expect(c.stats().sent).toBe(MAX_UNSENT);
    f.ready();
    await flush();
    expect(readies).toBe(2);
    expect(f.published).toHaveLength(MAX_UNSENT);
    await c.close();
  });
});
