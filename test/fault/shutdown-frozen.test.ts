/**
 * SIGTERM while Redis is frozen (issue #20, item 2): the instance stops accepting at once, keeps trying to
 * merge its sync deltas until its drain deadline, and exits. If Redis comes back within the deadline every
 * admitted token reaches it; if not, what could not be merged is logged with exact counts, and it still exits.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { insideWindow, keysUnder, startRedis, type TestRedis } from '../helpers/redis.js';
import { spawnServe, type ServeProcess } from '../helpers/server.js';
import { readState } from '../helpers/state.js';

let redis: TestRedis;
let dir: string;
beforeAll(async () => {
  redis = await startRedis();
  dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-frozen-'));
});
afterAll(async () => {
  redis?.resume();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const DRAIN_MS = 4000;

/** Starts `sluice serve` on a one-day sync fixed window (Redis's count is exactly the tokens admitted). */
async function serve(prefix: string): Promise<ServeProcess> {
  const file = path.join(dir, `${prefix}.yaml`);
  writeFileSync(file, 'policies:\n  p: { algorithm: fixed_window, limit: 100000, period: 1d, consistency: sync }\n');
  return spawnServe(['--config', file, '--redis', redis.url, '--redis-prefix', prefix, '--drain-timeout', String(DRAIN_MS)], {
    env: { SLUICE_SYNC_INTERVAL_MS: '20' },
  });
}

/** 500 admitted tokens over 5 keys, while Redis is frozen. */
async function admit(p: ServeProcess): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < 500; i++) {
    const res = await fetch(`${p.url}/v1/check?policy=p&key=k${i % 5}&cost=1`);
    if (res.status === 200 && ((await res.json()) as { allowed: boolean }).allowed) admitted++;
  }
  return admitted;
}

async function stored(prefix: string): Promise<number> {
  let n = 0;
  for (const k of await keysUnder(redis.client, `${prefix}{`)) n += Number((await readState(redis.client, k))!.split(' ')[0]);
  return n;
}

/**
 * What a NEW TCP connection to the server gets: 'connected' or the error code. fetch would reuse the keep-alive
 * connection of admit()'s requests, which the draining server closes (UND_ERR_SOCKET), so it cannot tell.
 */
function connectOutcome(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname);
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

async function exitWithin(p: ServeProcess, ms: number): Promise<unknown> {
  return Promise.race([p.exited, sleep(ms).then(() => `no exit within ${ms} ms`)]);
}

describe('SIGTERM while Redis is frozen', () => {
  // the one-day window is epoch-aligned on Redis's clock: a test across midnight UTC would count its 500
  // tokens in two windows (10 keys, or the first day's keys expired before they are read). A test takes ~10 s.
  beforeEach(async () => { await insideWindow(redis.client, 86_400_000, 20_000); }, 30_000);

  it('stops accepting at once; merges every delta once Redis is back within the deadline; exits 0', async () => {
    const p = await serve('back:');
    try {
      redis.pause();
      expect(await admit(p)).toBe(500);
      p.child.kill('SIGTERM');
      await waitForLog(p, 'draining');
      // the listener is closed: a new connection is refused
      expect(await connectOutcome(p.url)).toBe('ECONNREFUSED');
      await sleep(1000);
      redis.resume();
      expect(await exitWithin(p, DRAIN_MS + 5000)).toStrictEqual({ code: 0, signal: null });
      expect(await stored('back:')).toBe(500);
      expect(p.logs().filter((l) => String(l.msg).startsWith('sync: deltas not merged'))).toStrictEqual([]);
    } finally {
      redis.resume();
      await p.kill();
    }
  }, 30_000);

  it('Redis still frozen at the deadline: logs exactly what it could not merge, and exits', async () => {
    const p = await serve('gone:');
    try {
      redis.pause();
      expect(await admit(p)).toBe(500);
      p.child.kill('SIGTERM');
      expect(await exitWithin(p, DRAIN_MS + 5000)).toStrictEqual({ code: 0, signal: null });
      const lost = p.logs().filter((l) => String(l.msg).startsWith('sync: deltas not merged'));
      expect(lost.map((l) => [l.level, l.keys, l.tokens, l.deadlineMs])).toStrictEqual([[40, 5, 500, expect.any(Number)]]);
      expect(lost[0].deadlineMs as number).toBeLessThanOrEqual(DRAIN_MS);
    } finally {
      redis.resume();
      await p.kill();
    }
  }, 30_000);
});

async function waitForLog(p: ServeProcess, msg: string): Promise<void> {
  const end = Date.now() + 5000;
  while (!p.logs().some((l) => l.msg === msg)) {
    if (Date.now() > end) throw new Error(`no "${msg}" log line within 5 s`);
    await sleep(5);
  }
}
