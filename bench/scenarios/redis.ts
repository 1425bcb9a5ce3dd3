/**
 * Redis scenario: decisions per second and p50/p99 per decision at fixed concurrency (C checks always in
 * flight, closed loop), on a redis-server the runner starts for the run on a free port of 127.0.0.1 (so other
 * users of the machine's Redis neither disturb nor are disturbed; it is stopped at the end). Subjects, each a
 * resident child process taken alternately round by round:
 * - sluice `consistency: strict` (createLimiter, shards 0): the checks of one event-loop turn go in one script call;
 * - rate-limiter-flexible's RateLimiterRedis on ioredis (its defaults): one script call per check;
 * - the ceiling of "one token-bucket script per check": ioredis with auto-pipelining, one EVALSHA per check of a
 *   minimal token bucket (HMGET, HSET, PEXPIRE; Redis TIME), the best a per-call design can do;
 * - what envoyproxy/ratelimit sends per check: INCRBY and EXPIRE of a fixed window's key, pipelined (ioredis
 *   auto-pipelining), no script: the cheapest per-check design there is (and not exact across a window edge);
 * - sluice `consistency: sync` (write-behind every 20 ms) and `local` (no Redis), the same checks.
 * Token bucket of 1e9 refilled 1 token/s on 10,000 keys drawn uniformly, so every check is admitted.
 *
 * A second case, over-limit: 90 % of checks on 100 hot keys of a limit of 10 a minute (exhausted in the
 * warm-up: denied), 10 % on the 10,000 admitted keys; strict against rlf, with the Redis calls per check.
 */
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createLimiter } from '../../src/index.js';
import { alternate, roundMain, startAll, startRoundChild, stopAll } from '../lib/ab.js';
import { hasRedisServer, startRedis, type OwnRedis } from '../lib/redis-server.js';
import { isChildEntry } from '../lib/harness.js';
import { cpuTicks, stealPercent } from '../lib/host.js';
import { median, percentile, summary, xorshift32 } from '../lib/measure.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';

const FILE = fileURLToPath(import.meta.url);
const KEYS = 10_000;
/**
 * Token bucket: 60 tokens a minute (1 a second) into a bucket of 1e9, so every check is admitted, and a key,
 * spent faster than it refills, stays in Redis for seconds. (With a refill as fast as 1e9 a minute a key would
 * be full again, and expire, 1 ms after each check: Redis's expiry cycle would then run all the time.)
 */
const RATE = 60;
const BURST = 1_000_000_000;
const PERIOD_MS = 60_000;

type Kind = 'strict' | 'strict1' | 'rlf' | 'evalsha' | 'envoy' | 'sync' | 'local';

/** A child's first warm-up round, ms (later levels' warm-ups: 300 ms). */
const FIRST_WARMUP_MS = 2_000;

/** The over-limit case's hot keys and their limit (10 a minute). */
const HOT_KEYS = 100;
const HOT_LIMIT = 10;

interface Spec {
  kind: Kind;
  port: number;
}

interface RoundQ {
  ms: number;
  /** Checks kept in flight. */
  concurrency: number;
  /** `over`: 90 % of checks on the hot (over-limit) keys. */
  mix?: 'all' | 'over';
}

interface RoundR {
  done: number;
  elapsedMs: number;
  /** Per-decision latency, ms (every decision of the round, up to 2^22). */
  p50: number;
  p99: number;
  degraded: number;
  denied: number;
  clientCpuMicros: number;
  /** sluice: sync merges and failed store calls during the round. */
  merges: number;
  storeErrors: number;
}

/** The ceiling's script: one token bucket, one key, Redis's clock. Returns {allowed, remaining}. */
const TOKEN_BUCKET_LUA = `
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local L, P, B, c = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local BP = B * P
local x = BP
local s = redis.call('HMGET', KEYS[1], 'x', 't')
if s[1] then
  x = tonumber(s[1])
  local last = tonumber(s[2])
  if now > last then x = math.min(BP, x + (now - last) * L) else now = last end
end
if c * P <= x then
  x = x - c * P
  redis.call('HSET', KEYS[1], 'x', string.format('%.0f', x), 't', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((BP - x) / L) + 1)
  return {1, math.floor(x / P)}
end
return {0, math.floor(x / P)}
`;

// ---------------------------------------------------------------------------------------------- child

type CheckFn = (key: string, hot: boolean) => Promise<{ degraded: boolean; allowed: boolean }>;

async function setup(s: Spec) {
  const url = `redis://127.0.0.1:${s.port}`;
  const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
  let check: CheckFn;
  let close: () => Promise<void>;
  /** After a round: wait for write-behind merges (sync), so their Redis CPU counts in this subject's round. */
  let settle: () => Promise<{ merges: number; storeErrors: number }> = async () => ({ merges: 0, storeErrors: 0 });
  if (s.kind === 'strict' || s.kind === 'strict1' || s.kind === 'sync' || s.kind === 'local') {
    // strict1: strict with one script call per turn (pipelineCalls 1), the A/B of the call split
    const mode = s.kind === 'strict1' ? 'strict' : s.kind;
    const lim = await createLimiter({
      policies: {
        bench: {
          algorithm: 'token_bucket', limit: RATE, period: PERIOD_MS, burst: BURST,
          consistency: mode, ...(mode === 'local' ? {} : { onStoreError: 'closed' as const }),
        },
        hot: {
          algorithm: 'token_bucket', limit: HOT_LIMIT, period: PERIOD_MS,
          consistency: mode, ...(mode === 'local' ? {} : { onStoreError: 'closed' as const }),
        },
      },
      shards: 0,
      maxKeys: KEYS * 2,
      // A lenient deadline: the bench measures throughput, and a decision past it would be a degraded one.
      ...(s.kind === 'local' ? {} : {
        redis: { url, prefix: `bench:${s.kind}:`, timeoutMs: 1_000, syncIntervalMs: 20, ...(s.kind === 'strict1' ? { pipelineCalls: 1 } : {}) },
      }),
    });
    check = async (key, hot) => {
      const d = await lim.check({ policy: hot ? 'hot' : 'bench', key, cost: 1 });
      return { degraded: d.degraded === true, allowed: d.allowed };
    };
    close = async () => {
      await lim.close();
    };
    settle = async () => {
      for (let i = 0; i < 100; i++) {
        const st = await lim.stats();
        if (!st.store?.sync || st.store.sync.pendingKeys === 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      const st = await lim.stats();
      return { merges: st.store?.sync?.merges ?? 0, storeErrors: st.store?.storeErrors ?? 0 };
    };
  } else if (s.kind === 'rlf') {
    const redis = new Redis(url);
    redis.on('error', () => {});
    const rl = new RateLimiterRedis({ storeClient: redis, points: BURST, duration: PERIOD_MS / 1000, keyPrefix: 'bench:rlf' });
    const rlHot = new RateLimiterRedis({ storeClient: redis, points: HOT_LIMIT, duration: PERIOD_MS / 1000, keyPrefix: 'bench:rlfhot' });
    check = async (key, hot) => {
      try {
        await (hot ? rlHot : rl).consume(key);
        return { degraded: false, allowed: true };
      } catch (e) {
        if (e instanceof Error) throw e; // a rejection that is not a RateLimiterRes: Redis failed
        return { degraded: false, allowed: false };
      }
    };
    close = async () => {
      await redis.quit();
    };
  } else if (s.kind === 'envoy') {
    // envoyproxy/ratelimit's fixed window: INCRBY the window's key, EXPIRE it, in one pipeline; admitted while
    // the count is within the limit (the over-limit case's hot keys: HOT_LIMIT)
    const redis = new Redis(url, { enableAutoPipelining: true });
    redis.on('error', () => {});
    check = async (key, hot) => {
      const w = Math.floor(Date.now() / PERIOD_MS);
      const k = `bench:envoy:${hot ? 'hot:' : ''}${key}_${w}`;
      const [count] = await Promise.all([redis.incrby(k, 1), redis.expire(k, PERIOD_MS / 1000)]);
      return { degraded: false, allowed: count <= (hot ? HOT_LIMIT : BURST) };
    };
    close = async () => {
      await redis.quit();
    };
  } else {
    const redis = new Redis(url, { enableAutoPipelining: true });
    redis.on('error', () => {});
    redis.defineCommand('tokenBucket', { numberOfKeys: 1, lua: TOKEN_BUCKET_LUA });
    const tb = (redis as unknown as { tokenBucket(k: string, ...a: number[]): Promise<[number, number]> }).tokenBucket.bind(redis);
    check = async (key) => {
      const [a] = await tb(`bench:evalsha:${key}`, RATE, PERIOD_MS, BURST, 1);
      return { degraded: false, allowed: a === 1 };
    };
    close = async () => {
      await redis.quit();
    };
  }
  // Connect and load scripts before timing.
  for (let i = 0; i < 10; i++) await check(keys[i], false);
  const hotKeys = Array.from({ length: HOT_KEYS }, (_, i) => `h${i}`);
  const next = xorshift32(0x5eed);
  const cap = 1 << 22;
  const lat = new Float64Array(cap);
  let before = await settle();
  return {
    async round(q: RoundQ): Promise<RoundR> {
      let done = 0, degraded = 0, denied = 0, n = 0;
      let running = true;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      let inFlight = 0;
      let finish!: () => void;
      const drained = new Promise<void>((r) => (finish = r));
      // Replacements are issued in the next turn (setImmediate), all at once, as a server would issue the checks
      // of the requests read in one I/O turn. Issuing them from the answer's microtask instead would, with local
      // decisions, never leave the microtask queue: timers (the sync write-behind) would starve.
      let owed = 0;
      let scheduled = false;
      const issueOwed = (): void => {
        scheduled = false;
        const k = owed;
        owed = 0;
        for (let i = 0; i < k; i++) one();
      };
      const one = (): void => {
        inFlight++;
        const start = performance.now();
        const r = next();
        const hot = q.mix === 'over' && r % 10 !== 0;
        check(hot ? hotKeys[(r >>> 4) % HOT_KEYS] : keys[r % KEYS], hot).then((d) => {
          inFlight--;
          if (running) {
            done++;
            if (n < cap) lat[n++] = performance.now() - start;
            if (d.degraded) degraded++;
            if (!d.allowed) denied++;
            owed++;
            if (!scheduled) {
              scheduled = true;
              setImmediate(issueOwed);
            }
          } else if (inFlight === 0) finish();
        }, (e: unknown) => {
          inFlight--;
          running = false;
          process.stderr.write(`redis bench ${s.kind}: ${(e as Error).message}\n`);
          if (inFlight === 0) finish();
        });
      };
      for (let i = 0; i < q.concurrency; i++) one();
      await new Promise((r) => setTimeout(r, q.ms));
      running = false;
      if (inFlight === 0) finish();
      const elapsedMs = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      await drained;
      const after = await settle();
      const merges = after.merges - before.merges, storeErrors = after.storeErrors - before.storeErrors;
      before = after;
      const sorted = lat.subarray(0, n).sort();
      return {
        done, elapsedMs, p50: percentile(sorted, 50), p99: percentile(sorted, 99), degraded, denied,
        clientCpuMicros: cpu.user + cpu.system, merges, storeErrors,
      };
    },
    close,
  };
}

if (isChildEntry(import.meta.url)) roundMain<Spec, RoundQ, RoundR>(setup);

// ---------------------------------------------------------------------------------------------- runner

const SUBJECTS: Array<{ kind: Kind; subject: string }> = [
  { kind: 'strict', subject: 'sluice strict (script calls of 16–64 checks, a turn split in 2 while fewer are in flight)' },
  { kind: 'strict1', subject: 'sluice strict, one script call per turn (pipelineCalls 1)' },
  { kind: 'rlf', subject: 'rlf RateLimiterRedis' },
  { kind: 'evalsha', subject: 'one token-bucket EVALSHA per check, auto-pipelined (ceiling)' },
  { kind: 'envoy', subject: 'envoyproxy/ratelimit-style INCRBY + EXPIRE per check, pipelined (fixed window)' },
  { kind: 'sync', subject: 'sluice sync (write-behind, 20 ms)' },
  { kind: 'local', subject: 'sluice local (no Redis)' },
];

/** The subject label of `kind`. */
function subjectOf(kind: Kind): string {
  return SUBJECTS.find((s) => s.kind === kind)!.subject;
}

export const redisScenario: Scenario = {
  name: 'redis',
  summary: 'strict vs rlf RateLimiterRedis vs one EVALSHA per check; sync vs local; decisions/s, p50/p99 at 64 and 256 in flight',
  async run(ctx: Ctx): Promise<Section[]> {
    const q = ctx.quick;
    // 3 quick rounds, so each row's median is a round's own figure: of 2 it would be their mean, and one round
    // that the host's steal (bench/lib/host.ts) halved would move it by a quarter
    const rounds = q ? 3 : 5;
    const roundMs = q ? 500 : 2_000;
    const levels = [64, 256];
    const plan: Array<{ c: number; mix: 'all' | 'over'; subs: Array<(typeof SUBJECTS)[number] & { id: string }> }> = levels.map((c) => ({
      c, mix: 'all' as const, subs: SUBJECTS.map((s) => ({ ...s, id: `redis/c${c}/${s.kind}` })).filter((s) => ctx.want(s.id)),
    }));
    // the over-limit case: strict and rlf at 64 in flight
    plan.push({ c: 64, mix: 'over', subs: SUBJECTS.filter((s) => s.kind === 'strict' || s.kind === 'rlf')
      .map((s) => ({ ...s, id: `redis/over90/${s.kind}` })).filter((s) => ctx.want(s.id)) });
    if (plan.every((p) => p.subs.length === 0)) return [];
    const method = (what: string): string => `${what} C checks always in flight (closed loop: each answer issues the next), ` +
      `keys uniform over ${KEYS.toLocaleString('en')}, token bucket of 1e9 refilled 1/s per key (every check admitted; rlf: ` +
      `1e9 points a minute), on a redis-server started for ` +
      `the run on a free port (no persistence). ${rounds} rounds of ${roundMs} ms per subject, taken alternately (rotated) ` +
      `after a warm-up round each (${FIRST_WARMUP_MS} ms for a child's first, so the JIT has compiled its hot path; 300 ms later); ` +
      'each subject a resident child process with its own connection. Medians over rounds; ' +
      'p50/p99 of every decision in a round (issue → answer), median over rounds. Redis CPU per decision from ' +
      '/proc/<pid>/task/*/schedstat (the ns the scheduler ran its threads) over the round, including, for sync, the merges still pending when it ends ' +
      '(the round waits for them). sluice: timeoutMs 1000, onStoreError closed, so a late call would show as degraded.';
    const strict: Section = {
      scenario: 'redis', id: 'redis-strict',
      title: 'Redis: strict mode vs rate-limiter-flexible\'s RateLimiterRedis vs one EVALSHA per check',
      method: method('sluice `consistency: strict` (shards 0: the checks of one event-loop turn in one script call), ' +
        'rlf RateLimiterRedis on ioredis (defaults), and the ceiling of a per-check design: one token-bucket EVALSHA per ' +
        'check through ioredis with auto-pipelining.'),
      metrics: [
        { key: 'rate', label: 'decisions/s', higherIsBetter: true },
        { key: 'p50', label: 'p50 ms', higherIsBetter: false, digits: 3 },
        { key: 'p99', label: 'p99 ms', higherIsBetter: false, digits: 3 },
        { key: 'rcpu', label: 'Redis CPU µs/decision', higherIsBetter: false },
        { key: 'calls', label: 'Redis calls/check', higherIsBetter: false, digits: 3 },
      ],
      baselines: [{ label: 'rlf', subject: subjectOf('rlf') }, { label: 'envoy', subject: subjectOf('envoy') }],
      ratioMetrics: ['rate', 'p99', 'rcpu'],
      rows: [],
      notes: [],
    };
    const over: Section = {
      scenario: 'redis', id: 'redis-over-limit',
      title: 'Redis: 90 % of checks on over-limit keys, strict vs rate-limiter-flexible',
      method: '64 checks always in flight (closed loop); 90 % of checks on 100 hot keys of a token bucket of 10 a minute ' +
        '(exhausted in the warm-up round, so denied: 1 token back every 6 s per key), 10 % on 10,000 keys of the 1e9 bucket ' +
        '(admitted). sluice strict (its over-limit cache answers the hot keys\' denials until they refill) against rlf ' +
        'RateLimiterRedis (one script call per check). Redis calls per check: script calls (INFO commandstats ' +
        'evalsha + eval + fcall) over the round ÷ checks. Same redis-server, rounds and alternation as above.',
      metrics: strict.metrics,
      baselines: [{ label: 'rlf', subject: subjectOf('rlf') }],
      ratioMetrics: ['rate', 'p99', 'rcpu', 'calls'],
      rows: [],
      notes: [],
    };
    const sync: Section = {
      scenario: 'redis', id: 'redis-sync',
      title: 'Redis: sync mode (write-behind) vs local',
      method: method('sluice `consistency: sync` (decides locally, merges deltas every 20 ms) against `local` (no Redis);'),
      metrics: strict.metrics,
      baselines: [{ label: 'local', subject: subjectOf('local') }],
      ratioMetrics: ['rate', 'p99'],
      rows: [],
      notes: [],
    };
    if (!hasRedisServer()) {
      strict.notes.push('redis-server is not installed: Redis scenario skipped (apt-get install redis-server).');
      return [strict];
    }
    let redis: OwnRedis;
    try {
      redis = await startRedis();
    } catch (e) {
      strict.notes.push(`redis failed: could not start redis-server: ${(e as Error).message.split('\n')[0]}`);
      return [strict];
    }
    ctx.progress(`redis: redis-server ${redis.version} on 127.0.0.1:${redis.port}`);
    try {
      // One resident child per subject for every level (the level is a round parameter), all started at once.
      const all = await startAll(ctx, SUBJECTS.filter((s) => plan.some((p) => p.subs.some((x) => x.kind === s.kind))), (s) => s.kind,
        (s) => startRoundChild<RoundQ, RoundR>(FILE, { kind: s.kind, port: redis.port } satisfies Spec, { setupTimeoutMs: 30_000 }),
        strict.notes);
      const calls = new Redis(redis.port, '127.0.0.1');
      calls.on('error', () => {});
      /** Commands clients sent, by kind (INFO commandstats; script-internal calls are not among these names). */
      const commandCalls = async (kind: Kind): Promise<number> => {
        const info = await calls.info('commandstats');
        const names = kind === 'envoy' ? ['incrby', 'expire'] : ['evalsha', 'eval', 'fcall'];
        return names.reduce((a, n) => a + Number(new RegExp(`cmdstat_${n}:calls=(\\d+)`).exec(info)?.[1] ?? 0), 0);
      };
      // A child's first warm-up is long enough for V8 to have compiled its hot path: in a new process the first
      // second of checks costs the client about twice the CPU of later ones (bench/tools/strict-cpu-ab.mjs, rounds
      // of 500 ms: 17.7 and 13.1 µs per strict decision, then 6.3-7.9), which a 300 ms warm-up left inside the
      // first level's rounds. Later levels reuse the warm child.
      const warmed = new Set<Kind>();
      for (const { c, mix, subs } of plan) {
        const children = all.filter((x) => subs.some((y) => y.kind === x.s.kind)).map((x) => ({ ...x, s: subs.find((y) => y.kind === x.s.kind)! }));
        if (children.length === 0) continue;
        const results = await alternate(ctx, children, rounds, (x) => x.s.id, async (x, r, warmup) => {
          if (!warmup) ctx.progress(`${x.s.id}: ${x.s.subject}, ${c} in flight (round ${r + 1}/${rounds})`);
          const r0 = redis.cpuMicros();
          const t0 = cpuTicks();
          const c0 = x.s.kind === 'sync' || x.s.kind === 'local' ? 0 : await commandCalls(x.s.kind);
          const warmMs = warmed.has(x.s.kind) ? 300 : FIRST_WARMUP_MS;
          if (warmup) warmed.add(x.s.kind);
          const res = await x.child.round({ ms: warmup ? warmMs : roundMs, concurrency: c, mix }, Math.max(roundMs, warmMs) + 30_000);
          const r1 = redis.cpuMicros();
          const steal = stealPercent(t0, cpuTicks());
          const c1 = x.s.kind === 'sync' || x.s.kind === 'local' ? 0 : await commandCalls(x.s.kind);
          if (!warmup) ctx.progress(`  ${Math.round((res.done * 1000) / res.elapsedMs)}/s, p50 ${res.p50.toFixed(3)} ms, p99 ${res.p99.toFixed(3)} ms`);
          return { ...res, redisCpu: r1 - r0, calls: c1 - c0, steal };
        }, strict.notes);
        children.forEach((x, i) => {
          const runs = results[i];
          if (runs.length === 0) return;
          const rates = runs.map((r) => (r.done * 1000) / r.elapsedMs);
          const rs = summary(rates);
          const med = (f: (r: typeof runs[number]) => number): number => median(runs.map(f).sort((a, b) => a - b));
          const degraded = runs.reduce((a, r) => a + r.degraded, 0);
          const denied = runs.reduce((a, r) => a + r.denied, 0);
          const info = [
            `client ${med((r) => r.clientCpuMicros / 1000 / r.elapsedMs).toFixed(2)} cores, Redis ${med((r) => r.redisCpu / 1000 / r.elapsedMs).toFixed(2)} cores`,
          ];
          const steals = runs.map((r) => r.steal).filter((x): x is number => x !== null);
          if (steals.length > 0) info.push(`CPU steal ${Math.min(...steals).toFixed(0)}–${Math.max(...steals).toFixed(0)} %`);
          if (degraded > 0) info.push(`${degraded} degraded`);
          const errs = runs.reduce((a, r) => a + r.storeErrors, 0);
          if (errs > 0) info.push(`${errs} failed store calls`);
          if (x.s.kind === 'sync') info.push(`${med((r) => r.merges)} merges a round`);
          if (denied > 0) info.push(`${denied} denied`);
          const row: Row = {
            id: x.s.id, case: mix === 'over' ? '90 % over limit' : `${c} in flight`, subject: x.s.subject,
            values: {
              rate: rs.median, p50: med((r) => r.p50), p99: med((r) => r.p99), rcpu: med((r) => r.redisCpu / Math.max(1, r.done)),
              // the commands of a round include those of the checks still in flight at its end: ÷ done is a hair high
              calls: med((r) => r.calls / Math.max(1, r.done)),
            },
            spread: { rate: [rs.min, rs.max] },
            info: info.join(', '),
            extra: { rates, rcpus: runs.map((r) => r.redisCpu / Math.max(1, r.done)) },
          };
          (mix === 'over' ? over : x.s.kind === 'sync' || x.s.kind === 'local' ? sync : strict).rows.push(row);
        });
      }
      calls.disconnect();
      await stopAll(all);
    } finally {
      await redis.stop();
    }
    for (const c of levels) {
      const st = strict.rows.find((r) => r.id === `redis/c${c}/strict`);
      const rl = strict.rows.find((r) => r.id === `redis/c${c}/rlf`);
      if (st && rl) {
        const ratio = st.values.rate / rl.values.rate;
        const p99 = st.values.p99 / rl.values.p99;
        const met = ratio >= 2 && p99 <= 1;
        strict.notes.push(`Target at ${c} in flight: strict ≥ 2× rlf's decisions/s at equal or lower p99. Measured ${ratio.toFixed(2)}× ` +
          `at ${p99.toFixed(2)}× its p99: ${met ? 'met' : `missed (${ratio < 2 ? `throughput ${((1 - ratio / 2) * 100).toFixed(0)}% short of 2×` : ''}` +
          `${ratio < 2 && p99 > 1 ? ', ' : ''}${p99 > 1 ? `p99 ${((p99 - 1) * 100).toFixed(0)}% higher` : ''})`}.`);
      }
    }
    for (const c of levels) {
      const st = strict.rows.find((r) => r.id === `redis/c${c}/strict`);
      const en = strict.rows.find((r) => r.id === `redis/c${c}/envoy`);
      if (st && en) {
        const cpu = st.values.rcpu / en.values.rcpu, rate = st.values.rate / en.values.rate;
        // round r of each against round r of the other (the host's speed drifts within a run): how far the
        // ratio of the medians stands from the threshold, next to the spread of the rounds
        const a = (st.extra?.rcpus ?? []) as number[], b = (en.extra?.rcpus ?? []) as number[];
        const pairs = a.slice(0, b.length).map((x, r) => x / b[r]);
        const spread = pairs.length > 1 ? ` (round by round ${Math.min(...pairs).toFixed(2)}–${Math.max(...pairs).toFixed(2)}×)` : '';
        strict.notes.push(`Target at ${c} in flight: strict within 1.5× the envoy-style baseline's Redis CPU per decision and at ≥ its ` +
          `decisions/s. Measured ${cpu.toFixed(2)}× its Redis CPU${spread} at ${rate.toFixed(2)}× its decisions/s: ${cpu <= 1.5 && rate >= 1 ? 'met' : 'missed'}.`);
      }
      if (st) strict.notes.push(`Target at ${c} in flight: Redis CPU ≤ 4 µs per decision. Measured ${st.values.rcpu.toFixed(2)} µs: ${st.values.rcpu <= 4 ? 'met' : 'missed'}.`);
    }
    {
      const st = over.rows.find((r) => r.id === 'redis/over90/strict');
      const rl = over.rows.find((r) => r.id === 'redis/over90/rlf');
      if (st && rl) {
        const ratio = st.values.rate / rl.values.rate;
        over.notes.push(`Target: strict ≥ 5× rlf's decisions/s and ≥ 10× fewer Redis calls than checks. Measured ${ratio.toFixed(2)}× ` +
          `rlf, ${st.values.calls.toFixed(3)} calls per check (${(1 / Math.max(1e-9, st.values.calls)).toFixed(1)}× fewer): ` +
          `${ratio >= 5 && st.values.calls <= 0.1 ? 'met' : 'missed'}.`);
      }
    }
    return [strict, over, sync].filter((s) => s.rows.length > 0 || s.notes.length > 0);
  },
};
