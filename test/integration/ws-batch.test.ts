/**
 * /v1/stream's batch path for binary frames (Front.checkBatch through the limiter's CHECK_BATCH): one frame
 * mixing valid checks with every kind of bad item is answered item by item, exactly as check() decides or
 * refuses each, in frame order; the decisions are counted in the metrics per policy and result. With
 * shards 0 the frame is decided at once on the main thread; with a shard, as one batch awaited once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter } from '../../src/index.js';
import type { Decision } from '../../src/types/decision.js';
import { ANSWER_SUBSCRIBED, CHECK_SUBSCRIBE, FRAME_CHECKS, KIND_ALLOWED, KIND_DENIED, KIND_ERROR, type BinaryAnswer } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { isSluiceError } from '../../src/util/errors.js';
import { BATCH_POLICIES, TestSocket, closeAllServers, startStreamServer } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

const POLICIES = BATCH_POLICIES;

interface Rec {
  id: number;
  policy: string;
  key: string;
  cost: number;
  flags?: number;
  /** Spoil the policy's (or the key's) first byte: not UTF-8. */
  badPolicy?: boolean;
  badKey?: boolean;
}

/** Valid checks interleaved with every per-item fault the format and the engine know. */
const RECORDS: Rec[] = [
  { id: 1, policy: 'p', key: 'k', cost: 10 },
  { id: 2, policy: 'p', key: 'k', cost: 1, flags: 0x80 },
  { id: 3, policy: 'p', key: 'k', cost: 1 },
  { id: 4, policy: 'p', key: 'k', cost: 1, badPolicy: true },
  { id: 5, policy: 'zz', key: 'k', cost: 1 },
  { id: 6, policy: 'p', key: 'kk', cost: 1, badKey: true },
  { id: 7, policy: 'p', key: 'k2', cost: -1 },
  { id: 8, policy: 'p', key: 'k2', cost: 1.5 },
  { id: 9, policy: 'p', key: '', cost: 1 },
  { id: 10, policy: 'p', key: 'x'.repeat(1025), cost: 1 },
  { id: 11, policy: 'm', key: 'k', cost: 3 },
  { id: 12, policy: 'm', key: 'k', cost: 1 },
  { id: 13, policy: 'l', key: 'vip', cost: 100 },
  { id: 14, policy: 'l', key: 'bad', cost: 1 },
  { id: 15, policy: 'l', key: 'k', cost: 4 },
  { id: 16, policy: 'sh', key: 'k', cost: 1 },
  { id: 17, policy: 'sh', key: 'k', cost: 1 },
  { id: 18, policy: 'd', key: 'acme:search', cost: 2 },
  { id: 19, policy: 'w', key: 'k', cost: 3 },
  { id: 20, policy: 'p', key: 'k2', cost: 1, flags: CHECK_SUBSCRIBE },
  { id: 21, policy: 'p', key: 'k', cost: 1, flags: CHECK_SUBSCRIBE },
  { id: 22, policy: 'p', key: 'k3', cost: Number.NaN },
  { id: 23, policy: 'p', key: 'k3', cost: 2 ** 53 },
  { id: 24, policy: 'w', key: 'k', cost: 1 },
  { id: 25, policy: 'w', key: 'k', cost: 1 },
  { id: 26, policy: 'w', key: 'k', cost: 1 },
  { id: 27, policy: 'p', key: 'k3', cost: 0 },
];

function frameOf(recs: Rec[]): Uint8Array {
  const w = new FrameWriter(FRAME_CHECKS);
  const spoil: number[] = [];
  for (const r of recs) {
    const at = w.byteLength; // the record's offset in the frame
    w.check(r.id, r.policy, r.key, r.cost, r.flags ?? 0);
    if (r.badPolicy) spoil.push(at + 16);
    if (r.badKey) spoil.push(at + 16 + Buffer.byteLength(r.policy));
  }
  const f = w.finish()!;
  for (const at of spoil) f[at] = 0xff;
  return f;
}

function errorAnswer(id: number, code: string, field: string, text: string, status = 400): BinaryAnswer {
  return { id, kind: KIND_ERROR, flags: 0, status, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: 0, name: code, field, text };
}

function decisionAnswer(id: number, d: Decision, flags = 0): BinaryAnswer {
  return {
    id, kind: d.allowed ? KIND_ALLOWED : KIND_DENIED, flags, status: 0, limit: d.limit, remaining: d.remaining,
    resetAfterMs: d.resetAfterMs, retryAfterMs: d.retryAfterMs, name: d.policy, field: '', text: d.reason ?? '',
  };
}

describe.each([0, 1])('/v1/stream binary batches, %i shards', (shards) => {
  it('a frame mixing valid and invalid items answers each exactly, as check() decides or refuses it, and counts the decisions', async () => {
    const s = await startStreamServer({ policies: POLICIES, shards });
    // the reference: the same checks, one check() call each in frame order, on a fresh limiter at the same time
    const direct = await createLimiter({ policies: POLICIES, clock: s.clock.now, maxKeys: 1024 });
    const expected: BinaryAnswer[] = [];
    const counts = new Map<string, number>();
    try {
      for (const r of RECORDS) {
        if (r.flags !== undefined && (r.flags & ~CHECK_SUBSCRIBE) !== 0) {
          expected.push(errorAnswer(r.id, 'INVALID_ARGUMENT', 'flags', `flags: unknown bits set (got ${r.flags})`));
          continue;
        }
        if (r.badPolicy) {
          expected.push(errorAnswer(r.id, 'INVALID_ARGUMENT', 'policy', 'policy: is not well-formed UTF-8'));
          continue;
        }
        if (r.badKey) {
          expected.push(errorAnswer(r.id, 'INVALID_ARGUMENT', 'key', 'key: is not well-formed UTF-8'));
          continue;
        }
        try {
          const d = await direct.check({ policy: r.policy, key: r.key, cost: r.cost });
          const subscribed = r.flags === CHECK_SUBSCRIBE && !d.allowed && d.retryAfterMs !== null;
          expected.push(decisionAnswer(r.id, d, subscribed ? ANSWER_SUBSCRIBED : 0));
          const result = d.allowed ? 'allowed' : d.retryAfterMs === null ? 'never' : 'denied';
          counts.set(`${r.policy}/${result}`, (counts.get(`${r.policy}/${result}`) ?? 0) + 1);
        } catch (e) {
          if (!isSluiceError(e)) throw e;
          expected.push(errorAnswer(r.id, e.code, e.field ?? '', e.message, e.status));
        }
      }
    } finally {
      await direct.close();
    }
    // every kind of answer is there: decisions of each outcome and errors of each kind
    expect(expected.filter((a) => a.kind === KIND_ERROR).map((a) => a.field).sort())
      .toStrictEqual(['cost', 'cost', 'cost', 'cost', 'flags', 'key', 'key', 'key', 'policy', 'policy']);
    expect(expected.some((a) => a.kind === KIND_DENIED && a.retryAfterMs === null && a.text === 'denylist')).toBe(true);
    expect(expected.some((a) => a.flags === ANSWER_SUBSCRIBED)).toBe(true);

    const c = await TestSocket.open(s.wsUrl);
    c.send(frameOf(RECORDS));
    await c.answers(RECORDS.length);
    expect(c.frames.every((f) => f.binary)).toBe(true);
    // errors found reading the frame are answered first; the engine's answers follow in frame order
    const ids = c.binaries.map((a) => a.id);
    expect(ids.slice(0, 3)).toStrictEqual([2, 4, 6]);
    expect(ids.slice(3)).toStrictEqual(RECORDS.map((r) => r.id).filter((id) => ![2, 4, 6].includes(id)));
    const byId = (a: BinaryAnswer, b: BinaryAnswer): number => a.id - b.id;
    expect([...c.binaries].sort(byId)).toStrictEqual(expected);
    expect(s.stream.stats()).toMatchObject({ answered: RECORDS.length, queued: 0, inFlight: 0, subscriptions: 1 });

    // the decisions are counted per policy and result; refused items (4xx) are not decisions
    const text = await (await fetch(`${s.url}/metrics`)).text();
    const series = (policy: string, result: string): number => {
      const m = new RegExp(`^sluice_decisions_total\\{policy="${policy}",result="${result}"\\} (\\d+)$`, 'm').exec(text);
      return m === null ? 0 : Number(m[1]);
    };
    let total = 0;
    for (const policy of Object.keys(POLICIES)) {
      for (const result of ['allowed', 'denied', 'never', 'error']) {
        const n = counts.get(`${policy}/${result}`) ?? 0;
        total += n;
        expect(series(policy, result), `${policy}/${result}`).toBe(n);
      }
    }
    expect(Number(/^sluice_decision_duration_seconds_count (\d+)$/m.exec(text)![1])).toBe(total);
  });

  it('frames of one connection are decided in the order they were sent, each check once', async () => {
    const s = await startStreamServer({ policies: POLICIES, shards });
    const c = await TestSocket.open(s.wsUrl);
    // 30 frames of 1 to 7 checks on one key of a 10-token bucket, clock frozen: the first 10 tokens go to the
    // first 10 checks sent, whatever the frame boundaries
    let id = 0;
    for (let f = 0; f < 30; f++) {
      const recs: Rec[] = [];
      for (let i = 0; i <= f % 7; i++) recs.push({ id: id++, policy: 'p', key: 'order', cost: 1 });
      c.send(frameOf(recs));
    }
    await c.answers(id);
    const answers = [...c.binaries].sort((a, b) => a.id - b.id);
    expect(answers.map((a) => a.id)).toStrictEqual([...Array(id).keys()]);
    expect(answers.map((a) => a.kind)).toStrictEqual([...Array(id).keys()].map((i) => (i < 10 ? KIND_ALLOWED : KIND_DENIED)));
    expect(answers.slice(0, 10).map((a) => a.remaining)).toStrictEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
  });
});
