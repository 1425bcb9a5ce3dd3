/**
 * Case 06: Redis forgets its scripts (FUNCTION FLUSH, SCRIPT FLUSH, a restart without persistence). Strict
 * checks carry on with no error reaching the caller, with the right counts, and each connection reloads the
 * check library once (FCALL → "Function not found" → one FUNCTION LOAD, then the call again), with no retry
 * loop: watched with MONITOR. SCRIPT FLUSH does not touch a Function library: nothing is reloaded.
 *
 * Policy fixed_window, limit 5, period 1 h, Redis's clock; the test starts at least 30 s before the end of the
 * hour on Redis's clock (it takes a few seconds), so every step falls in one window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { startServer, type SluiceServer } from '../../src/server/http.js';
import { startRedis, type TestRedis, redisNow, insideWindow, connected } from '../helpers/redis.js';
import { send } from '../helpers/server.js';

type Policies = Parameters<typeof createLimiter>[0]['policies'];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const HOUR = 3_600_000;




function brief(d: Decision): string {
  return `${d.allowed ? 'allow' : 'deny'} r=${d.remaining}${d.degraded ? ' degraded' : ''}`;
}

/** Script commands Redis receives, per client connection (MONITOR). */
class ScriptWatch {
  private mon: Redis | undefined;
  /** command (evalsha, eval, script, fcall, 'function load', 'function flush'…) → source address → count */
  counts = new Map<string, Map<string, number>>();

  async start(client: Redis): Promise<void> {
    // ioredis switches a connection to monitor mode only once MONITOR's +OK has been handled (a microtask later):
    // a line of the stream that comes in the same read as the +OK finds no command waiting and fails monitor()
    // with "Command queue state error". That race is ioredis's, not Redis's: take a new connection and retry
    for (let attempt = 1; ; attempt++) {
      // client.monitor(), but with the connection in hand to close when it fails
      const mon = client.duplicate({ monitor: true, lazyConnect: false });
      try {
        await new Promise((resolve, reject) => {
          mon.once('monitoring', resolve);
          mon.once('error', reject);
        });
        this.mon = mon;
        break;
      } catch (e) {
        mon.disconnect();
        if (attempt === 5 || !String((e as Error).message).includes('Command queue state error')) throw e;
      }
    }
    this.mon.on('error', () => undefined);
    this.mon.on('monitor', (_time: string, args: string[], source: string) => {
      let cmd = String(args[0]).toLowerCase();
      if (cmd === 'function') cmd = `function ${String(args[1]).toLowerCase()}`;
      else if (cmd !== 'eval' && cmd !== 'evalsha' && cmd !== 'script' && cmd !== 'fcall') return;
      if (source === 'lua') return;
      const per = this.counts.get(cmd) ?? new Map<string, number>();
      per.set(source, (per.get(source) ?? 0) + 1);
      this.counts.set(cmd, per);
    });
    // MONITOR only reports what arrives after it is active: let it settle
    await sleep(50);
  }

  reset(): void {
    this.counts.clear();
  }

  /** EVAL commands per connection since the last reset. */
  evals(): number[] {
    return [...(this.counts.get('eval')?.values() ?? [])];
  }

  /** FUNCTION LOAD commands per connection since the last reset. */
  loads(): number[] {
    return [...(this.counts.get('function load')?.values() ?? [])];
  }

  total(cmd: string): number {
    return [...(this.counts.get(cmd)?.values() ?? [])].reduce((a, b) => a + b, 0);
  }

  stop(): void {
    this.mon?.disconnect();
    this.mon = undefined;
  }
}

describe('case 06: the script cache is lost', () => {
  let r: TestRedis;
  const limiters: Limiter[] = [];
  let server: SluiceServer | undefined;
  const watch = new ScriptWatch();

  const policies = {
    p: { algorithm: 'fixed_window', limit: 5, period: HOUR, consistency: 'strict', onStoreError: 'closed' },
  } as unknown as Policies;

  async function limiter(): Promise<Limiter> {
    // timeout well above the machine's noise: this test is about the script cache, not about timeouts
    const l = await createLimiter({ policies, maxKeys: 1024, redis: { url: r.url, timeoutMs: 500 } });
    limiters.push(l);
    await connected(l);
    return l;
  }

  beforeAll(async () => {
    r = await startRedis();
  });
  afterAll(async () => {
    watch.stop();
    await server?.close();
    await Promise.all(limiters.map((l) => l.close()));
    await r?.stop();
  });

  it('FUNCTION FLUSH, SCRIPT FLUSH, restart without persistence, flush under 50 concurrent checks: right counts, no error, one FUNCTION LOAD per connection', async () => {
    const main = await limiter();
    server = await startServer({ limiter: main, host: '127.0.0.1', port: 0 });
    const url = `http://127.0.0.1:${server.port}`;
    await insideWindow(r.client, HOUR, 30_000);
    const check = (key = 'k'): Promise<Decision> => main.check({ policy: 'p', key, cost: 1 });

    // 1. two checks
    expect(brief(await check())).toBe('allow r=4');
    expect(brief(await check())).toBe('allow r=3');

    // 2. the script cache is flushed: the library is not in it, so nothing is reloaded
    await watch.start(r.client);
    await r.client.script('FLUSH');
    expect(brief(await check())).toBe('allow r=2');
    await sleep(50);
    expect([watch.loads(), watch.evals(), watch.total('fcall')], 'FUNCTION LOADs, EVALs, FCALLs').toStrictEqual([[], [], 1]);
    watch.reset();

    // the library is flushed (data intact): state kept, no error, no 5xx from the HTTP front
    await r.client.call('FUNCTION', 'FLUSH');
    const http = await send(`${url}/v1/check?policy=p&key=k&cost=1`);
    expect(http.status).toBe(200);
    expect(http.json).toMatchObject({ allowed: true, remaining: 1 });
    expect(http.json.degraded).toBeUndefined();
    expect(http.json.degradedBy).toBeUndefined();
    expect(http.headers.get('sluice-degraded'), 'decided by Redis: no Sluice-Degraded header').toBeNull();
    expect([brief(await check()), brief(await check())]).toStrictEqual(['allow r=0', 'deny r=0']);
    await sleep(50);
    expect(watch.loads(), 'one FUNCTION LOAD on the one connection after the flush').toStrictEqual([1]);
    expect(watch.total('fcall'), 'the call that failed, its retry, then one per later call').toBe(4);
    expect(watch.evals(), 'no EVAL').toStrictEqual([]);
    watch.stop();

    // 3. restart without persistence: fresh state, no error
    await r.restart();
    await connected(main);
    expect(brief(await check())).toBe('allow r=4');

    // 4. flush again, then 50 concurrent checks (one turn: one script call): exactly 4 admitted
    await watch.start(r.client);
    watch.reset();
    await r.client.call('FUNCTION', 'FLUSH');
    const burst = await Promise.allSettled(Array.from({ length: 50 }, () => check()));
    const answers = burst.map((x) => (x.status === 'fulfilled' ? x.value : null));
    expect(answers.filter((d) => d === null).length, 'no error reaches the caller').toBe(0);
    expect(answers.filter((d) => d!.degraded).length, 'none decided by the failure rule').toBe(0);
    expect(answers.filter((d) => d!.allowed).length).toBe(4);
    expect(answers.filter((d) => !d!.allowed).length).toBe(46);
    expect(answers.filter((d) => d!.allowed).map((d) => d!.remaining)).toStrictEqual([3, 2, 1, 0]);
    // the 50 went as 2 calls in flight at once (pipelineCalls 2, the default: a turn split in two), both
    // answered "Function not found": the library is loaded once, not once per failed call
    await sleep(50);
    expect([watch.loads(), watch.total('fcall')], 'FUNCTION LOADs per connection, FCALLs').toStrictEqual([[1], 4]);

    // 5. the same across five connections (five limiters, 10 concurrent checks each, fresh key k2): exactly 5
    // admitted, and each connection reloads the script at most once
    const others = await Promise.all(Array.from({ length: 5 }, () => limiter()));
    await Promise.all(others.map((l) => l.check({ policy: 'p', key: 'warm', cost: 0 }))); // every connection has run the script
    await sleep(50);
    watch.reset();
    await r.client.call('FUNCTION', 'FLUSH');
    const spread = await Promise.allSettled(others.flatMap((l) => Array.from({ length: 10 }, () => l.check({ policy: 'p', key: 'k2', cost: 1 }))));
    const got = spread.map((x) => (x.status === 'fulfilled' ? x.value : null));
    expect(got.filter((d) => d === null || d.degraded).length).toBe(0);
    expect(got.filter((d) => d!.allowed).length).toBe(5);
    await sleep(50);
    const loads = watch.loads();
    expect(loads.length, `FUNCTION LOADs per connection: ${JSON.stringify(loads)}`).toBe(5);
    expect(loads.every((n) => n === 1), `FUNCTION LOADs per connection: ${JSON.stringify(loads)}`).toBe(true);
    expect(watch.total('script') + watch.total('eval'), 'no SCRIPT LOAD or EVAL').toBe(0);
    watch.stop();

    // the failures above (none) and the breaker
    const stats = (await main.stats()).store!;
    expect(stats.breaker).toBe('closed');
  }, 30_000 + 30_000); // and insideWindow's longest wait

  it('a Redis that refuses FUNCTION LOAD (an ACL without @scripting\'s FUNCTION): the script goes by EVAL, then EVALSHA, with exact counts', async () => {
    await r.client.call('ACL', 'SETUSER', 'nofn', 'on', '>pw', '~*', '&*', '+@all', '-function');
    // MONITOR started while nothing else talks to Redis (ioredis's monitor mode can miss the start of a busy stream)
    await watch.start(r.client);
    const l = await createLimiter({ policies, maxKeys: 1024, redis: { url: `redis://nofn:pw@127.0.0.1:${r.port}`, timeoutMs: 500, prefix: 'nofn:' } });
    limiters.push(l);
    await connected(l);
    await sleep(50);
    watch.reset();
    const got: string[] = [];
    for (let i = 0; i < 7; i++) got.push(brief(await l.check({ policy: 'p', key: 'acl', cost: 1 })));
    expect(got).toStrictEqual(['allow r=4', 'allow r=3', 'allow r=2', 'allow r=1', 'allow r=0', 'deny r=0', 'deny r=0']);
    await sleep(50);
    // the first FCALL (sent behind the refused FUNCTION LOAD) found no function: sent again as EVAL, then by
    // hash for the other admissions (4); the denials come from the over-limit cache (the last admission left 0)
    expect([watch.loads(), watch.evals(), watch.total('evalsha'), watch.total('fcall')]).toStrictEqual([[], [1], 4, 1]);
    watch.stop();
    expect((await l.stats()).store!.breaker).toBe('closed');
  }, 30_000);
});
