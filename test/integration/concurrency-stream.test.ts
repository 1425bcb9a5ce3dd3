/**
 * Concurrency leases over /v1/stream's JSON frames and through sluice/client (HTTP and ws:// urls), on the
 * real server with a controlled clock: exact answers, errors with the id and the field, a binary check on the
 * same connection unaffected.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from '../../src/client/index.js';
import { isSluiceError } from '../../src/util/errors.js';
import { closeAllServers, startStreamServer, TestSocket } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

const POLICIES = {
  jobs: { algorithm: 'concurrency', limit: 2, leaseTtl: '10s' },
  free: { algorithm: 'token_bucket', limit: 5, period: '1m' },
} as never;

describe('/v1/stream: acquire and release frames', () => {
  it('answers each with its id, exactly; a lease not held is an error naming leaseId', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const ws = await TestSocket.open(s.wsUrl);
    ws.sendJson({ id: 1, op: 'acquire', policy: 'jobs', key: 'k' });
    await ws.answers(1);
    const a = ws.texts[0];
    expect(a).toEqual({ id: 1, allowed: true, leaseId: expect.stringMatching(/^[0-9a-f]{12}$/), limit: 2, remaining: 1, retryAfterMs: 0, leaseTtlMs: 10_000, policy: 'jobs' });
    s.clock.advance(4000);
    ws.sendJson([{ id: 2, op: 'acquire', policy: 'jobs', key: 'k' }, { id: 3, op: 'acquire', policy: 'jobs', key: 'k' }, { id: 4, policy: 'free', key: 'k' }]);
    await ws.answers(4);
    const byId = new Map(ws.texts.map((t) => [t.id, t]));
    expect(byId.get(2)).toMatchObject({ allowed: true, remaining: 0 });
    // the first lease (acquired 4 s ago) expires in 6 s
    expect(byId.get(3)).toEqual({ id: 3, allowed: false, leaseId: null, limit: 2, remaining: 0, retryAfterMs: 6000, leaseTtlMs: 10_000, policy: 'jobs' });
    expect(byId.get(4)).toMatchObject({ id: 4, allowed: true, remaining: 4, policy: 'free' });

    ws.sendJson({ id: 'r1', op: 'release', policy: 'jobs', key: 'k', leaseId: a.leaseId });
    await ws.answers(5);
    expect(ws.texts[4]).toEqual({ id: 'r1', released: true, remaining: 1, policy: 'jobs' });
    ws.sendJson({ id: 'r2', op: 'release', policy: 'jobs', key: 'k', leaseId: a.leaseId });
    await ws.answers(6);
    expect(ws.texts[5]).toEqual({
      id: 'r2', error: { code: 'UNKNOWN_LEASE', status: 409, field: 'leaseId', detail: `leaseId: "${a.leaseId}" is not held (unknown, already released, or expired): nothing was released` },
    });
  });

  it('bad lease items get an error naming the field, the connection stays open', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const ws = await TestSocket.open(s.wsUrl);
    const bad: Array<[unknown, string]> = [
      [{ id: 1, op: 'acquire', policy: 'jobs' }, 'key'],
      [{ id: 2, op: 'acquire', policy: 'jobs', key: 'k', cost: 1 }, 'cost'],
      [{ id: 3, op: 'acquire', policy: 'free', key: 'k' }, 'policy'],
      [{ id: 4, op: 'release', policy: 'jobs', key: 'k' }, 'leaseId'],
      [{ id: 5, op: 'release', policy: 'jobs', key: 'k', leaseId: 'nope' }, 'leaseId'],
      [{ id: 6, op: 'renew', policy: 'jobs', key: 'k' }, 'op'],
    ];
    for (const [item] of bad) ws.sendJson(item);
    await ws.answers(bad.length);
    const byId = new Map(ws.texts.map((t) => [t.id, t]));
    bad.forEach(([item, field]) => {
      const id = (item as { id: number }).id;
      expect([byId.get(id)?.error?.field, byId.get(id)?.error?.status], JSON.stringify(item)).toEqual([field, 400]);
    });
    ws.sendJson({ id: 7, op: 'acquire', policy: 'jobs', key: 'k' });
    await ws.answers(bad.length + 1);
    expect(ws.texts.at(-1)).toMatchObject({ id: 7, allowed: true, remaining: 1 });
  });
});

describe('sluice/client: acquire and release', () => {
  for (const kind of ['http', 'ws'] as const) {
    it(`over a ${kind} url (leases go to POST /v1/acquire and /v1/release)`, async () => {
      const s = await startStreamServer({ policies: POLICIES });
      const client = createClient({ url: kind === 'http' ? s.url : s.wsUrl });
      try {
        const a = await client.acquire({ policy: 'jobs', key: 'k' });
        expect(a).toEqual({ allowed: true, leaseId: expect.stringMatching(/^[0-9a-f]{12}$/), limit: 2, remaining: 1, retryAfterMs: 0, leaseTtlMs: 10_000, policy: 'jobs' });
        s.clock.advance(2500);
        expect((await client.acquire({ policy: 'jobs', key: 'k' })).remaining).toBe(0);
        expect(await client.acquire({ policy: 'jobs', key: 'k' })).toMatchObject({ allowed: false, retryAfterMs: 7500 });
        expect(await client.release({ policy: 'jobs', key: 'k', leaseId: a.leaseId! })).toEqual({ released: true, remaining: 1, policy: 'jobs' });
        const again = await client.release({ policy: 'jobs', key: 'k', leaseId: a.leaseId! }).catch((e: unknown) => e);
        expect(isSluiceError(again) && [again.code, again.field, again.status]).toEqual(['UNKNOWN_LEASE', 'leaseId', 409]);
        const bad = await client.acquire({ policy: 'free', key: 'k' }).catch((e: unknown) => e);
        expect(isSluiceError(bad) && [bad.code, bad.field]).toEqual(['INVALID_ARGUMENT', 'policy']);
        // checks still work beside leases
        expect((await client.check({ policy: 'free', key: 'k', cost: 1 })).remaining).toBe(4);
      } finally {
        await client.close();
      }
      const closed = await client.acquire({ policy: 'jobs', key: 'k' }).catch((e: unknown) => e);
      expect((closed as { code?: string }).code).toBe('CLOSED');
    });
  }
});
