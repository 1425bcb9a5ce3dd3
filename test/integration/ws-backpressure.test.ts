/**
 * /v1/stream backpressure: a client that stops reading is paused and bounded, then closed with 1008; a client
 * that reads gets OVERLOADED answers past its queue bound; a client that vanishes leaves nothing behind; and
 * none of them slows a healthy connection.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Socket } from 'node:net';
import { TestSocket, closeAllServers, sleep, startStreamServer, type StreamServer } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

const POLICIES = { p: { algorithm: 'token_bucket', limit: 1_000_000, period: 60_000 } } as const;

/** The TCP socket under a `ws` client: pausing it stops reading, so the server's answers back up. */
function tcp(c: TestSocket): Socket {
  return (c.ws as unknown as { _socket: Socket })._socket;
}

function jsonFrame(prefix: string, from: number, n: number): string {
  return JSON.stringify(Array.from({ length: n }, (_, i) => ({ id: from + i, policy: 'p', key: `${prefix}-${(from + i) % 50}` })));
}

/** Rounds of `per` checks, each sent and awaited before the next; returns each round's duration in ms. */
async function healthyRounds(s: StreamServer, rounds: number, per: number): Promise<{ times: number[]; allowed: number; answers: number }> {
  const c = await TestSocket.open(s.wsUrl);
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    c.send(jsonFrame(`healthy${r}`, r * per, per));
    await c.answers((r + 1) * per, 5000);
    times.push(performance.now() - t0);
  }
  const allowed = c.texts.filter((a) => a.allowed === true).length;
  const answers = c.answerCount;
  c.close();
  return { times, allowed, answers };
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

describe('/v1/stream backpressure', () => {
  it('a client that stops reading is paused, holds a bounded queue, does not slow a healthy client, and is closed with 1008 past the bound', async () => {
    const s = await startStreamServer({
      policies: POLICIES,
      stream: { highWaterBytes: 64 << 10, lowWaterBytes: 16 << 10, maxQueued: 20_000, maxInFlight: 1024 },
    });
    await healthyRounds(s, 5, 500); // warm-up (JIT), not measured
    // baseline: the healthy client alone
    const before = await healthyRounds(s, 20, 500);

    // the staller writes checks but never reads an answer, until the server stops processing it
    const staller = await TestSocket.open(s.wsUrl);
    tcp(staller).pause();
    let sent = 0;
    while (s.stream.stats().paused === 0 && sent < 400_000) {
      staller.send(jsonFrame('stalled', sent, 1000));
      sent += 1000;
      await sleep(1);
    }
    expect(s.stream.stats().paused).toBe(1);
    await sleep(50);
    const held = s.stream.stats();
    expect(held.queued).toBeLessThanOrEqual(20_000);
    expect(held.inFlight).toBe(0); // nothing of the staller's is being decided while it is paused

    // the healthy client, while the staller sits paused with its queue
    const during = await healthyRounds(s, 20, 500);
    expect({ answers: during.answers, allowed: during.allowed }).toStrictEqual({ answers: 10_000, allowed: 10_000 });
    expect({ answers: before.answers, allowed: before.allowed }).toStrictEqual({ answers: 10_000, allowed: 10_000 });
    // not slowed: the same work takes about as long as before (generous bound for a shared machine)
    expect(sum(during.times)).toBeLessThan(2 * sum(before.times) + 250);
    expect(Math.max(...during.times)).toBeLessThan(1000);

    // the staller keeps writing: past maxQueued while paused it is closed with 1008
    while (s.stream.stats().closedBackpressure === 0 && sent < 400_000) {
      staller.send(jsonFrame('stalled', sent, 1000));
      sent += 1000;
      await sleep(1);
    }
    expect(s.stream.stats()).toMatchObject({ closedBackpressure: 1, connections: 0, queued: 0, inFlight: 0 });
    // reading again, it finds the answers that were buffered, then the close frame
    tcp(staller).resume();
    expect(await staller.closed(10_000)).toStrictEqual({
      code: 1008, reason: 'backpressure: more than 20000 checks queued, client not reading',
    });
    expect(staller.answerCount).toBeGreaterThan(0);
    expect(staller.answerCount).toBeLessThan(sent);
    console.log(`healthy 20×500 checks: ${sum(before.times).toFixed(0)} ms alone, ${sum(during.times).toFixed(0)} ms beside a stalled client; the staller sent ${sent} checks and read ${staller.answerCount} answers`);
  }, 60_000);

  it('resumes a paused connection once it reads again, and answers every check', async () => {
    const s = await startStreamServer({
      policies: POLICIES, stream: { highWaterBytes: 32 << 10, lowWaterBytes: 8 << 10, maxQueued: 200_000 },
    });
    const c = await TestSocket.open(s.wsUrl);
    tcp(c).pause();
    let sent = 0;
    while (s.stream.stats().paused === 0 && sent < 400_000) {
      c.send(jsonFrame('slow', sent, 1000));
      sent += 1000;
      await sleep(1);
    }
    expect(s.stream.stats().paused).toBe(1);
    for (let i = 0; i < 5; i++) c.send(jsonFrame('slow', sent + i * 1000, 1000));
    sent += 5000;
    tcp(c).resume();
    await c.answers(sent, 20_000);
    expect(c.answerCount).toBe(sent);
    expect(c.texts.filter((a) => a.allowed === true).length).toBe(sent);
    expect(s.stream.stats()).toMatchObject({ paused: 0, queued: 0, inFlight: 0 });
  }, 60_000);

  it('a connection that reads but sends past its queue bound gets OVERLOADED answers for the excess', async () => {
    const s = await startStreamServer({ policies: POLICIES, stream: { maxQueued: 10 } });
    const c = await TestSocket.open(s.wsUrl);
    c.send(jsonFrame('q', 0, 20));
    await c.answers(20);
    const over = c.texts.filter((a) => a.error !== undefined);
    expect(c.texts.filter((a) => a.allowed === true).map((a) => a.id)).toStrictEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(over).toStrictEqual(Array.from({ length: 10 }, (_, i) => ({
      id: 10 + i, error: { code: 'OVERLOADED', detail: 'more than 10 checks queued on this connection', status: 503 },
    })));
    expect(c.closeInfo).toBe(null);
  });

  it('answers that cannot be buffered (over maxBufferedBytes) close the connection with 1008', async () => {
    const s = await startStreamServer({
      policies: POLICIES,
      stream: { highWaterBytes: 1 << 20, lowWaterBytes: 1 << 10, maxBufferedBytes: 64 << 10, maxQueued: 400_000 },
    });
    const c = await TestSocket.open(s.wsUrl);
    tcp(c).pause();
    let sent = 0;
    while (s.stream.stats().closedBackpressure === 0 && sent < 400_000) {
      c.send(jsonFrame('drop', sent, 1000));
      sent += 1000;
      await sleep(1);
    }
    expect(s.stream.stats().closedBackpressure).toBe(1);
    tcp(c).resume();
    expect(await c.closed(10_000)).toStrictEqual({ code: 1008, reason: 'backpressure: output over the limit, client not reading' });
  }, 60_000);

  it('a client that vanishes with checks in flight leaves nothing behind, and the others carry on', async () => {
    const s = await startStreamServer({ policies: POLICIES, shards: 2 });
    const gone = await TestSocket.open(s.wsUrl);
    for (let i = 0; i < 20; i++) gone.send(jsonFrame('gone', i * 1000, 1000));
    await sleep(5);
    gone.close(); // no close handshake: the TCP connection is destroyed
    const ok = await TestSocket.open(s.wsUrl);
    ok.send(jsonFrame('ok', 0, 100));
    await ok.answers(100);
    expect(ok.texts.filter((a) => a.allowed === true).length).toBe(100);
    ok.close();
    await ok.closed();
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && (s.stream.stats().connections !== 0 || s.stream.stats().inFlight !== 0)) await sleep(10);
    expect(s.stream.stats()).toMatchObject({ connections: 0, queued: 0, inFlight: 0, paused: 0 });
  }, 30_000);
});
