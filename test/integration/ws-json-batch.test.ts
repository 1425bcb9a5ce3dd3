/**
 * /v1/stream's batch path for JSON frames of plain checks (src/wire/json-stream.ts): such a frame is decided
 * through the engine's batch path, with no checkSync call, and every answer is byte for byte the answer the
 * one-at-a-time path gives the same checks (a frame off the plain form: here each item with
 * `"subscribe":false`), errors per item included, in the same order of decisions per connection, with shards
 * 0 (decided on this thread) and 1 (one batch awaited from the shard).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { BATCH_POLICIES, TestSocket, closeAllServers, startStreamServer, type StreamServer } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

const POLICIES: Record<string, PolicySpec> = {
  ...BATCH_POLICIES,
  z: { algorithm: 'fixed_window', limit: 0, period: 60_000 },
  'g.cra-1': { algorithm: 'gcra', limit: 3, period: 60_000 },
};

type Item = { id: number | string; policy: string; key: string; cost?: number };

/** Frames of plain checks: valid ones, denials, lists, shadows, and every per-item fault the engine finds. */
const FRAMES: Item[][] = [
  [
    { id: 1, policy: 'p', key: 'k', cost: 10 },
    { id: 2, policy: 'p', key: 'k' },
    { id: 'a', policy: 'zz', key: 'k' },
    { id: 3, policy: 'p', key: '' },
    { id: 4, policy: 'p', key: 'x'.repeat(1025) },
    { id: 5, policy: 'p', key: 'k2', cost: 11 },
    { id: 6, policy: 'm', key: 'k', cost: 3 },
    { id: 7, policy: 'm', key: 'k', cost: 1 },
    { id: 8, policy: 'l', key: 'vip', cost: 100 },
    { id: 9, policy: 'l', key: 'bad' },
    { id: 10, policy: 'l', key: 'k', cost: 4 },
    { id: 11, policy: 'sh', key: 'k' },
    { id: 12, policy: 'sh', key: 'k' },
    { id: 13, policy: 'd', key: 't1:read' },
    { id: 14, policy: 'z', key: 'k' },
    { id: 15, policy: 'g.cra-1', key: 'ключ' },
    { id: 151, policy: 'pólicy ☃', key: 'k' },
  ],
  [
    { id: 16, policy: 'w', key: 'k' },
    { id: 17, policy: 'w', key: 'k' },
    { id: 18, policy: 'w', key: 'k', cost: 0 },
    { id: 19, policy: 'w', key: 'k' },
    { id: 'b'.repeat(256), policy: 'p', key: 'k', cost: 0 },
  ],
  [{ id: 20, policy: 'g.cra-1', key: 'ключ', cost: 3 }],
];

/** A frame's text: plain, or each item with a field that sends the frame the one-at-a-time way. */
function text(items: Item[], plain: boolean): string {
  const all = plain ? items : items.map((i) => ({ ...i, subscribe: false }));
  return all.length === 1 ? JSON.stringify(all[0]) : JSON.stringify(all);
}

/** The raw text of each answer object in a text frame (one object, or an array of them). */
function answerTexts(frame: string): string[] {
  const body = frame.startsWith('[') ? frame.slice(1, -1) : frame;
  const out: string[] = [];
  let depth = 0, inString = false, start = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}') depth--;
    else if (c === ',' && depth === 0) {
      out.push(body.slice(start, i));
      start = i + 1;
    }
  }
  out.push(body.slice(start));
  return out;
}

/** Sends the frames in order on one connection and returns every answer's raw text by id. */
async function run(s: StreamServer, plain: boolean[]): Promise<Map<string, string>> {
  const c = await TestSocket.open(s.wsUrl);
  let expected = 0;
  for (let f = 0; f < FRAMES.length; f++) {
    c.send(text(FRAMES[f], plain[f]));
    expected += FRAMES[f].length;
  }
  await c.answers(expected);
  const byId = new Map<string, string>();
  for (const fr of c.frames) {
    expect(fr.binary).toBe(false);
    for (const a of answerTexts(fr.data.toString('utf8'))) {
      const id = JSON.stringify((JSON.parse(a) as { id: unknown }).id);
      expect(byId.has(id)).toBe(false);
      byId.set(id, a);
    }
  }
  c.close();
  return byId;
}

describe('/v1/stream JSON frames of plain checks', () => {
  it.each([0, 1])('are decided in batches, without checkSync, and answered byte for byte as one at a time, errors included (shards %i)', async (shards) => {
    const general = await startStreamServer({ policies: POLICIES, shards });
    const generalSync = vi.spyOn(general.limiter, 'checkSync');
    const want = await run(general, FRAMES.map(() => false));
    expect(generalSync).toHaveBeenCalled();

    const batch = await startStreamServer({ policies: POLICIES, shards });
    const batchSync = vi.spyOn(batch.limiter, 'checkSync');
    const got = await run(batch, FRAMES.map(() => true));
    expect(batchSync).not.toHaveBeenCalled();

    expect(got.size).toBe(FRAMES.flat().length);
    expect(got).toEqual(want);
    // the cases are what they claim: decisions, denials, a never-pass reason, lists, errors naming their field
    expect(JSON.parse(got.get('2')!)).toMatchObject({ allowed: false, remaining: 0 });
    expect(JSON.parse(got.get('5')!)).toMatchObject({ allowed: false, retryAfterMs: null, reason: "cost exceeds the limit's capacity" });
    expect(JSON.parse(got.get('9')!)).toMatchObject({ allowed: false, reason: 'denylist' });
    expect(JSON.parse(got.get('"a"')!).error).toMatchObject({ code: 'UNKNOWN_POLICY', field: 'policy' });
    expect(JSON.parse(got.get('3')!).error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'key' });
    expect(JSON.parse(got.get('4')!).error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'key' });
    expect(JSON.parse(got.get('19')!)).toMatchObject({ allowed: false, policy: 'w' });
  });

  it('keep the order of decisions with frames read one at a time on the same connection', async () => {
    const general = await startStreamServer({ policies: POLICIES });
    const want = await run(general, FRAMES.map(() => false));
    // plain, general, plain: the general frame's checks fall between the two batches, as sent
    const mixed = await startStreamServer({ policies: POLICIES });
    const got = await run(mixed, [true, false, true]);
    expect(got).toEqual(want);
    const other = await startStreamServer({ policies: POLICIES });
    expect(await run(other, [false, true, false])).toEqual(want);
  });
});
