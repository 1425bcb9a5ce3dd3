/**
 * Strict policies over /v1/stream: JSON and binary frames of strict checks are decided by Redis (one script
 * call per turn's batch), answered in order with the exact numbers, and leave the count in Redis; with Redis
 * unreachable every answer says it was not Redis's: `degraded` and `degradedBy` in JSON, the degraded bit and
 * the rule in a binary answer's flags. The limiter's clock decides (`redis.clock: 'limiter'`, a ManualClock), so
 * every wait is an exact number.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { PolicySpec } from '../../src/config/policy-spec.js';
import { ANSWER_DEGRADED, ANSWER_RULE_SHIFT, ANSWER_RULES, FRAME_CHECKS, KIND_ALLOWED, KIND_DENIED } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { storeKey } from '../../src/keys/store-key.js';
import { freePort, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { readState } from '../helpers/state.js';
import { TestSocket, closeAllServers, startStreamServer } from './ws-support.js';

/** 5 an hour: one token back every 720,000 ms. */
const POLICIES: Record<string, PolicySpec> = {
  s: { algorithm: 'token_bucket', limit: 5, period: 3_600_000, consistency: 'strict', onStoreError: 'closed' },
};

let r: SharedRedis;
beforeAll(async () => { r = await sharedRedis(); });
afterAll(async () => { await r?.stop(); });
afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

/** The stored token count of strict policy s's key `key` ("w0 w1 last": w0 is tokens · period). */
async function storedTokens(limiterVersion: string, key: string): Promise<number> {
  const v = await readState(r.client, storeKey('wss:', 's', limiterVersion, key, 0));
  return Number(v!.split(' ')[0]) / 3_600_000;
}

describe('strict checks over /v1/stream', () => {
  it('JSON and binary frames: decided by Redis in order, exact numbers, the spend stored in Redis', async () => {
    const srv = await startStreamServer({ policies: POLICIES, shards: 0, redis: { url: r.url, prefix: 'wss:', clock: 'limiter', timeoutMs: 1000 } });
    const version = srv.limiter.policies.get('s')!.version;
    const ws = await TestSocket.open(srv.wsUrl);

    ws.sendJson(Array.from({ length: 7 }, (_, i) => ({ id: i + 1, policy: 's', key: 'json' })));
    await ws.answers(7);
    expect(ws.texts.map((a) => [a.id, a.allowed, a.remaining, a.retryAfterMs, a.degraded])).toStrictEqual([
      [1, true, 4, 0, undefined], [2, true, 3, 0, undefined], [3, true, 2, 0, undefined], [4, true, 1, 0, undefined],
      [5, true, 0, 0, undefined], [6, false, 0, 720_000, undefined], [7, false, 0, 720_000, undefined],
    ]);
    // 5 spent of 5: the bucket is empty in Redis; the denials spent nothing
    expect(await storedTokens(version, 'json')).toBe(0);

    const w = new FrameWriter(FRAME_CHECKS);
    for (let i = 0; i < 4; i++) w.check(100 + i, 's', 'bin', 2, 0);
    ws.send(w.finish()!);
    await ws.answers(11);
    expect(ws.binaries.map((a) => [a.id, a.kind, a.remaining, a.retryAfterMs, a.flags & ANSWER_DEGRADED])).toStrictEqual([
      [100, KIND_ALLOWED, 3, 0, 0], [101, KIND_ALLOWED, 1, 0, 0],
      // 1 token left, 2 asked: the missing token comes back in 720,000 ms
      [102, KIND_DENIED, 1, 720_000, 0], [103, KIND_DENIED, 1, 720_000, 0],
    ]);
    expect(await storedTokens(version, 'bin')).toBe(1);

    // 30 minutes later on the limiter's clock: 2.5 tokens refilled, 2 whole ones spendable
    srv.clock.advance(1_800_000);
    ws.sendJson({ id: 'later', policy: 's', key: 'json', cost: 2 });
    await ws.answers(12);
    expect(ws.texts[7]).toMatchObject({ id: 'later', allowed: true, remaining: 0 });
    expect((await srv.limiter.stats()).store?.storeErrors).toBe(0);
  });

  it('Redis unreachable: every answer marked degraded by the rule (closed), in JSON and in binary flags', async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const srv = await startStreamServer({ policies: POLICIES, shards: 0, redis: { url: dead, prefix: 'wss:', clock: 'limiter', timeoutMs: 100 } });
    const ws = await TestSocket.open(srv.wsUrl);
    ws.sendJson([{ id: 1, policy: 's', key: 'k' }, { id: 2, policy: 's', key: 'k' }]);
    await ws.answers(2);
    for (const a of ws.texts) {
      expect(a).toMatchObject({ allowed: false, degraded: true, degradedBy: 'closed', retryAfterMs: 1000 });
    }
    const w = new FrameWriter(FRAME_CHECKS);
    w.check(3, 's', 'k', 1, 0);
    ws.send(w.finish()!);
    await ws.answers(3);
    const b = ws.binaries[0];
    expect([b.id, b.kind, b.flags & ANSWER_DEGRADED, ANSWER_RULES[(b.flags >> ANSWER_RULE_SHIFT) & 3], b.retryAfterMs])
      .toStrictEqual([3, KIND_DENIED, ANSWER_DEGRADED, 'closed', 1000]);
  });
});
