/**
 * onLimit: delay on /v1/stream: a delayed admission is answered when due (JSON and binary), or at once with
 * its delay (`wait: 0`, binary check flag bit 1); a binary delayed answer carries ANSWER_DELAYED and the
 * delay in the retryAfterMs place; a connection that closes frees its held places. The order of answers is
 * asserted (a later check answered at once arrives before the held one), never a time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ANSWER_DELAYED, CHECK_NO_WAIT, FRAME_CHECKS, KIND_ALLOWED } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { closeAllServers, startStreamServer, TestSocket, type StreamServer } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

// 10 per second: one token is 100 ms; slow: one per minute
const policies = {
  fast: { algorithm: 'token_bucket', limit: 10, period: '1s', onLimit: 'delay', maxDelayMs: 300 },
  slow: { algorithm: 'token_bucket', limit: 1, period: '1m', onLimit: 'delay', maxDelayMs: 120_000 },
} as const;

async function waitingIs(s: StreamServer, n: number): Promise<void> {
  const deadline = Date.now() + 5000;
  while ((await s.limiter.stats()).delayed.waiting !== n) {
    if (Date.now() > deadline) throw new Error(`wait places never reached ${n}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function frame(records: Array<[id: number, policy: string, key: string, cost: number, flags: number]>): Uint8Array {
  const w = new FrameWriter(FRAME_CHECKS);
  for (const [id, p, k, c, f] of records) w.check(id, p, k, c, f);
  return w.finish()!;
}

describe('/v1/stream with onLimit: delay', () => {
  it('JSON: held until due; wait: 0 answered at once, so it arrives first', async () => {
    const s = await startStreamServer({ policies: policies as never });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'fast', key: 'a', cost: 10 });
    await c.answers(1);
    c.sendJson({ id: 2, policy: 'fast', key: 'a', cost: 1 });
    c.sendJson({ id: 3, policy: 'fast', key: 'a', cost: 1, wait: 0 });
    await c.answers(3);
    expect(c.texts.slice(1)).toStrictEqual([
      { id: 3, allowed: true, limit: 10, remaining: 0, resetAfterMs: 1200, retryAfterMs: 0, policy: 'fast', delayMs: 200 },
      { id: 2, allowed: true, limit: 10, remaining: 0, resetAfterMs: 1100, retryAfterMs: 0, policy: 'fast', delayMs: 100 },
    ]);
    c.sendJson({ id: 4, policy: 'fast', key: 'a', cost: 1, wait: 'soon' });
    await c.answers(4);
    expect(c.texts[3]).toMatchObject({ id: 4, error: { code: 'INVALID_ARGUMENT', field: 'wait' } });
  });

  it('binary: ANSWER_DELAYED with the delay in retryAfterMs; the no-wait flag answers at once', async () => {
    const s = await startStreamServer({ policies: policies as never });
    const c = await TestSocket.open(s.wsUrl);
    c.send(frame([[1, 'fast', 'b', 10, 0]]));
    await c.answers(1);
    c.send(frame([[2, 'fast', 'b', 1, 0], [3, 'fast', 'b', 1, CHECK_NO_WAIT]]));
    await c.answers(3);
    const view = (i: number) => {
      const a = c.binaries[i];
      return [a.id, a.kind, a.flags, a.remaining, a.resetAfterMs, a.retryAfterMs];
    };
    expect([view(1), view(2)]).toStrictEqual([
      [3, KIND_ALLOWED, ANSWER_DELAYED, 0, 1200, 200],
      [2, KIND_ALLOWED, ANSWER_DELAYED, 0, 1100, 100],
    ]);
  });

  it('a connection that closes frees its held places; the tokens stay spent', async () => {
    const s = await startStreamServer({ policies: policies as never });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'slow', key: 'k', cost: 1 });
    await c.answers(1);
    c.sendJson({ id: 2, policy: 'slow', key: 'k', cost: 1 });
    c.send(frame([[3, 'slow', 'j', 1, 0], [4, 'slow', 'j', 1, 0]]));
    await c.answers(2); // record 3 is admitted at once; 2 and 4 are held (a minute each)
    await waitingIs(s, 2);
    c.ws.terminate();
    await waitingIs(s, 0);
    expect(await s.limiter.check({ policy: 'slow', key: 'k', cost: 1 })).toMatchObject({ allowed: true, delayMs: 120_000 });
  });
});
