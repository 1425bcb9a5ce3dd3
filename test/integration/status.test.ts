/**
 * `/v1/status`, `/v1/hot`, the status page route and the hot-key / near-limit metrics, on a limiter with a
 * manual clock (every count exact): the public server with `statusPage: true`, and the admin API serving the
 * same status behind its token. Checks go through every counting path: GET and POST /v1/check (single and
 * batch), /v1/auth, and the WebSocket's binary and JSON frames.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ServerPool, postJson, send, spawnServe, type ServeProcess } from '../helpers/server.js';
import { startAdminServer, type AdminServer } from '../../src/server/admin.js';
import { createClient } from '../../src/client/index.js';

const pool = new ServerPool();
const admins: AdminServer[] = [];
afterEach(async () => {
  await Promise.all(admins.splice(0).map((a) => a.close()));
  await pool.closeAll();
});

const POLICIES = {
  free: { algorithm: 'token_bucket' as const, limit: 10, period: 86_400_000 },
  tenant: { algorithm: 'fixed_window' as const, limit: 5, period: 86_400_000, descriptors: ['tenant'] },
};
const TOKEN = 'status-token-0123456789';

/** 12 checks of `a` (10 admitted, 2 denied; the 9th and 10th leave < 20 %), 3 of `b`, 2 of tenant t1, over several routes. */
async function traffic(url: string): Promise<void> {
  for (let i = 0; i < 6; i++) expect((await send(`${url}/v1/check?policy=free&key=a`)).status).toBe(200);
  for (let i = 0; i < 4; i++) expect((await postJson(`${url}/v1/check`, { policy: 'free', key: 'a' })).status).toBe(200);
  expect((await postJson(`${url}/v1/check`, { checks: [{ policy: 'free', key: 'a' }, { policy: 'free', key: 'b' }] })).status).toBe(200);
  expect((await send(`${url}/v1/auth?policy=free&key=a`)).status).toBe(429);
  expect((await send(`${url}/v1/auth?policy=free&key=b`)).status).toBe(200);
  expect((await send(`${url}/v1/check?policy=free&key=b`)).status).toBe(200);
  expect((await postJson(`${url}/v1/check`, { policy: 'tenant', descriptors: { tenant: 't1' } })).status).toBe(200);
  expect((await send(`${url}/v1/check?policy=tenant&tenant=t1`)).status).toBe(200);
}

describe('status and hot keys', () => {
  it('GET /v1/status reports the policies, per-second counts, near-limit and hot keys, exactly', async () => {
    const s = await pool.start({ policies: POLICIES, statusPage: true, activity: { hotKeys: 8, timer: false, windowSeconds: 4 } });
    await traffic(s.url);
    const r = await send(`${s.url}/v1/status`);
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    const d = r.json;
    expect(d.service).toBe('sluice');
    expect(d.policiesVersion).toBe(s.limiter.version);
    expect(d.policies).toStrictEqual([
      { name: 'free', consistency: 'local', onStoreError: 'local', shadow: false, descriptors: [], limits: [{ name: 'free', algorithm: 'token_bucket', limit: 10, periodMs: 86_400_000, burst: 10 }] },
      { name: 'tenant', consistency: 'local', onStoreError: 'local', shadow: false, descriptors: ['tenant'], limits: [{ name: 'tenant', algorithm: 'fixed_window', limit: 5, periodMs: 86_400_000, burst: 5 }] },
    ]);
    expect(d.activity.intervalMs).toBe(1000);
    expect(d.activity.policies).toStrictEqual({
      free: { admitted: [0, 0, 0, 13], denied: [0, 0, 0, 2], degraded: [0, 0, 0, 0], checks: 15, deniedTotal: 2, nearLimit: 2 },
      tenant: { admitted: [0, 0, 0, 2], denied: [0, 0, 0, 0], degraded: [0, 0, 0, 0], checks: 2, deniedTotal: 0, nearLimit: 0 },
    });
    expect(d.hot).toStrictEqual({
      free: { checks: 15, errorBound: 0, top: [{ key: 'a', checks: 12, denied: 2, error: 0, share: 12 / 15 }, { key: 'b', checks: 3, denied: 0, error: 0, share: 3 / 15 }] },
      tenant: { checks: 2, errorBound: 0, top: [{ key: 't1', checks: 2, denied: 0, error: 0, share: 1 }] },
    });
    expect(d.engine).toStrictEqual({ shards: 0, keys: 3, evictions: 0, pending: 0, perShard: [] });
    expect(d.store).toBeNull();
    expect(d.sync).toBeNull();
  });

  it('exports near-limit counts and the top N hot keys as metrics (hotKeyMetrics N; 0: none)', async () => {
    const s = await pool.start({ policies: POLICIES, activity: { timer: false }, hotKeyMetrics: 1 });
    await traffic(s.url);
    const text = (await send(`${s.url}/metrics`)).text;
    expect(text).toContain('sluice_near_limit_total{policy="free"} 2\n');
    expect(text).toContain('sluice_near_limit_total{policy="tenant"} 0\n');
    expect(text.match(/^sluice_hot_key_checks\{.*$/gm)).toStrictEqual(['sluice_hot_key_checks{policy="free",key="a"} 12', 'sluice_hot_key_checks{policy="tenant",key="t1"} 2']);
    expect(text.match(/^sluice_hot_key_denied\{.*$/gm)).toStrictEqual(['sluice_hot_key_denied{policy="free",key="a"} 2', 'sluice_hot_key_denied{policy="tenant",key="t1"} 0']);
    const off = await pool.start({ policies: POLICIES, activity: { timer: false }, hotKeyMetrics: 0 });
    await traffic(off.url);
    const offText = (await send(`${off.url}/metrics`)).text;
    expect(offText).not.toContain('sluice_hot_key');
    expect(offText).toContain('sluice_near_limit_total{policy="free"} 2\n');
    const none = await pool.start({ policies: POLICIES, activity: false });
    expect((await send(`${none.url}/metrics`)).text).not.toMatch(/sluice_near_limit|sluice_hot_key/);
  });

  it('counts WebSocket checks (binary and JSON frames) in the rates and hot keys', async () => {
    const s = await pool.start({ policies: POLICIES, statusPage: true, activity: { timer: false, windowSeconds: 2 } });
    for (const encoding of ['binary', 'json'] as const) {
      const c = createClient({ url: `ws://127.0.0.1:${s.port}`, encoding, honourRetryAfter: false });
      try {
        await c.connect();
        const ds = await Promise.all(Array.from({ length: 6 }, () => c.check({ policy: 'free', key: `ws-${encoding}`, cost: 1 })));
        expect(ds.map((x) => x.allowed)).toStrictEqual([true, true, true, true, true, true]);
      } finally {
        await c.close();
      }
    }
    const d = (await send(`${s.url}/v1/status`)).json;
    expect(d.activity.policies.free).toStrictEqual({ admitted: [0, 12], denied: [0, 0], degraded: [0, 0], checks: 12, deniedTotal: 0, nearLimit: 0 });
    expect(d.hot.free.top.map((h: { key: string; checks: number }) => [h.key, h.checks])).toStrictEqual([['ws-binary', 6], ['ws-json', 6]]);
  });

  it('serves the page at / and /status with a CSP allowing only its own script and style; off by default', async () => {
    const s = await pool.start({ policies: POLICIES, statusPage: true });
    for (const path of ['/', '/status']) {
      const r = await send(`${s.url}${path}`);
      expect(r.status).toBe(200);
      expect(r.contentType).toBe('text/html; charset=utf-8');
      expect(r.text).toContain('<title>sluice status</title>');
      expect(r.headers.get('content-security-policy')).toMatch(/^default-src 'none'; script-src 'sha256-[A-Za-z0-9+/]+={0,2}'; style-src 'sha256-[A-Za-z0-9+/]+={0,2}'; connect-src 'self'/);
      expect(r.text).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/); // nothing fetched from elsewhere
    }
    const off = await pool.start({ policies: POLICIES });
    for (const path of ['/', '/status', '/v1/status']) expect((await send(`${off.url}${path}`)).status).toBe(404);
  });

  it('the admin API serves /v1/status and /v1/hot behind its token, the page without it', async () => {
    const s = await pool.start({ policies: POLICIES, activity: { hotKeys: 8, timer: false } });
    const admin = await startAdminServer({ limiter: s.limiter, token: TOKEN, port: 0, status: s.server.status });
    admins.push(admin);
    const base = `http://127.0.0.1:${admin.port}`;
    const auth = { headers: { authorization: `Bearer ${TOKEN}` } };
    await traffic(s.url);
    expect((await send(`${base}/v1/status`)).status).toBe(401);
    expect((await send(`${base}/v1/hot?policy=free`)).status).toBe(401);
    expect((await send(`${base}/v1/status`, auth)).json.hot.free.checks).toBe(15);
    const page = await send(`${base}/`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('<title>sluice status</title>');
    expect((await send(`${base}/v1/hot?policy=free&limit=1`, auth)).json).toStrictEqual({
      policy: 'free', checks: 15, errorBound: 0, keys: [{ key: 'a', checks: 12, denied: 2, error: 0, share: 12 / 15 }],
    });
    expect((await send(`${base}/v1/hot?policy=tenant`, auth)).json).toStrictEqual({
      policy: 'tenant', checks: 2, errorBound: 0, keys: [{ key: 't1', checks: 2, denied: 0, error: 0, share: 1 }],
    });
    const bad = async (q: string): Promise<[number, string, string]> => {
      const r = await send(`${base}/v1/hot${q}`, auth);
      return [r.status, r.json.field, r.json.code];
    };
    expect(await bad('')).toStrictEqual([400, 'policy', 'INVALID_ARGUMENT']);
    expect(await bad('?policy=free&limit=0')).toStrictEqual([400, 'limit', 'INVALID_ARGUMENT']);
    expect(await bad('?policy=free&limit=2.5')).toStrictEqual([400, 'limit', 'INVALID_ARGUMENT']);
    expect(await bad('?policy=free&limit=1001')).toStrictEqual([400, 'limit', 'INVALID_ARGUMENT']);
    const unknown = await send(`${base}/v1/hot?policy=nope`, auth);
    expect([unknown.json.field, unknown.json.code]).toStrictEqual(['policy', 'UNKNOWN_POLICY']);
  });
});

describe('sluice serve: where the status page is served', () => {
  const running: ServeProcess[] = [];
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-status-'));
  afterEach(async () => {
    await Promise.all(running.splice(0).map((p) => p.kill()));
  });
  const serve = async (server: string, extra: string[] = []): Promise<{ main: string; admin: string | null }> => {
    const file = path.join(tmp, `p-${running.length}.yaml`);
    writeFileSync(file, `policies:\n  free: { algorithm: token_bucket, limit: 10, period: 1d }\n${server}`);
    const p = await spawnServe(['--config', file, ...extra]);
    running.push(p);
    const line = p.logs().find((l) => l.msg === 'admin API listening');
    return { main: p.url, admin: line === undefined ? null : `http://127.0.0.1:${line.port as number}` };
  };
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('on the public port without an admin port; on the admin port (behind its token) with one; nowhere with statusPage: false', async () => {
    const open = await serve('');
    expect((await send(`${open.main}/`)).status).toBe(200);
    expect((await send(`${open.main}/v1/status`)).json.policies.map((p: { name: string }) => p.name)).toStrictEqual(['free']);

    const withAdmin = await serve('', ['--admin-port', '0', '--admin-token', TOKEN]);
    expect((await send(`${withAdmin.main}/`)).status).toBe(404);
    expect((await send(`${withAdmin.main}/v1/status`)).status).toBe(404);
    expect((await send(`${withAdmin.admin}/status`)).status).toBe(200);
    expect((await send(`${withAdmin.admin}/v1/status`)).status).toBe(401);
    expect((await send(`${withAdmin.admin}/v1/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json.service).toBe('sluice');

    const off = await serve('server:\n  statusPage: false\n', ['--admin-port', '0', '--admin-token', TOKEN]);
    expect((await send(`${off.main}/`)).status).toBe(404);
    const offAdmin = await send(`${off.admin}/v1/status`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect([offAdmin.status, offAdmin.json.code]).toStrictEqual([404, 'NOT_FOUND']);
    expect((await send(`${off.admin}/`)).status).toBe(401);

    const hotOff = await serve('server:\n  hotKeys: { capacity: 0 }\n');
    await send(`${hotOff.main}/v1/check?policy=free&key=a`);
    const st = (await send(`${hotOff.main}/v1/status`)).json;
    expect([st.hot, st.activity.policies.free.checks]).toStrictEqual([{}, 1]);
  }, 60_000);
});

