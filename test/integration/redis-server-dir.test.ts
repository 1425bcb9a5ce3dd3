/**
 * The redis-servers tests and benches start run in an empty directory of their own, removed when they exit:
 * started in the project's directory, a server made a replica wrote its full sync's RDB there (dump.rdb), and
 * every later one started there loaded it, with the replication backlog of the master that wrote it, which made
 * each of its script writes cost more (the bench measured another server).
 */
import { existsSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startRedis } from '../helpers/redis.js';
import { startRedis as startBenchRedis } from '../../bench/lib/redis-server.js';
import { sleep } from '../helpers/clock.js';

/** Waits up to 2 s for `dir` to be gone. */
async function gone(dir: string): Promise<boolean> {
  for (let i = 0; i < 40 && existsSync(dir); i++) await sleep(50);
  return !existsSync(dir);
}

describe('redis-server working directories', () => {
  it('a test redis-server runs in an empty directory of its own, not the project’s, gone after it stops', async () => {
    const r = await startRedis();
    const [, dir] = (await r.client.config('GET', 'dir')) as string[];
    expect(dir).not.toBe(process.cwd());
    expect(readdirSync(dir)).toStrictEqual([]);
    expect(await r.client.info('replication')).toContain('repl_backlog_active:0');
    await r.stop();
    expect(await gone(dir)).toBe(true);
  });

  it('so does the bench’s own redis-server', async () => {
    const r = await startBenchRedis();
    const { Redis } = await import('ioredis');
    const c = new Redis(r.port, '127.0.0.1');
    const [, dir] = (await c.config('GET', 'dir')) as string[];
    expect(dir).not.toBe(process.cwd());
    expect(readdirSync(dir)).toStrictEqual([]);
    expect(await c.info('replication')).toContain('repl_backlog_active:0');
    c.disconnect();
    await r.stop();
    expect(await gone(dir)).toBe(true);
  });
});
