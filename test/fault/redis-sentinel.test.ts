/**
 * Redis Sentinel failover on loopback (test/helpers/sentinel.ts: a master, a replica, three sentinels with
 * down-after-milliseconds 500): a limiter given the sentinels and the master's name decides strict checks in
 * Redis and merges sync deltas into it. The master is killed (SIGKILL) under load: every check is still
 * answered, strict ones by their onStoreError rule (`open`: admitted, degraded) during the switch and by Redis
 * (not degraded) after it; sync ones locally throughout. After the switch, the new master holds every token
 * the sync policy admitted, and at least every token Redis admitted for the strict policy.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runSluice, send, spawnServe } from '../helpers/server.js';
import { createLimiter } from '../../src/index.js';
import type { Decision } from '../../src/types/decision.js';
import type { Limiter } from '../../src/types.js';
import { startSentinelSet, type SentinelSet } from '../helpers/sentinel.js';
import { connected, insideWindow, keysUnder } from '../helpers/redis.js';
import { readState } from '../helpers/state.js';
import { storeKey } from '../../src/keys/store-key.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const HOUR = 3_600_000;

describe('Redis Sentinel', () => {
  let set: SentinelSet;
  beforeAll(async () => {
    set = await startSentinelSet();
  }, 40_000);
  afterAll(async () => {
    await set?.stop();
  });

  it('sluice serve --redis-sentinel ... --redis-master NAME (or the file\'s redis: section) decides strict checks in Redis', async () => {
    const tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-sentinel-cli-'));
    try {
      const policies = 'policies:\n  s: { algorithm: fixed_window, limit: 100, period: 1h, consistency: strict, onStoreError: closed }\n';
      const plain = path.join(tmp, 'plain.yaml');
      writeFileSync(plain, policies);
      const withRedis = path.join(tmp, 'with-redis.yaml');
      writeFileSync(withRedis, `${policies}redis:\n  sentinels: [${set.sentinels.join(', ')}]\n  master: ${set.name}\n`);
      const master = set.client(await set.currentMaster());
      for (const [i, args] of [
        // a generous timeout: a first call (the script's EVAL) on a loaded machine can take more than the default 20 ms
        ['--config', plain, '--redis-sentinel', set.sentinels.join(','), '--redis-master', set.name, '--redis-prefix', 'cli-flags:', '--redis-timeout', '1000'],
        ['--config', withRedis, '--redis-prefix', 'cli-file:', '--redis-timeout', '1000'],
      ].entries()) {
        const p = await spawnServe(args);
        try {
          const url = `http://127.0.0.1:${p.port}`;
          const deadline = Date.now() + 10_000;
          while ((await send(`${url}/readyz`)).json.store !== 'connected') {
            if (Date.now() > deadline) throw new Error('not connected to the sentinels\' master');
            await sleep(50);
          }
          const d = (await send(`${url}/v1/check?policy=s&key=k`)).json;
          expect(d).toMatchObject({ allowed: true, remaining: 99 });
          expect(d.degraded).toBeUndefined();
          expect(await keysUnder(master, i === 0 ? 'cli-flags:{' : 'cli-file:{')).toHaveLength(1);
          // no admin port: the status page's JSON is on the public port, with the store's state
          expect((await send(`${url}/v1/status`)).json.store).toMatchObject({ status: 'connected', breaker: 'closed' });
        } finally {
          await p.kill();
        }
      }
      // a wrong command line is a usage error: exit 2, the message, then serve's usage
      const bad = async (args: string[], env: NodeJS.ProcessEnv = {}, code = 2): Promise<string> => {
        const r = await runSluice(['serve', '--config', plain, '--host', '127.0.0.1', '--port', '0', ...args], { env });
        expect(r.code).toBe(code);
        return r.stderr.split('\n')[0];
      };
      expect(await bad(['--redis-sentinel', set.sentinels[0]])).toBe('sluice serve: --redis-sentinel: needs --redis-master NAME (or REDIS_MASTER, or redis.master): the name the sentinels monitor');
      expect(await bad(['--redis-master', set.name])).toBe('sluice serve: --redis-master: needs --redis-sentinel host:port,... (or REDIS_SENTINELS, or redis.sentinels)');
      expect(await bad(['--redis-sentinel', set.sentinels[0], '--redis-master', set.name, '--redis', 'redis://127.0.0.1:1'])).toBe('sluice serve: --redis-sentinel and --redis / --redis-cluster: give one');
      expect(await bad([], { REDIS_SENTINELS: set.sentinels[0], REDIS_MASTER: set.name, REDIS_URL: 'redis://127.0.0.1:1' })).toBe('sluice serve: REDIS_SENTINELS and REDIS_URL / REDIS_CLUSTER_NODES: set one');
      expect(await bad(['--redis-sentinel', 'nope', '--redis-master', set.name], {}, 1)).toMatch(/redis\.sentinel\.sentinels.*each node must be host:port/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 60_000);

  it('kill the master under load: answered by the rule during the switch, by Redis after it; no sync token lost', async () => {
    const limiter: Limiter = await createLimiter({
      policies: {
        strict: { algorithm: 'fixed_window', limit: 1_000_000, period: HOUR, consistency: 'strict', onStoreError: 'open' },
        sync: { algorithm: 'fixed_window', limit: 1_000_000, period: HOUR, consistency: 'sync' },
      },
      redis: { sentinel: { sentinels: set.sentinels, name: set.name }, prefix: 'sentinel-test:', timeoutMs: 500, syncIntervalMs: 20 },
    });
    let closed = false;
    try {
      await connected(limiter);
      // the strict window must not roll over during the test (Redis's clock decides)
      await insideWindow(set.client(set.masterPort), HOUR, 120_000);
      type Seen = { phase: 'before' | 'switch' | 'after'; strict: Decision; sync: Decision };
      const seen: Seen[] = [];
      let phase: Seen['phase'] = 'before';
      let stop = false;
      let failures = 0;
      const load = (async () => {
        while (!stop) {
          const at = phase;
          try {
            const [strict, sync] = await Promise.all([
              limiter.check({ policy: 'strict', key: 'k', cost: 1 }),
              limiter.check({ policy: 'sync', key: 'k', cost: 1 }),
            ]);
            // a pair issued before the kill but answered after it began met the switch (the 41st pair, in flight
            // when the 40th was seen, is killed under): it counts there, not before
            seen.push({ phase: at === 'before' && phase !== 'before' ? 'switch' : at, strict, sync });
          } catch {
            failures++;
          }
          await sleep(5);
        }
      })();
      while (seen.length < 40) await sleep(10);
      phase = 'switch';
      const killedAt = Date.now();
      await set.killMaster();
      await set.promoted();
      const promotedMs = Date.now() - killedAt;
      // after the sentinels switched: wait for 20 strict decisions in a row made by Redis
      phase = 'after';
      const deadline = Date.now() + 15_000;
      let byRedisAfterMs: number | undefined;
      for (;;) {
        const after = seen.filter((s) => s.phase === 'after');
        const tail = after.slice(-20);
        if (tail.length === 20 && tail.every((s) => s.strict.degraded !== true)) break;
        if (after.some((s) => s.strict.degraded !== true)) byRedisAfterMs ??= Date.now() - killedAt;
        if (Date.now() > deadline) throw new Error(`strict checks not decided by Redis 15 s after the failover (${after.length} after)`);
        await sleep(20);
      }
      stop = true;
      await load;
      expect(failures).toBe(0);
      expect(await set.currentMaster()).toBe(set.replicaPort);
      const before = seen.filter((s) => s.phase === 'before');
      const during = seen.filter((s) => s.phase === 'switch');
      expect(before.filter((s) => !s.strict.allowed || s.strict.degraded === true)).toStrictEqual([]);
      // during the switch: some strict checks met the dead master and were answered by onStoreError open
      const degraded = seen.filter((s) => s.strict.degraded === true);
      expect(degraded.length).toBeGreaterThan(0);
      expect(degraded.filter((s) => !s.strict.allowed || s.strict.remaining !== 0)).toStrictEqual([]);
      expect(during.length).toBeGreaterThan(0);
      // sync checks are local: all admitted, none degraded
      expect(seen.filter((s) => !s.sync.allowed || s.sync.degraded === true)).toStrictEqual([]);

      const byRedis = seen.filter((s) => s.strict.degraded !== true).length;
      await limiter.close(); // merges the sync deltas still pending
      closed = true;
      const master = set.client(set.replicaPort);
      const version = (name: string): string => limiter.policies.get(name)!.version;
      const syncCount = Number((await readState(master, storeKey('sentinel-test:', 'sync', version('sync'), 'k', 0)))!.split(' ')[0]);
      const strictCount = Number((await readState(master, storeKey('sentinel-test:', 'strict', version('strict'), 'k', 0)))!.split(' ')[0]);
      expect(syncCount).toBe(seen.length); // every admitted sync token is in the new master
      // every token Redis admitted is counted (a call that timed out may have counted one more than it answered)
      expect(strictCount).toBeGreaterThanOrEqual(byRedis);
      expect(strictCount).toBeLessThanOrEqual(seen.length);
      expect(await keysUnder(master, 'sentinel-test:{')).toHaveLength(2);
      console.log(`sentinel failover: promoted ${promotedMs} ms after the kill, strict checks decided by Redis again within ${byRedisAfterMs ?? promotedMs} ms; ${seen.length} check pairs (${before.length} before the kill, ${during.length} during the switch, ${seen.length - before.length - during.length} after); ${degraded.length} strict decided by onStoreError; Redis counts strict ${strictCount} (answered by Redis ${byRedis}), sync ${syncCount}`);
    } finally {
      if (!closed) await limiter.close();
    }
  }, 60_000 + 120_000); // and insideWindow's longest wait
});

describe('Redis Sentinel: a manual failover (the old master stays up, demoted to a replica)', () => {
  let set: SentinelSet;
  beforeAll(async () => {
    set = await startSentinelSet('sluice-manual');
  }, 40_000);
  afterAll(async () => {
    await set?.stop();
  });

  it('follows the promoted replica: strict checks are decided by the new master', async () => {
    const limiter = await createLimiter({
      policies: { strict: { algorithm: 'fixed_window', limit: 1_000_000, period: HOUR, consistency: 'strict', onStoreError: 'closed' } },
      redis: { sentinel: { sentinels: set.sentinels, name: set.name }, prefix: 'manual:', timeoutMs: 500 },
    });
    try {
      await connected(limiter);
      await insideWindow(set.client(set.masterPort), HOUR, 60_000);
      for (let i = 0; i < 5; i++) expect((await limiter.check({ policy: 'strict', key: 'k', cost: 1 })).degraded).toBeUndefined();
      await set.client(Number(set.sentinels[0].split(':')[1])).call('SENTINEL', 'FAILOVER', set.name);
      await set.promoted();
      const key = storeKey('manual:', 'strict', limiter.policies.get('strict')!.version, 'k', 0);
      const newMaster = set.client(set.replicaPort);
      const switchedAt = Date.now();
      const deadline = Date.now() + 10_000; // the old master stays writable ~10 s: following it that long fails
      let degraded = 0;
      for (;;) {
        const d = await limiter.check({ policy: 'strict', key: 'k', cost: 1 });
        if (d.degraded === true) degraded++;
        else if (Number((await readState(newMaster, key))!.split(' ')[0]) > 5) break;
        if (Date.now() > deadline) throw new Error(`strict checks not decided by the new master 10 s after the failover: ${JSON.stringify(d)} ${JSON.stringify((await limiter.stats()).store)} ${await readState(newMaster, key)}`);
        await sleep(10);
      }
      // from then on the old master (writable until the sentinels reconfigure it, ~10 s) gets nothing more:
      // a few checks between the promotion and the +switch-master announcement may have gone to it
      const count = async (c: ReturnType<SentinelSet['client']>): Promise<number> => Number((await readState(c, key))!.split(' ')[0]);
      const oldBefore = await count(set.client(set.masterPort));
      const newBefore = await count(newMaster);
      for (let i = 0; i < 20; i++) expect((await limiter.check({ policy: 'strict', key: 'k', cost: 1 })).degraded).toBeUndefined();
      expect(await count(set.client(set.masterPort))).toBe(oldBefore);
      expect(await count(newMaster)).toBe(newBefore + 20);
      console.log(`sentinel manual failover: decided by the new master ${Date.now() - switchedAt} ms after the sentinels reported it; ${degraded} strict checks decided by onStoreError (closed) during the switch`);
    } finally {
      await limiter.close();
    }
  }, 60_000 + 60_000); // and insideWindow's longest wait
});
