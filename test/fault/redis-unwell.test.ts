/**
 * Redis errors that say Redis is unwell count toward the circuit breaker; a bad key's error does not.
 *
 * - Out of memory (`maxmemory 1`, noeviction): the check script's write is refused (OOM). Each check takes
 *   its rule (closed: a degraded denial), the failures are counted as `unavailable`, and the breaker opens;
 *   once memory is back, Redis decides again.
 * - Out of memory while no check comes: the breaker's idle probe (a write, refused as the checks are) keeps it
 *   open; once memory is back, the next probe closes it.
 * - One key holding a list where a state belongs: that key's checks take their rule (a script error each),
 *   the breaker stays closed and every other key is decided by Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../src/index.js';
import { startRedis, type TestRedis, connected, keysUnder } from '../helpers/redis.js';
import { sleep } from '../helpers/clock.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

describe('Redis unwell vs one bad key', () => {
  let r: TestRedis;
  let limiter: Limiter;
  const check = (key: string) => limiter.check({ policy: 'p', key, cost: 1 });

  beforeAll(async () => {
    r = await startRedis();
    limiter = await createLimiter({
      policies: { p: { algorithm: 'token_bucket', limit: 100, period: 60_000, consistency: 'strict', onStoreError: 'closed' } } as unknown as Policies,
      maxKeys: 1024,
      redis: { url: r.url, prefix: 'unwell:', timeoutMs: 500, breaker: { resetMs: 200, maxResetMs: 400 } },
    });
    await connected(limiter);
  });
  afterAll(async () => {
    await limiter?.close();
    await r?.stop();
  });

  it('OOM: degraded denials by the rule, counted as unavailable, the breaker opens; then Redis decides again', async () => {
    expect(await check('a')).toMatchObject({ allowed: true, remaining: 99 });
    await r.client.config('SET', 'maxmemory', '1');
    const ds = [];
    for (let i = 0; i < 10; i++) ds.push(await check(`oom${i}`));
    expect(ds.every((d) => !d.allowed && d.degraded === true && d.degradedBy === 'closed')).toBe(true);
    const s = (await limiter.stats()).store!;
    // the breaker opened after the first few refusals (50 % of its window, 5 calls, the one success included)
    expect(s.unavailable, JSON.stringify(s)).toBeGreaterThanOrEqual(4);
    expect(s.unavailable + s.breakerRejections, JSON.stringify(s)).toBe(10);
    expect(s.scriptErrors).toBe(0);
    expect(s.breaker).toBe('open');
    await r.client.config('SET', 'maxmemory', '0');
    let last = await check('a');
    for (let i = 0; i < 30 && last.degraded === true; i++) {
      await new Promise((res) => setTimeout(res, 100));
      last = await check('a');
    }
    expect(last).toMatchObject({ allowed: true, remaining: 98 });
    expect(last.degraded).toBeUndefined();
  });

  it('idle while out of memory: the breaker\'s probe is refused as checks are, so it stays open; idle once memory is back, it closes', async () => {
    const rejectedSets = async (): Promise<number> => Number(/cmdstat_set:.*rejected_calls=(\d+)/.exec(await r.client.info('commandstats'))?.[1] ?? 0);
    await r.client.config('SET', 'maxmemory', '1');
    for (let i = 0; i < 10; i++) await check(`idle${i}`);
    expect((await limiter.stats()).store!.breaker).toBe('open');
    const refused = await rejectedSets();
    // idle: a probe every 200-400 ms (±25 %), each a SET XX that writes nothing and that Redis refuses (OOM),
    // as it refuses the check script; a PING here was answered and closed the breaker
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      await sleep(100);
      seen.add((await limiter.stats()).store!.breaker);
    }
    expect(seen.has('closed')).toBe(false);
    expect(await rejectedSets() - refused).toBeGreaterThanOrEqual(2);
    expect(await r.client.exists('unwell:breaker-probe')).toBe(0);
    // memory back, still idle: the next probe closes it
    await r.client.config('SET', 'maxmemory', '0');
    let state = (await limiter.stats()).store!.breaker;
    for (let i = 0; i < 40 && state !== 'closed'; i++) {
      await sleep(100);
      state = (await limiter.stats()).store!.breaker;
    }
    expect(state).toBe('closed');
    expect(await r.client.exists('unwell:breaker-probe')).toBe(0);
    expect(await check('after-idle')).toMatchObject({ allowed: true, remaining: 99 });
  });

  it('a key holding a list: its checks take the rule as script errors; the breaker stays closed; other keys are decided', async () => {
    expect(await check('bad')).toMatchObject({ allowed: true });
    const [name] = (await keysUnder(r.client, 'unwell:')).filter((k) => k.includes(':bad}'));
    expect(name).toBeDefined();
    await r.client.del(name);
    await r.client.lpush(name, 'x');
    const before = (await limiter.stats()).store!;
    for (let i = 0; i < 20; i++) {
      const bad = await check('bad');
      expect(bad).toMatchObject({ allowed: false, degraded: true, degradedBy: 'closed' });
      expect((await check(`good${i}`)).degraded).toBeUndefined();
    }
    const after = (await limiter.stats()).store!;
    expect(after.scriptErrors - before.scriptErrors).toBe(20);
    expect(after.unavailable - before.unavailable).toBe(0);
    expect(after.breaker).toBe('closed');
  });
});
