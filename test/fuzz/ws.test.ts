/**
 * Mass fuzzing of `/v1/stream`: about 3,600 random and mutated WebSocket frames over 4 lanes (each a `ws`
 * connection, reopened after every frame that closes it), text and binary: bad JSON, wrong types, huge numbers,
 * NaN-like strings, negative and fractional costs, control characters, very long keys and ids, deep nesting,
 * `__proto__` keys, arrays mixing good and bad checks, truncated and bit-flipped binary frames, bad UTF-8 in
 * binary strings, unknown versions and frame types, oversize frames and batches.
 *
 * Properties:
 * - every check with a readable id gets exactly one answer carrying that id (text: a string of 1 to 256
 *   characters or a safe integer; binary: every record of a well-formed checks frame), and every item without
 *   one gets exactly one id-less error; checks built to be invalid get errors;
 * - the valid checks interleaved with the garbage (JSON and binary, on every algorithm and a multi-limit
 *   policy) get EXACTLY the decisions of a second limiter fed the same valid checks in the same order on the
 *   same frozen clock;
 * - a connection closed by the server is closed with the code its frame calls for (1002 protocol, 1009 too
 *   big, 1006 only for what uWS cuts itself: text that is not UTF-8, frames over twice maxFrameBytes);
 * - the server still answers a fresh connection's valid check at the end.
 *
 * Each lane owns its valid keys (`v<lane>:…`); garbage that happens to be valid only touches keys of its own
 * (`j…`), so it cannot change a compared decision. Before a frame that will close its connection the lane
 * waits for every answer it is owed, so no answer is lost to the close.
 *
 * FUZZ_SEED=n replays a run (the seed is in the failure message). The frames, and what each is owed, are made by
 * test/fuzz/ws-frames.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { ANSWER_NO_ID, KIND_ALLOWED, KIND_ERROR, type BinaryAnswer } from '../../src/wire/binary-format.js';
import { EPOCH_MINUTE } from '../helpers/clock.js';
import { TestSocket, startStreamServer, type StreamServer } from '../integration/ws-support.js';
import { prng } from '../helpers/prng.js';
import { Gen, MAX_CHECKS, MAX_FRAME, owedBinary, owedText, POLICIES, Rnd, type Valid } from './ws-frames.js';

const LANES = 4;
const FRAMES_PER_LANE = 900;
const BURST = 25;
const SEED = process.env.FUZZ_SEED === undefined ? (Math.random() * 2 ** 31) | 0 : Number(process.env.FUZZ_SEED);

// ---------------------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------------------

function decisionOf(a: BinaryAnswer): Decision {
  const d: Decision = {
    allowed: a.kind === KIND_ALLOWED, limit: a.limit, remaining: a.remaining, resetAfterMs: a.resetAfterMs,
    retryAfterMs: a.retryAfterMs, policy: a.name,
  };
  if (a.text !== '') d.reason = a.text;
  return d;
}

const addCount = (m: Map<string, number>, k: string, by = 1): void => void m.set(k, (m.get(k) ?? 0) + by);

interface LaneResult {
  frames: number;
  killers: number;
  closes: Array<{ code: number; allowed: number[] }>;
  /** Valid checks in send order, with the decision the server gave (JSON-normalised). */
  decided: Array<{ v: Valid; got: unknown }>;
  answered: number;
}

let server: StreamServer;
const sockets = new Set<TestSocket>();

beforeAll(async () => {
  server = await startStreamServer({ policies: POLICIES, stream: { maxFrameBytes: MAX_FRAME, maxChecksPerFrame: MAX_CHECKS } });
});

afterAll(async () => {
  for (const s of sockets) s.close();
  await server?.close();
});

async function open(): Promise<TestSocket> {
  const s = await TestSocket.open(server.wsUrl);
  sockets.add(s);
  return s;
}

/** One lane: sends its frames in bursts, checks every session's answers, reopens after each close. */
async function runLane(lane: number): Promise<LaneResult> {
  const r = new Rnd(prng(SEED * 31 + lane));
  const gen = new Gen(r, lane);
  const res: LaneResult = { frames: 0, killers: 0, closes: [], decided: [], answered: 0 };
  let sock = await open();
  // what the current session is owed
  let owedIds = new Map<string, number>();
  let owedNoIdText = 0, owedNoIdBin = 0, owedTotal = 0;
  let valids: Valid[] = [];
  let mustError = new Set<string>();

  /** Waits for every answer owed, then checks them and starts a new account. */
  const settle = async (): Promise<void> => {
    await sock.answers(owedTotal, 8000);
    await new Promise((r) => setTimeout(r, 5)); // a stray extra answer would show up here
    const got = new Map<string, number>();
    const byId = new Map<string, unknown[]>();
    const note = (k: string, a: unknown): void => void (byId.get(k) ?? byId.set(k, []).get(k)!).push(a);
    let noIdText = 0, noIdBin = 0;
    for (const a of sock.texts) {
      if ('id' in a) {
        const k = 't' + JSON.stringify(a.id);
        addCount(got, k);
        note(k, a);
      } else {
        expect(Object.keys(a), JSON.stringify(a)).toStrictEqual(['error']);
        noIdText++;
      }
    }
    for (const a of sock.binaries) {
      if (a.flags & ANSWER_NO_ID) {
        expect(a.kind).toBe(KIND_ERROR);
        noIdBin++;
      } else {
        const k = 'b' + a.id;
        addCount(got, k);
        note(k, a);
      }
    }
    expect({ noIdText, noIdBin }).toStrictEqual({ noIdText: owedNoIdText, noIdBin: owedNoIdBin });
    expect(new Map([...got].sort())).toStrictEqual(new Map([...owedIds].sort()));
    // (a mutated frame's id may equal a bad check's: then one of the answers with that id is its error)
    for (const k of mustError) {
      const as = byId.get(k) as Array<Record<string, any>>;
      const errors = as.filter((a) => (k.startsWith('t') ? typeof a.error?.code === 'string' : a.kind === KIND_ERROR));
      expect(errors.length, `${k}: ${JSON.stringify(as)}`).toBeGreaterThan(0);
    }
    for (const v of valids) {
      const k = (v.bin ? 'b' : 't') + v.id;
      const as = byId.get(k)!;
      expect(as).toHaveLength(1);
      const a = as[0];
      let got: unknown;
      if (v.bin) {
        expect((a as BinaryAnswer).kind, JSON.stringify(a)).not.toBe(KIND_ERROR);
        got = decisionOf(a as BinaryAnswer);
      } else {
        const { id: _id, ...rest } = a as Record<string, unknown>;
        expect(rest.error, JSON.stringify(a)).toBeUndefined();
        got = rest;
      }
      res.decided.push({ v, got });
    }
    res.answered += sock.answerCount;
    sock.texts.length = 0;
    sock.binaries.length = 0;
    owedIds = new Map();
    owedNoIdText = owedNoIdBin = owedTotal = 0;
    valids = [];
    mustError = new Set();
  };

  for (let f = 0; f < FRAMES_PER_LANE; f++) {
    if (f % BURST === BURST - 1) await settle();
    const killer = r.chance(0.012);
    const frame = killer ? gen.killer() : r.chance(0.55) ? gen.text() : gen.binary();
    const owed = frame.rawText ? { ids: [], noId: 0, close: [1006] } : typeof frame.data === 'string' ? owedText(frame.data) : owedBinary(frame.data);
    if (owed.close !== null) {
      // a frame that closes: collect what the session is owed first, then expect the close (an oversize frame
      // may hold valid checks: it is refused whole, so they are not counted)
      await settle();
      if (frame.rawText) sock.ws.send(frame.data as Uint8Array, { binary: false });
      else sock.send(frame.data);
      res.frames++;
      res.killers++;
      const { code } = await sock.closed(5000);
      res.closes.push({ code, allowed: owed.close });
      sockets.delete(sock);
      expect(owed.close, `close code for frame ${f} of lane ${lane}`).toContain(code);
      expect(sock.answerCount).toBe(0);
      sock = await open();
      continue;
    }
    const bin = typeof frame.data !== 'string';
    const prefix = bin ? 'b' : 't';
    for (const id of owed.ids) addCount(owedIds, prefix + id);
    if (bin) owedNoIdBin += owed.noId;
    else owedNoIdText += owed.noId;
    owedTotal += owed.ids.length + owed.noId;
    for (const id of frame.mustError) mustError.add(prefix + id);
    valids.push(...frame.valid);
    sock.send(frame.data);
    res.frames++;
  }
  await settle();
  expect(sock.closeInfo).toBe(null);
  sock.close();
  sockets.delete(sock);
  return res;
}

describe(`/v1/stream under ${LANES * FRAMES_PER_LANE} fuzzed frames (FUZZ_SEED=${SEED})`, () => {
  it('answers every readable id exactly once, decides the valid checks like a reference limiter, closes only with documented codes, and survives', async () => {
    const results = await Promise.all(Array.from({ length: LANES }, (_, lane) => runLane(lane)));

    // the reference: the same valid checks, lane by lane in send order (lanes own their keys), same frozen clock
    const ref: Limiter = await createLimiter({ policies: POLICIES, clock: () => EPOCH_MINUTE, maxKeys: 16_384 });
    try {
      for (const res of results) {
        const got = res.decided.map((d) => d.got);
        const want: unknown[] = [];
        for (const { v } of res.decided) {
          const d = await ref.check({ policy: v.policy, key: v.key, cost: v.cost });
          want.push(v.bin ? d : JSON.parse(JSON.stringify(d)));
        }
        expect(got).toStrictEqual(want);
      }
    } finally {
      await ref.close();
    }

    const frames = results.reduce((s, x) => s + x.frames, 0);
    const validCount = results.reduce((s, x) => s + x.decided.length, 0);
    const allowed = results.reduce((s, x) => s + x.decided.filter((d) => (d.got as Decision).allowed).length, 0);
    const killers = results.reduce((s, x) => s + x.killers, 0);
    expect(frames).toBeGreaterThanOrEqual(3000);
    expect(validCount).toBeGreaterThan(1000);
    expect(allowed).toBeGreaterThan(100);
    expect(validCount - allowed).toBeGreaterThan(100);
    expect(killers).toBeGreaterThan(10);
    for (const c of results.flatMap((x) => x.closes)) expect([1001, 1002, 1006, 1008, 1009]).toContain(c.code);

    // still healthy: a fresh connection's valid check is answered
    const fresh = await open();
    fresh.sendJson({ id: 'last', policy: 'tb', key: 'fresh', cost: 1 });
    await fresh.answers(1, 5000);
    expect(fresh.texts[0]).toMatchObject({ id: 'last', allowed: true, policy: 'tb' });
    const stats = server.stream.stats();
    expect(stats.queued + stats.inFlight).toBe(0);
    fresh.close();
  }, 60_000);
});
