/**
 * Graceful shutdown with write-behind (issue 7, item 5): SIGTERM in the middle of a load stops accepting,
 * answers what is in flight, merges every sync-mode delta into Redis, then exits 0. Afterwards Redis holds
 * exactly the tokens the instance admitted.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insideWindow, sharedRedis, type SharedRedis } from '../helpers/redis.js';
import { spawnServe } from '../helpers/server.js';
import { readState } from '../helpers/state.js';

let redis: SharedRedis;
let dir: string;
beforeAll(async () => {
  redis = await sharedRedis();
  dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-shutdown-'));
});
afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('SIGTERM with sync-mode deltas pending', () => {
  for (const shards of [0, 2]) {
    it(`every admitted token reaches Redis before the process exits 0 (shards ${shards})`, async () => {
      const file = path.join(dir, `sync-${shards}.yaml`);
      // a one-hour fixed window: the count in Redis is exactly the tokens admitted, if the hour (Redis's clock)
      // does not end, expiring the keys, between the first check and the read after the exit (~1 s, at most ~12)
      await insideWindow(redis.client, 3_600_000, 15_000);
      writeFileSync(file, 'policies:\n  p: { algorithm: fixed_window, limit: 100000, period: 1h, consistency: sync }\n');
      const prefixKeys = async (): Promise<string[]> => redis.client.keys('sluice:{p:*');
      await redis.client.del(...(await prefixKeys()), 'unused');
      // a long sync interval, so deltas are certainly pending when SIGTERM arrives
      const p = await spawnServe(['--config', file, '--shards', String(shards), '--redis', redis.url], {
        env: { SLUICE_SYNC_INTERVAL_MS: '60000' },
      });
      let admitted = 0;
      let stop = false;
      const load = (async () => {
        const keys = ['a', 'b', 'c'];
        for (let i = 0; !stop && i < 2000; i++) {
          const res = await fetch(`${p.url}/v1/check?policy=p&key=${keys[i % 3]}&cost=2`).catch(() => null);
          if (res === null) break; // the listener is closed: the drain has begun
          const body = (await res.json()) as { allowed?: boolean };
          if (res.status === 200 && body.allowed === true) admitted += 2;
        }
      })();
      await new Promise((r) => setTimeout(r, 300));
      p.child.kill('SIGTERM');
      const exit = await Promise.race([p.exited, new Promise((r) => setTimeout(() => r('no exit within 10 s'), 10_000))]);
      stop = true;
      await load;
      expect(exit).toStrictEqual({ code: 0, signal: null });
      expect(admitted).toBeGreaterThan(0);
      let stored = 0;
      for (const key of await prefixKeys()) stored += Number((await readState(redis.client, key))!.split(' ')[0]);
      expect(stored).toBe(admitted);
    }, 30_000 + 15_000); // and insideWindow's longest wait
  }
});
