/**
 * The check library cannot be (re)loaded, and what that is counted as.
 *
 * - Redis unwell with the library gone: `FUNCTION FLUSH` then `maxmemory 1` (OOM), or the Redis made a replica of
 *   an empty master (the full sync wipes its functions; READONLY). The FCALL answers "Function not found", the
 *   FUNCTION LOAD that would bring the library back is refused as unwell: the check fails with that refusal,
 *   counted as `unavailable` (not as a script error), and the breaker opens, as it does for an OOM or a READONLY
 *   on the FCALL itself. Once Redis is well again, the library is loaded and Redis decides.
 * - Redis refusing both FUNCTION and FCALL (an ACL `-function -fcall`; a Redis without them, emulated by
 *   renaming both away: "unknown command", as Redis older than 7 answers): the first check's FCALL, sent
 *   behind the refused FUNCTION LOAD, is resent by EVALSHA, so no check is degraded and no error is counted.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { brief } from '../helpers/assert.js';
import { sleep } from '../helpers/clock.js';
import { connected, exited, freePort, launchRedis, startRedis, type TestRedis } from '../helpers/redis.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];


const policies = {
  p: { algorithm: 'token_bucket', limit: 100, period: 60_000, consistency: 'strict', onStoreError: 'closed' },
} as unknown as Policies;


describe('the check library lost while Redis is unwell', () => {
  let r: TestRedis | undefined;
  let master: { child: ChildProcess; port: number } | undefined;
  let limiter: Limiter | undefined;
  afterEach(async () => {
    await limiter?.close();
    limiter = undefined;
    await r?.stop();
    r = undefined;
    if (master !== undefined) {
      master.child.kill('SIGKILL');
      await exited(master.child);
      master = undefined;
    }
  });

  async function start(): Promise<{ r: TestRedis; l: Limiter }> {
    r = await startRedis();
    // no heartbeat (breaker.ts heartbeatMs): the checks are what meets Redis's refusals, as under traffic; idle,
    // the heartbeat's probe would open the breaker before them (test/fault/redis-idle-frozen.test.ts)
    limiter = await createLimiter({
      policies, maxKeys: 1024,
      redis: { url: r.url, prefix: 'lost:', timeoutMs: 500, breaker: { resetMs: 200, maxResetMs: 400, heartbeatMs: 0 } },
    });
    await connected(limiter);
    expect(brief(await limiter.check({ policy: 'p', key: 'a', cost: 1 }))).toBe('allow r=99');
    return { r, l: limiter };
  }

  /** Ten checks of new keys while Redis is unwell: each takes the rule, counted as unavailable; the breaker opens. */
  async function unwell(l: Limiter, what: string): Promise<void> {
    const before = (await l.stats()).store!;
    const got: string[] = [];
    for (let i = 0; i < 10; i++) got.push(brief(await l.check({ policy: 'p', key: `${what}${i}`, cost: 1 })));
    expect(got).toStrictEqual(Array(10).fill('deny r=0 degraded:closed'));
    const s = (await l.stats()).store!;
    const d = (k: 'scriptErrors' | 'unavailable' | 'breakerRejections'): number => s[k] - before[k];
    expect(d('scriptErrors'), JSON.stringify(s)).toBe(0);
    // the breaker opened after the first few refusals (50 % of its window, 5 calls, the one success included)
    expect(d('unavailable'), JSON.stringify(s)).toBeGreaterThanOrEqual(4);
    expect(d('unavailable') + d('breakerRejections'), JSON.stringify(s)).toBe(10);
    expect(s.breaker).toBe('open');
  }

  /** Checks `key` until Redis decides it again (the breaker probes every ≤ 400 ms). */
  async function decidedAgain(l: Limiter, key: string): Promise<Decision> {
    let last = await l.check({ policy: 'p', key, cost: 1 });
    for (let i = 0; i < 40 && last.degraded === true; i++) {
      await sleep(100);
      last = await l.check({ policy: 'p', key, cost: 1 });
    }
    return last;
  }

  it('FUNCTION FLUSH then OOM: the FUNCTION LOAD\'s OOM fails the check, counted as unavailable; the breaker opens', async () => {
    const { r, l } = await start();
    await r.client.call('FUNCTION', 'FLUSH');
    await r.client.config('SET', 'maxmemory', '1');
    await unwell(l, 'oom');
    await r.client.config('SET', 'maxmemory', '0');
    expect(brief(await decidedAgain(l, 'a'))).toBe('allow r=98');
    expect((await r.client.call('FUNCTION', 'LIST')) as unknown[]).toHaveLength(1);
  }, 30_000);

  it('made a replica of an empty master (functions wiped by the sync): READONLY, counted as unavailable; the breaker opens', async () => {
    const { r, l } = await start();
    const port = await freePort();
    master = { child: await launchRedis(port), port };
    await r.client.call('REPLICAOF', '127.0.0.1', String(port));
    for (let i = 0; ; i++) {
      const info = (await r.client.info('replication'));
      if (info.includes('master_link_status:up') && ((await r.client.call('FUNCTION', 'LIST')) as unknown[]).length === 0) break;
      if (i > 100) throw new Error(`replica did not sync: ${info}`);
      await sleep(50);
    }
    await unwell(l, 'ro');
    await r.client.call('REPLICAOF', 'NO', 'ONE');
    // the sync emptied the data too: a fresh bucket
    expect(brief(await decidedAgain(l, 'a'))).toBe('allow r=99');
  }, 30_000);
});

describe('Redis refuses both FUNCTION and FCALL: the script goes by EVALSHA from the first check', () => {
  const stops: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const s of stops.reverse()) await s();
  });

  async function sevenChecks(url: string, prefix: string): Promise<void> {
    const l = await createLimiter({ policies, maxKeys: 1024, redis: { url, prefix, timeoutMs: 500 } });
    stops.push(() => l.close());
    await connected(l);
    const got: string[] = [];
    for (let i = 0; i < 7; i++) got.push(brief(await l.check({ policy: 'p', key: 'k', cost: 1 })));
    expect(got).toStrictEqual(['allow r=99', 'allow r=98', 'allow r=97', 'allow r=96', 'allow r=95', 'allow r=94', 'allow r=93']);
    const s = (await l.stats()).store!;
    expect(s.storeErrors, JSON.stringify(s)).toBe(0);
    expect(s.breaker).toBe('closed');
  }

  it('an ACL without FUNCTION and FCALL (NOPERM)', async () => {
    const r = await startRedis();
    stops.push(() => r.stop());
    await r.client.call('ACL', 'SETUSER', 'u', 'on', '>pw', '~*', '&*', '+@all', '-function', '-fcall');
    await sevenChecks(`redis://u:pw@127.0.0.1:${r.port}`, 'acl:');
  }, 30_000);

  it('a Redis without FUNCTION and FCALL (unknown command, as before Redis 7)', async () => {
    const port = await freePort();
    const child = await launchRedis(port, ['--rename-command', 'FUNCTION', '', '--rename-command', 'FCALL', '']);
    stops.push(async () => {
      child.kill('SIGKILL');
      await exited(child);
    });
    // the renames took: both are unknown commands
    const c = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
    stops.push(async () => c.disconnect());
    await expect(c.call('FCALL', 'f', '0')).rejects.toThrow(/unknown command/);
    await sevenChecks(`redis://127.0.0.1:${port}`, 'old:');
  }, 30_000);
});
