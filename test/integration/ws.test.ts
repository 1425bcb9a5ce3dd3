/**
 * /v1/stream over real WebSocket connections (the `ws` client against the uWebSockets.js server), on a frozen,
 * test-controlled clock. Every assertion is exact: answers, error codes and fields, close codes.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import type { CheckRequest, Decision } from '../../src/types/decision.js';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { ANSWER_NO_ID, ANSWER_SUBSCRIBED, CHECK_SUBSCRIBE, FRAME_CHECKS, FRAME_UNSUBSCRIBE, KIND_ALLOWED, KIND_DENIED, KIND_ENDED, KIND_ERROR, KIND_READY, type BinaryAnswer } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { EPOCH_MINUTE } from '../helpers/clock.js';
import { TestSocket, closeAllServers, sleep, startStreamServer } from './ws-support.js';
import { ManualClock } from '../helpers/clock.js';
import { flakyStore } from '../helpers/flaky-store.js';
import { MemoryStore } from '../../src/store/memory.js';
import { degradedFlags } from '../../src/server/stream/conn.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

/** 10 tokens per 6 s: one token every 600 ms. */
const BUCKET: PolicySpec = { algorithm: 'token_bucket', limit: 10, period: 6000 };
const POLICIES: Record<string, PolicySpec> = {
  p: BUCKET,
  w: { algorithm: 'fixed_window', limit: 2, period: 60_000 },
  s: { algorithm: 'sliding_window', limit: 4, period: 10_000 },
  d: { ...BUCKET, descriptors: ['tenant', 'action'] },
};

function binaryChecks(checks: Array<{ id: number; policy: string; key: string; cost: number; flags?: number }>): Uint8Array {
  const w = new FrameWriter(FRAME_CHECKS);
  for (const c of checks) w.check(c.id, c.policy, c.key, c.cost, c.flags ?? 0);
  return w.finish()!;
}

/** A binary answer as the decision it stands for (for comparing with JSON answers and the engine). */
function decisionOf(a: BinaryAnswer): Decision {
  const d: Decision = {
    allowed: a.kind === KIND_ALLOWED, limit: a.limit, remaining: a.remaining, resetAfterMs: a.resetAfterMs,
    retryAfterMs: a.retryAfterMs, policy: a.name,
  };
  if (a.text !== '') d.reason = a.text;
  return d;
}

function withoutId(a: Record<string, unknown>): Record<string, unknown> {
  const { id: _id, ...rest } = a;
  return rest;
}

const byId = (a: { id?: unknown }, b: { id?: unknown }): number => (a.id as number) - (b.id as number);

describe('/v1/stream text frames (JSON)', () => {
  it('answers a check object with one answer object carrying its id', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 'a1', policy: 'p', key: 'k', cost: 3 });
    await c.answers(1);
    expect(c.texts).toStrictEqual([
      { id: 'a1', allowed: true, limit: 10, remaining: 7, resetAfterMs: 1800, retryAfterMs: 0, policy: 'p' },
    ]);
    expect(c.frames[0].binary).toBe(false);
  });

  it('answers an array of checks, one answer per check, each with its id (errors included)', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson([
      { id: 1, policy: 'p', key: 'k', cost: 10 },
      { id: 2, policy: 'p', key: 'k' },
      { id: 3, policy: 'nope', key: 'k' },
      { id: 4, policy: 'p', key: 'k', cost: -1 },
      { id: 5, policy: 'd', descriptors: { tenant: 'acme', action: 'read' }, cost: 1 },
      { id: 6, policy: 'p', key: 'k', extra: true },
      { id: 7, policy: 'w', key: 'k', cost: 3 },
    ]);
    await c.answers(7);
    expect([...c.texts].sort(byId)).toStrictEqual([
      { id: 1, allowed: true, limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 0, policy: 'p' },
      { id: 2, allowed: false, limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 600, policy: 'p' },
      { id: 3, error: { code: 'UNKNOWN_POLICY', detail: 'policy: unknown policy "nope"', field: 'policy', status: 400 } },
      { id: 4, error: { code: 'INVALID_ARGUMENT', detail: 'cost: must be a non-negative safe integer (got -1)', field: 'cost', status: 400 } },
      { id: 5, allowed: true, limit: 10, remaining: 9, resetAfterMs: 600, retryAfterMs: 0, policy: 'd' },
      { id: 6, error: { code: 'INVALID_ARGUMENT', detail: 'extra: is not a field of a check (policy, key, descriptors, cost, wait)', field: 'extra', status: 400 } },
      { id: 7, allowed: false, limit: 2, remaining: 2, resetAfterMs: 60_000, retryAfterMs: null, policy: 'w', reason: "cost exceeds the limit's capacity" },
    ]);
  });

  it('keeps the connection open after malformed frames and checks, answering each with an error', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.send('{"id": 1, "policy": ');
    c.send('[]');
    c.send('42');
    c.sendJson([7, { policy: 'p', key: 'k' }, { id: { x: 1 }, policy: 'p', key: 'k' }, { id: '', policy: 'p', key: 'k' }]);
    c.sendJson({ id: 'q', policy: 'p', key: 'k', subscribe: 'yes' });
    c.sendJson({ id: 'r', op: 'ping' });
    c.sendJson({ id: 's', policy: 'p', key: '' });
    c.sendJson({ id: 'ok', policy: 'p', key: 'k' });
    await c.answers(11);
    const bad = (field: string, detail: string): unknown => ({ error: { code: 'INVALID_ARGUMENT', detail: `${field}: ${detail}`, field, status: 400 } });
    expect(c.texts).toStrictEqual([
      { error: { code: 'INVALID_ARGUMENT', detail: expect.stringMatching(/^frame: is not valid JSON \(/), field: 'frame', status: 400 } },
      bad('frame', 'must not be an empty array'),
      bad('frame', 'must be a check object or an array of them'),
      bad('check', 'must be a JSON object'),
      bad('id', 'is required (a string of 1 to 256 characters or a safe integer)'),
      bad('id', 'must be a string of 1 to 256 characters or a safe integer'),
      bad('id', 'must be a string of 1 to 256 characters or a safe integer'),
      { id: 'q', ...(bad('subscribe', 'must be a boolean') as object) },
      { id: 'r', ...(bad('op', 'must be "unsubscribe", "acquire" or "release" when present (got "ping")') as object) },
      { id: 's', ...(bad('key', 'must not be empty') as object) },
      { id: 'ok', allowed: true, limit: 10, remaining: 9, resetAfterMs: 600, retryAfterMs: 0, policy: 'p' },
    ]);
    expect(c.closeInfo).toBe(null);
  });

  it('answers a plain HTTP request on /v1/stream with 426 and offers the sluice.v1 subprotocol', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const r = await fetch(`${s.url}/v1/stream`, { signal: AbortSignal.timeout(5000) });
    expect(r.status).toBe(426);
    expect(r.headers.get('upgrade')).toBe('websocket');
    expect(await r.json()).toStrictEqual({
      type: 'about:blank', title: 'Upgrade Required', status: 426,
      detail: 'upgrade: /v1/stream is a WebSocket endpoint (send Upgrade: websocket)', field: 'upgrade',
    });
    const c = await TestSocket.open(s.wsUrl, ['other', 'sluice.v1']);
    expect(c.ws.protocol).toBe('sluice.v1');
  });
});

describe('/v1/stream binary frames', () => {
  it('answers a batch with one record per check, in the documented layout', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.send(binaryChecks([
      { id: 10, policy: 'p', key: 'k', cost: 10 },
      { id: 11, policy: 'p', key: 'k', cost: 1 },
      { id: 12, policy: 'w', key: 'k', cost: 3 },
      { id: 13, policy: 'zz', key: 'k', cost: 1 },
      { id: 14, policy: 'p', key: 'ключ', cost: 0 },
      { id: 15, policy: 'p', key: 'k', cost: 1.5 },
    ]));
    await c.answers(6);
    expect(c.frames.every((f) => f.binary)).toBe(true);
    const rec = (id: number, kind: number, status: number, limit: number, remaining: number, reset: number, retry: number | null, name: string, field = '', text = '', flags = 0): BinaryAnswer =>
      ({ id, kind, flags, status, limit, remaining, resetAfterMs: reset, retryAfterMs: retry, name, field, text });
    expect([...c.binaries].sort(byId)).toStrictEqual([
      rec(10, KIND_ALLOWED, 0, 10, 0, 6000, 0, 'p'),
      rec(11, KIND_DENIED, 0, 10, 0, 6000, 600, 'p'),
      rec(12, KIND_DENIED, 0, 2, 2, 60_000, null, 'w', '', "cost exceeds the limit's capacity"),
      rec(13, KIND_ERROR, 400, 0, 0, 0, 0, 'UNKNOWN_POLICY', 'policy', 'policy: unknown policy "zz"'),
      rec(14, KIND_ALLOWED, 0, 10, 10, 0, 0, 'p'),
      rec(15, KIND_ERROR, 400, 0, 0, 0, 0, 'INVALID_ARGUMENT', 'cost', 'cost: must be a non-negative safe integer (got 1.5)'),
    ]);
  });

  it('answers a malformed batch with one error without id, decides none of it, and stays open', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    const good = binaryChecks([{ id: 1, policy: 'p', key: 'k', cost: 10 }, { id: 2, policy: 'p', key: 'k2', cost: 1 }]);
    c.send(good.subarray(0, good.byteLength - 1)); // truncated: the last key runs past the end
    const trailing = new Uint8Array(good.byteLength + 3);
    trailing.set(good);
    c.send(trailing);
    c.send(new Uint8Array([1, 1, 0, 0])); // count 0
    const unsub = new Uint8Array([1, FRAME_UNSUBSCRIBE, 2, 0, 1, 0, 0, 0]); // 2 ids, 1 present
    c.send(unsub);
    // per-record faults: unknown flag bits, bad UTF-8 in the key and in the policy
    const flags = binaryChecks([{ id: 20, policy: 'p', key: 'k', cost: 1, flags: 0x80 }]);
    const badKey = binaryChecks([{ id: 21, policy: 'p', key: 'kk', cost: 1 }]);
    badKey[badKey.byteLength - 1] = 0xff;
    const badPolicy = binaryChecks([{ id: 22, policy: 'p', key: 'k', cost: 1 }]);
    badPolicy[4 + 16] = 0xc3;
    c.send(flags);
    c.send(badKey);
    c.send(badPolicy);
    c.send(binaryChecks([{ id: 23, policy: 'p', key: 'k', cost: 1 }]));
    await c.answers(8);
    const noId = (text: string): BinaryAnswer => ({
      id: 0, kind: KIND_ERROR, flags: ANSWER_NO_ID, status: 400, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: 0,
      name: 'INVALID_ARGUMENT', field: 'frame', text: `frame: ${text}`,
    });
    const itemErr = (id: number, field: string, text: string): BinaryAnswer => ({
      id, kind: KIND_ERROR, flags: 0, status: 400, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: 0,
      name: 'INVALID_ARGUMENT', field, text: `${field}: ${text}`,
    });
    expect(c.binaries).toStrictEqual([
      noId(`record 1: policy and key run past the end of the frame (byte ${good.byteLength - 1})`),
      noId('3 bytes after the last of 2 records'),
      noId('count is 0 (a checks frame holds at least one check)'),
      noId('2 ids take 12 bytes (got 8)'),
      itemErr(20, 'flags', 'unknown bits set (got 128)'),
      itemErr(21, 'key', 'is not well-formed UTF-8'),
      itemErr(22, 'policy', 'is not well-formed UTF-8'),
      // nothing of the malformed frames was decided: the key is still full
      { id: 23, kind: KIND_ALLOWED, flags: 0, status: 0, limit: 10, remaining: 9, resetAfterMs: 600, retryAfterMs: 0, name: 'p', field: '', text: '' },
    ]);
    expect(c.closeInfo).toBe(null);
  });

  it('refuses a key whose bytes encode a surrogate (not UTF-8) with its id, never as the U+FFFD key', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    // a key of `head` then 'lone': ED A0 80 and ED B0 80 are U+D800 and U+DC00 in the form UTF-8 forbids
    // (CESU-8), C0 AF an overlong '/', EF BF BD is U+FFFD itself
    const frame = (id: number, head: number[]): Uint8Array => {
      const f = binaryChecks([{ id, policy: 'p', key: `${'x'.repeat(head.length)}lone`, cost: 1 }]);
      f.set(head, f.byteLength - 4 - head.length);
      return f;
    };
    c.send(frame(30, [0xed, 0xa0, 0x80]));
    c.send(frame(31, [0xed, 0xb0, 0x80]));
    c.send(frame(32, [0xc0, 0xaf]));
    c.send(frame(33, [0xef, 0xbf, 0xbd]));
    c.send(frame(34, [0xef, 0xbf, 0xbd]));
    await c.answers(5);
    const refused = (id: number): BinaryAnswer => ({
      id, kind: KIND_ERROR, flags: 0, status: 400, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: 0,
      name: 'INVALID_ARGUMENT', field: 'key', text: 'key: is not well-formed UTF-8',
    });
    const admitted = (id: number, remaining: number): BinaryAnswer => ({
      id, kind: KIND_ALLOWED, flags: 0, status: 0, limit: 10, remaining, resetAfterMs: (10 - remaining) * 600, retryAfterMs: 0, name: 'p', field: '', text: '',
    });
    expect([...c.binaries].sort(byId)).toStrictEqual([refused(30), refused(31), refused(32), admitted(33, 9), admitted(34, 8)]);
    expect(await s.limiter.check({ policy: 'p', key: '\ufffdlone', cost: 0 })).toMatchObject({ remaining: 8 });
    expect(c.closeInfo).toBe(null);
  });

  it('JSON and binary frames give identical decisions, and the engine gives the same', async () => {
    // the same pseudo-random sequence over three fresh limiters at the same clock: JSON, binary, direct
    const checks: Array<CheckRequest & { id: number; key: string }> = [];
    let x = 12345;
    const rnd = (n: number): number => {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      return x % n;
    };
    const policies = ['p', 'w', 's'];
    for (let i = 0; i < 600; i++) {
      checks.push({ id: i, policy: policies[rnd(3)], key: `k${rnd(7)}`, cost: [0, 1, 1, 1, 2, 3, 11][rnd(7)] });
    }
    let t = EPOCH_MINUTE;
    const a = await startStreamServer({ policies: POLICIES });
    const b = await startStreamServer({ policies: POLICIES });
    const direct = await createLimiter({ policies: POLICIES, clock: () => t, maxKeys: 1024 });
    const cj = await TestSocket.open(a.wsUrl);
    const cb = await TestSocket.open(b.wsUrl);
    const expected: Decision[] = [];
    try {
      // frames of 50, the clock moving 250 ms between frames
      for (let f = 0; f < checks.length / 50; f++) {
        const frame = checks.slice(f * 50, f * 50 + 50);
        cj.sendJson(frame);
        cb.send(binaryChecks(frame));
        await cj.answers((f + 1) * 50);
        await cb.answers((f + 1) * 50);
        expected.push(...(await Promise.all(frame.map(({ id: _id, ...c }) => direct.check(c)))));
        t += 250;
        a.clock.set(t);
        b.clock.set(t);
      }
    } finally {
      await direct.close();
    }
    const fromJson = [...cj.texts].sort(byId).map(withoutId);
    const fromBinary = [...cb.binaries].sort(byId).map(decisionOf);
    expect(fromBinary).toStrictEqual(fromJson);
    expect(fromJson).toStrictEqual(expected);
    const allowed = expected.filter((d) => d.allowed).length;
    expect(allowed).toBeGreaterThan(100);
    expect(allowed).toBeLessThan(550);
  });
});

describe('/v1/stream closes the connection on oversize and out-of-protocol frames', () => {
  const start = () => startStreamServer({ policies: POLICIES, stream: { maxFrameBytes: 1024, maxChecksPerFrame: 8 } });

  it('closes with 1009 on a frame over maxFrameBytes', async () => {
    const s = await start();
    const c = await TestSocket.open(s.wsUrl);
    c.send(JSON.stringify({ id: 1, policy: 'p', key: 'x'.repeat(1100) }));
    expect(await c.closed()).toStrictEqual({ code: 1009, reason: 'frame: larger than 1024 bytes' });
    expect(s.stream.stats().closedTooBig).toBe(1);
  });

  it('a frame over twice maxFrameBytes is cut by uWS itself, without a close frame (1006)', async () => {
    const s = await start();
    const c = await TestSocket.open(s.wsUrl);
    c.send(new Uint8Array(2049));
    expect((await c.closed()).code).toBe(1006);
  });

  it('closes with 1009 on more checks in a frame than maxChecksPerFrame, JSON or binary', async () => {
    const s = await start();
    const j = await TestSocket.open(s.wsUrl);
    j.sendJson(Array.from({ length: 9 }, (_, i) => ({ id: i, policy: 'p', key: 'k' })));
    expect(await j.closed()).toStrictEqual({ code: 1009, reason: 'frame: more than 8 checks' });
    const b = await TestSocket.open(s.wsUrl);
    b.send(binaryChecks(Array.from({ length: 9 }, (_, i) => ({ id: i, policy: 'p', key: 'k', cost: 1 }))));
    expect(await b.closed()).toStrictEqual({ code: 1009, reason: 'frame: more than 8 records' });
    expect(j.answerCount + b.answerCount).toBe(0);
  });

  it.each([
    ['an unknown version', [2, 1, 1, 0], 'binary frame: unsupported version 2 (this server speaks 1)'],
    ['an answers frame from the client', [1, 2, 1, 0], 'binary frame: type 2 (answers) goes from server to client'],
    ['an unknown frame type', [1, 9, 1, 0], 'binary frame: unknown type 9'],
    ['a frame shorter than its header', [1, 1], 'binary frame: shorter than its 4-byte header'],
  ])('closes with 1002 on %s', async (_what, bytes, reason) => {
    const s = await start();
    const c = await TestSocket.open(s.wsUrl);
    c.send(new Uint8Array(bytes));
    expect(await c.closed()).toStrictEqual({ code: 1002, reason });
    expect(s.stream.stats().closedProtocol).toBe(1);
  });

  it('a text frame that is not UTF-8 is dropped by uWS (1006); other connections carry on', async () => {
    const s = await start();
    const bad = await TestSocket.open(s.wsUrl);
    const good = await TestSocket.open(s.wsUrl);
    bad.ws.send(Buffer.from([0x7b, 0xff, 0x7d]), { binary: false });
    expect((await bad.closed()).code).toBe(1006);
    good.sendJson({ id: 1, policy: 'p', key: 'k' });
    await good.answers(1);
    expect(good.texts[0]).toStrictEqual({ id: 1, allowed: true, limit: 10, remaining: 9, resetAfterMs: 600, retryAfterMs: 0, policy: 'p' });
  });
});

describe('/v1/stream subscriptions', () => {
  /** Sends a peek and waits for its answer: anything pushed before it has arrived by then. */
  async function settle(c: TestSocket, id: string | number): Promise<void> {
    const n = c.answerCount;
    c.sendJson({ id, policy: 'w', key: 'settle', cost: 0 });
    await c.answers(n + 1);
  }

  it('pushes when a denied key becomes admissible, at its retry time and not a millisecond before (JSON)', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 2, subscribe: true });
    await c.answers(2);
    expect(c.texts[1]).toStrictEqual({
      id: 2, subscribed: true, allowed: false, limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 1200, policy: 'p',
    });
    expect(s.stream.stats().subscriptions).toBe(1);
    s.clock.advance(1199);
    s.stream.tick();
    await settle(c, 's1');
    expect(c.texts.filter((a) => a.ready !== undefined)).toStrictEqual([]);
    s.clock.advance(1);
    s.stream.tick();
    await c.answers(4);
    expect(c.texts[3]).toStrictEqual({ id: 2, ready: true, limit: 10, remaining: 2, resetAfterMs: 4800, policy: 'p' });
    expect(s.stream.stats()).toMatchObject({ subscriptions: 0, pushed: 1 });
    // one-shot: nothing more later
    s.clock.advance(60_000);
    s.stream.tick();
    await settle(c, 's2');
    expect(c.texts.filter((a) => a.ready !== undefined).length).toBe(1);
  });

  it('pushes in binary for a binary subscription, at the end of a fixed window', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    s.clock.advance(15_000);
    const c = await TestSocket.open(s.wsUrl);
    c.send(binaryChecks([
      { id: 1, policy: 'w', key: 'k', cost: 2 },
      { id: 2, policy: 'w', key: 'k', cost: 1, flags: CHECK_SUBSCRIBE },
    ]));
    await c.answers(2);
    expect(c.binaries[1]).toStrictEqual({
      id: 2, kind: KIND_DENIED, flags: ANSWER_SUBSCRIBED, status: 0, limit: 2, remaining: 0, resetAfterMs: 45_000,
      retryAfterMs: 45_000, name: 'w', field: '', text: '',
    });
    s.clock.advance(44_999);
    s.stream.tick();
    await settle(c, 1);
    expect(c.binaries.length).toBe(2);
    s.clock.advance(1);
    s.stream.tick();
    await c.answers(4);
    expect(c.binaries[2]).toStrictEqual({
      id: 2, kind: KIND_READY, flags: 0, status: 0, limit: 2, remaining: 2, resetAfterMs: 60_000, retryAfterMs: 0,
      name: 'w', field: '', text: '',
    });
  });

  /** A stream server over a store that fails on demand, its one strict policy `p` failing by `rule`. */
  async function stallServer(rule: 'open' | 'closed' | 'local') {
    const clock = new ManualClock();
    const { store, fail } = flakyStore(new MemoryStore({ clock: clock.now, overLimitCache: false }));
    const s = await startStreamServer({
      policies: { p: { ...BUCKET, consistency: 'strict', onStoreError: rule } }, store, clock,
    });
    return { s, fail, c: await TestSocket.open(s.wsUrl) };
  }

  it('a push from a peek Redis did not answer says so: degraded, and how it was decided (JSON and binary)', async () => {
    const { s, fail, c } = await stallServer('local');
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 2, subscribe: true });
    await c.answers(2);
    c.send(binaryChecks([{ id: 3, policy: 'p', key: 'k', cost: 1, flags: CHECK_SUBSCRIBE }]));
    await c.answers(3);
    expect(c.texts[1]).toMatchObject({ id: 2, subscribed: true, allowed: false, retryAfterMs: 1200 });
    // Redis fails: the peeks at the retry time are decided by this instance's kernel, from the state Redis gave
    // (the kernel takes Redis's time as no earlier than it can have been: a millisecond less refill than Redis's)
    fail(true);
    s.clock.advance(1300);
    s.stream.tick();
    await c.answers(5);
    const json = c.texts.find((a) => a.ready !== undefined)!;
    expect(Object.keys(json)).toStrictEqual(['id', 'ready', 'limit', 'remaining', 'resetAfterMs', 'policy', 'degraded', 'degradedBy']);
    expect(json).toMatchObject({ id: 2, ready: true, limit: 10, remaining: 2, policy: 'p', degraded: true, degradedBy: 'local' });
    expect(c.binaries.find((a) => a.kind === KIND_READY)).toMatchObject({ id: 3, kind: KIND_READY, flags: degradedFlags(3), remaining: 2 });
  });

  it('a stall under open pushes at the retry time, marked degraded open: a check of the cost would be admitted', async () => {
    const { s, fail, c } = await stallServer('open');
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 2, subscribe: true });
    await c.answers(2);
    expect(c.texts[1]).toMatchObject({ id: 2, subscribed: true, allowed: false, retryAfterMs: 1200 });
    fail(true);
    s.clock.advance(1200);
    s.stream.tick();
    await c.answers(3);
    expect(c.texts[2]).toStrictEqual({ id: 2, ready: true, limit: 10, remaining: 0, resetAfterMs: 0, policy: 'p', degraded: true, degradedBy: 'open' });
    // and the check it was waiting for is admitted, as the push said
    c.sendJson({ id: 3, policy: 'p', key: 'k', cost: 2 });
    await c.answers(4);
    expect(c.texts[3]).toMatchObject({ id: 3, allowed: true, degraded: true, degradedBy: 'open' });
  });

  it('a stall under closed pushes nothing and peeks again after the denial\'s retryAfterMs, not at every tick', async () => {
    const { s, fail, c } = await stallServer('closed');
    const closedPeeks = async (): Promise<number> => (await s.limiter.stats()).degraded?.p?.closed ?? 0;
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 1, subscribe: true });
    await c.answers(2);
    expect(c.texts[1]).toMatchObject({ id: 2, subscribed: true, retryAfterMs: 600 });
    fail(true);
    s.clock.advance(600);
    s.stream.tick();
    await sleep(50);
    expect(await closedPeeks()).toBe(1);
    // the peek was denied (retry after 1,000 ms): ticks before then peek nothing
    for (let i = 0; i < 5; i++) {
      s.clock.advance(100);
      s.stream.tick();
    }
    s.clock.advance(499);
    s.stream.tick();
    await sleep(50);
    expect(await closedPeeks()).toBe(1);
    s.clock.advance(1);
    s.stream.tick();
    await sleep(50);
    expect(await closedPeeks()).toBe(2);
    expect(c.texts.length).toBe(2);
    // the store answers again: the next peek finds the refilled key and pushes, not degraded
    fail(false);
    s.clock.advance(1000);
    s.stream.tick();
    await c.answers(3);
    expect(c.texts[2]).toMatchObject({ id: 2, ready: true, policy: 'p' });
    expect(c.texts[2].degraded).toBeUndefined();
  });

  it('when other traffic takes the freed tokens first, the push waits until the key really admits the cost', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    const other = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 1, subscribe: true });
    await c.answers(2);
    expect(c.texts[1]).toMatchObject({ subscribed: true, retryAfterMs: 600 });
    s.clock.advance(600);
    other.sendJson({ id: 'x', policy: 'p', key: 'k', cost: 1 });
    await other.answers(1);
    expect(other.texts[0]).toMatchObject({ allowed: true, remaining: 0 });
    s.stream.tick(); // due, but the token is gone: re-armed
    await settle(c, 's1');
    s.clock.advance(599);
    s.stream.tick();
    await settle(c, 's2');
    expect(c.texts.filter((a) => a.ready !== undefined)).toStrictEqual([]);
    s.clock.advance(1);
    s.stream.tick();
    await c.answers(5);
    expect(c.texts[4]).toStrictEqual({ id: 2, ready: true, limit: 10, remaining: 1, resetAfterMs: 5400, policy: 'p' });
  });

  it('a subscription can be cancelled (JSON op, binary frame type 3) and then never fires', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 1, subscribe: true });
    c.send(binaryChecks([{ id: 3, policy: 'p', key: 'k', cost: 1, flags: CHECK_SUBSCRIBE }]));
    await c.answers(3);
    expect(s.stream.stats().subscriptions).toBe(2);
    c.sendJson({ id: 2, op: 'unsubscribe' });
    c.sendJson({ id: 99, op: 'unsubscribe' });
    const w = new FrameWriter(FRAME_UNSUBSCRIBE);
    w.unsubscribe(3);
    w.unsubscribe(4);
    c.send(w.finish()!);
    await c.answers(7);
    expect(c.texts.slice(2)).toStrictEqual([{ id: 2, unsubscribed: true }, { id: 99, unsubscribed: false }]);
    const ended = (id: number, flags: number): BinaryAnswer => ({
      id, kind: KIND_ENDED, flags, status: 0, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, name: '', field: '', text: '',
    });
    expect(c.binaries.slice(1)).toStrictEqual([ended(3, ANSWER_SUBSCRIBED), ended(4, 0)]);
    expect(s.stream.stats().subscriptions).toBe(0);
    s.clock.advance(10_000);
    s.stream.tick();
    await settle(c, 's');
    expect(c.answerCount).toBe(8);
  });

  it('subscribes only denials that can pass, within maxSubscriptions; closing the connection drops them', async () => {
    const s = await startStreamServer({ policies: POLICIES, stream: { maxSubscriptions: 2 } });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson([
      { id: 1, policy: 'p', key: 'k', cost: 1, subscribe: true }, // admitted
      { id: 2, policy: 'p', key: 'k', cost: 11, subscribe: true }, // never
      { id: 3, policy: 'p', key: 'k', cost: 10, subscribe: true }, // denied: 9 left
      { id: 4, policy: 'p', key: 'k', cost: 10, subscribe: true },
      { id: 5, policy: 'p', key: 'k', cost: 10, subscribe: true }, // a third: no room
      { id: 3, policy: 'p', key: 'k', cost: 9, subscribe: false },
    ]);
    await c.answers(6);
    expect([...c.texts].slice(0, 5).map((a) => [a.id, a.subscribed, a.allowed])).toStrictEqual([
      [1, false, true], [2, false, false], [3, true, false], [4, true, false], [5, false, false],
    ]);
    expect(s.stream.stats().subscriptions).toBe(2);
    c.close();
    await c.closed();
    await sleep(20);
    expect(s.stream.stats()).toMatchObject({ subscriptions: 0, connections: 0 });
  });

  it('fires on the timer without manual ticks (tickMs 5)', async () => {
    const s = await startStreamServer({ policies: POLICIES, stream: { tickMs: 5 } });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'p', key: 'k', cost: 10 });
    c.sendJson({ id: 2, policy: 'p', key: 'k', cost: 1, subscribe: true });
    await c.answers(2);
    await sleep(50);
    expect(c.answerCount).toBe(2);
    s.clock.advance(600);
    await c.answers(3, 2000);
    expect(c.texts[2]).toStrictEqual({ id: 2, ready: true, limit: 10, remaining: 1, resetAfterMs: 5400, policy: 'p' });
  });
});

describe('/v1/stream shutdown', () => {
  it('server.close() closes stream connections with 1001 and refuses new ones', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const c = await TestSocket.open(s.wsUrl);
    c.sendJson({ id: 1, policy: 'p', key: 'k' });
    await c.answers(1);
    await s.server.close();
    expect(await c.closed()).toStrictEqual({ code: 1001, reason: 'server shutting down' });
    await expect(TestSocket.open(s.wsUrl)).rejects.toThrow();
  });
});
