/**
 * Soak (issue #20): `sluice serve` with a sync and a strict policy under steady load through a Redis freeze
 * (SIGSTOP, 2 s), a restart (SIGKILL, relaunched on its append-only file), an OOM (maxmemory below use, 2 s)
 * and finally a SIGTERM. It ends with every token the sync policy admitted in Redis, exactly; every token the
 * strict policy admitted there too (plus at most the strict checks that timed out, which Redis may still have
 * run); and the process exited 0 within its drain deadline. With shards 0 and 2. Bounded: about 15 s of load each.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exited, freePort, insideWindow, keysUnder, launchRedis } from '../helpers/redis.js';
import { spawnServe } from '../helpers/server.js';
import { readState } from '../helpers/state.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const DRAIN_MS = 8000;

let dir: string;
let port: number;
let child: ChildProcess;
let client: Redis;
/** Every write fsynced before Redis answers it, so a SIGKILL loses nothing acknowledged. */
const launch = (): Promise<ChildProcess> => launchRedis(port, ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]);

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-soak-'));
  port = await freePort();
  child = await launch();
  client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => undefined);
});
afterAll(async () => {
  client?.disconnect();
  child?.kill('SIGCONT');
  child?.kill('SIGKILL');
  if (child) await exited(child);
  rmSync(dir, { recursive: true, force: true });
});

/** Tokens counted under `prefix` (fixed windows: the count is w0). */
async function stored(prefix: string): Promise<number> {
  let n = 0;
  for (const k of await keysUnder(client, prefix)) if (k.includes('{')) n += Number((await readState(client, k))!.split(' ')[0]);
  return n;
}

describe('soak: sync and strict through a freeze, a restart, an OOM and a SIGTERM', () => {
  // shards 2: sync checks are decided through the shards' synchronous channel and merged states installed
  // through the shards' admission logs (src/shard/admissions.ts), strict ones through the turn path
  it.each([0, 2])('ends with every admitted token in Redis and the process exited within its drain deadline (shards %i)', async (shards) => {
    await insideWindow(client, 86_400_000, 120_000);
    const file = path.join(dir, `policies-${shards}.yaml`);
    writeFileSync(file, [
      'policies:',
      `  s${shards}: { algorithm: fixed_window, limit: 1000000, period: 1d, consistency: sync }`,
      `  t${shards}: { algorithm: fixed_window, limit: 1000000, period: 1d, consistency: strict, onStoreError: closed }`,
      '',
    ].join('\n'));
    const p = await spawnServe(['--config', file, '--redis', `redis://127.0.0.1:${port}`, '--drain-timeout', String(DRAIN_MS), '--shards', String(shards)], {
      env: { SLUICE_SYNC_INTERVAL_MS: '20' },
    });
    const admitted = { s: 0, t: 0 };
    const name = { s: `s${shards}`, t: `t${shards}` };
    let degraded = 0;
    let errors = 0;
    let stop = false;
    const worker = async (w: number): Promise<void> => {
      for (let i = 0; !stop; i++) {
        const policy = i % 2 === 0 ? 's' : 't';
        const res = await fetch(`${p.url}/v1/check?policy=${name[policy]}&key=k${(w * 7 + i) % 20}&cost=1`).catch(() => null);
        if (res === null) {
          errors++;
          continue;
        }
        const d = (await res.json()) as { allowed?: boolean; degraded?: boolean };
        if (d.allowed === true) admitted[policy]++;
        if (d.degraded === true) degraded++;
      }
    };
    const load = Promise.all([0, 1, 2, 3].map(worker));
    try {
      await sleep(1500);
      child.kill('SIGSTOP'); // freeze
      await sleep(2000);
      child.kill('SIGCONT');
      await sleep(1500);
      child.kill('SIGKILL'); // restart, from the append-only file
      await exited(child);
      await sleep(500);
      child = await launch();
      await sleep(1500);
      await client.config('SET', 'maxmemory', '1'); // OOM: every write refused
      await sleep(2000);
      await client.config('SET', 'maxmemory', '0');
      await sleep(1500);
    } finally {
      stop = true;
      await load;
    }
    expect(errors).toBe(0);
    expect(admitted.s).toBeGreaterThan(100);
    expect(admitted.t).toBeGreaterThan(100);
    const t0 = Date.now();
    p.child.kill('SIGTERM');
    const exit = await Promise.race([p.exited, sleep(DRAIN_MS + 5000).then(() => 'no exit')]);
    expect(exit).toStrictEqual({ code: 0, signal: null });
    // within the drain deadline itself (serve's hard exit is 2 s past it)
    expect(Date.now() - t0).toBeLessThanOrEqual(DRAIN_MS);
    expect(p.logs().filter((l) => String(l.msg).startsWith('sync: deltas not merged'))).toStrictEqual([]);
    expect(await stored(`sluice:{s${shards}:`)).toBe(admitted.s);
    const strict = await stored(`sluice:{t${shards}:`);
    expect(strict).toBeGreaterThanOrEqual(admitted.t);
    expect(strict - admitted.t).toBeLessThanOrEqual(degraded);
  }, 120_000 + 120_000); // and insideWindow's longest wait (the last 2 minutes of a UTC day)
});
