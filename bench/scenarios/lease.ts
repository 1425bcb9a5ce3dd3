/**
 * Lease scenario (issue #14): decisions per second and p50/p99 per decision at 64 checks in flight (closed
 * loop), and Redis calls per 1,000 decisions, on a redis-server the runner starts for the run. Subjects, each a
 * resident child process (createLimiter, shards 0), taken alternately round by round:
 * - sluice `consistency: lease`: decided on the front thread from leased tokens;
 * - sluice `consistency: strict`: script calls of up to 64 checks;
 * - sluice `local` (no Redis): the ceiling.
 * Cases: one hot key (every check on it), and cold keys (uniform over 100,000: a key is seen every few seconds,
 * so its lease has gone back to Redis by then: the figures are as they come). Token bucket of 1e9 refilled
 * 1 token/s, so every check is admitted.
 */
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createLimiter } from '../../src/index.js';
import { alternate, roundMain, startAll, startRoundChild, stopAll } from '../lib/ab.js';
import { isChildEntry } from '../lib/harness.js';
import { median, percentile, summary, xorshift32 } from '../lib/measure.js';
import type { Ctx, Row, Scenario, Section } from '../lib/types.js';
import { hasRedisServer, startRedis, type OwnRedis } from '../lib/redis-server.js';

const FILE = fileURLToPath(import.meta.url);
const COLD_KEYS = 100_000;
const CONCURRENCY = 64;

type Kind = 'lease' | 'strict' | 'local';
interface Spec { kind: Kind; port: number }
interface RoundQ { ms: number; mix: 'hot' | 'cold' }
interface RoundR { done: number; elapsedMs: number; p50: number; p99: number; denied: number; degraded: number }

async function setup(s: Spec) {
  const lim = await createLimiter({
    policies: {
      bench: {
        algorithm: 'token_bucket', limit: 60, period: 60_000, burst: 1_000_000_000, consistency: s.kind,
        ...(s.kind === 'local' ? {} : { onStoreError: 'closed' as const }),
      },
    },
    shards: 0,
    maxKeys: COLD_KEYS * 2,
    ...(s.kind === 'local' ? {} : { redis: { url: `redis://127.0.0.1:${s.port}`, prefix: `bench:${s.kind}:`, timeoutMs: 1_000 } }),
  });
  const keys = Array.from({ length: COLD_KEYS }, (_, i) => `k${i}`);
  for (let i = 0; i < 10; i++) await lim.check({ policy: 'bench', key: keys[i], cost: 1 });
  const next = xorshift32(0x1ea5e);
  const cap = 1 << 22;
  const lat = new Float64Array(cap);
  return {
    async round(q: RoundQ): Promise<RoundR> {
      let done = 0, n = 0, denied = 0, degraded = 0;
      let running = true;
      let inFlight = 0;
      let finish!: () => void;
      const drained = new Promise<void>((r) => (finish = r));
      let owed = 0;
      let scheduled = false;
      // replacements go out in the next turn, all at once (as a server issues the checks of one I/O turn)
      const issueOwed = (): void => {
        scheduled = false;
        const k = owed;
        owed = 0;
        for (let i = 0; i < k; i++) one();
      };
      const one = (): void => {
        inFlight++;
        const start = performance.now();
        const key = q.mix === 'hot' ? 'hot' : keys[next() % COLD_KEYS];
        lim.check({ policy: 'bench', key, cost: 1 }).then((d) => {
          inFlight--;
          if (running) {
            done++;
            if (n < cap) lat[n++] = performance.now() - start;
            if (!d.allowed) denied++;
            if (d.degraded) degraded++;
            owed++;
            if (!scheduled) {
              scheduled = true;
              setImmediate(issueOwed);
            }
          } else if (inFlight === 0) finish();
        }, (e: unknown) => {
          inFlight--;
          running = false;
          process.stderr.write(`lease bench ${s.kind}: ${(e as Error).message}\n`);
          if (inFlight === 0) finish();
        });
      };
      const t0 = performance.now();
      for (let i = 0; i < CONCURRENCY; i++) one();
      await new Promise((r) => setTimeout(r, q.ms));
      running = false;
      if (inFlight === 0) finish();
      const elapsedMs = performance.now() - t0;
      await drained;
      const sorted = lat.subarray(0, n).sort();
      return { done, elapsedMs, p50: percentile(sorted, 50), p99: percentile(sorted, 99), denied, degraded };
    },
    close: () => lim.close(),
  };
}

if (isChildEntry(import.meta.url)) roundMain<Spec, RoundQ, RoundR>(setup);

const SUBJECTS: Array<{ kind: Kind; subject: string }> = [
  { kind: 'lease', subject: 'sluice lease (decided from leased tokens)' },
  { kind: 'strict', subject: 'sluice strict (script calls of ≤ 64 checks)' },
  { kind: 'local', subject: 'sluice local (no Redis)' },
];

export const leaseScenario: Scenario = {
  name: 'lease',
  summary: 'lease vs strict vs local: decisions/s, p50/p99 at 64 in flight, Redis calls per 1,000 decisions; a hot key and 100,000 cold keys',
  async run(ctx: Ctx): Promise<Section[]> {
    const rounds = ctx.quick ? 2 : 5;
    const roundMs = ctx.quick ? 500 : 2_000;
    const mixes = ['hot', 'cold'] as const;
    const plan = mixes.map((mix) => ({ mix, subs: SUBJECTS.map((s) => ({ ...s, id: `lease/${mix}/${s.kind}` })).filter((s) => ctx.want(s.id)) }));
    if (plan.every((p) => p.subs.length === 0)) return [];
    const section: Section = {
      scenario: 'lease', id: 'lease',
      title: 'Lease mode vs strict vs local (64 in flight)',
      method: `${CONCURRENCY} checks always in flight (closed loop: each answer issues the next, in the next turn), shards 0, ` +
        'a token bucket of 1e9 refilled 1/s (every check admitted); hot: every check on one key; cold: keys uniform over ' +
        `${COLD_KEYS.toLocaleString('en')}. ${rounds} rounds of ${roundMs} ms per subject, taken alternately after a warm-up ` +
        'round each; each subject a resident child process. Medians over rounds. Redis calls: INFO commandstats (evalsha + eval + fcall) ' +
        'over the round, per 1,000 decisions. lease defaults: ttlMs 2000, idleMs 1000, maxShare 0.25.',
      metrics: [
        { key: 'rate', label: 'decisions/s', higherIsBetter: true },
        { key: 'p50', label: 'p50 ms', higherIsBetter: false, digits: 3 },
        { key: 'p99', label: 'p99 ms', higherIsBetter: false, digits: 3 },
        { key: 'calls', label: 'Redis calls/1,000 decisions', higherIsBetter: false, digits: 2 },
      ],
      baselines: [{ label: 'local', subject: SUBJECTS[2].subject }, { label: 'strict', subject: SUBJECTS[1].subject }],
      ratioMetrics: ['rate', 'p99'],
      rows: [],
      notes: [],
    };
    if (!hasRedisServer()) {
      section.notes.push('redis-server is not installed: lease scenario skipped.');
      return [section];
    }
    let redis: OwnRedis;
    try {
      redis = await startRedis();
    } catch (e) {
      section.notes.push(`redis failed: ${(e as Error).message.split('\n')[0]}`);
      return [section];
    }
    try {
      const all = await startAll(ctx, SUBJECTS.filter((s) => plan.some((p) => p.subs.some((x) => x.kind === s.kind))), (s) => s.kind,
        (s) => startRoundChild<RoundQ, RoundR>(FILE, { kind: s.kind, port: redis.port } satisfies Spec, { setupTimeoutMs: 30_000 }),
        section.notes);
      const info = new Redis(redis.port, '127.0.0.1');
      info.on('error', () => {});
      const scriptCalls = async (): Promise<number> => {
        const text = await info.info('commandstats');
        // the strict subject calls its script as a Redis Function (FCALL): counted with the scripts
        return ['evalsha', 'eval', 'fcall'].reduce((a, n) => a + Number(new RegExp(`cmdstat_${n}:calls=(\\d+)`).exec(text)?.[1] ?? 0), 0);
      };
      for (const { mix, subs } of plan) {
        const children = all.filter((x) => subs.some((y) => y.kind === x.s.kind)).map((x) => ({ ...x, s: subs.find((y) => y.kind === x.s.kind)! }));
        if (children.length === 0) continue;
        const results = await alternate(ctx, children, rounds, (x) => x.s.id, async (x, r, warmup) => {
          if (!warmup) ctx.progress(`${x.s.id}: ${x.s.subject}, ${mix} (round ${r + 1}/${rounds})`);
          const c0 = await scriptCalls();
          const res = await x.child.round({ ms: warmup ? 300 : roundMs, mix }, roundMs + 30_000);
          const c1 = await scriptCalls();
          return { ...res, calls: c1 - c0 };
        }, section.notes);
        children.forEach((x, i) => {
          const runs = results[i];
          if (runs.length === 0) return;
          const rates = runs.map((r) => (r.done * 1000) / r.elapsedMs);
          const rs = summary(rates);
          const med = (f: (r: typeof runs[number]) => number): number => median(runs.map(f).sort((a, b) => a - b));
          const denied = runs.reduce((a, r) => a + r.denied, 0), degraded = runs.reduce((a, r) => a + r.degraded, 0);
          const row: Row = {
            id: x.s.id, case: mix === 'hot' ? 'one hot key' : `cold: ${COLD_KEYS.toLocaleString('en')} keys`, subject: x.s.subject,
            values: { rate: rs.median, p50: med((r) => r.p50), p99: med((r) => r.p99), calls: med((r) => (1000 * r.calls) / Math.max(1, r.done)) },
            spread: { rate: [rs.min, rs.max] },
            info: [denied > 0 ? `${denied} denied` : '', degraded > 0 ? `${degraded} degraded` : ''].filter(Boolean).join(', '),
            extra: { rates },
          };
          section.rows.push(row);
        });
      }
      info.disconnect();
      await stopAll(all);
    } finally {
      await redis.stop();
    }
    const row = (id: string): Row | undefined => section.rows.find((r) => r.id === id);
    const le = row('lease/hot/lease'), lo = row('lease/hot/local'), st = row('lease/hot/strict');
    if (le && lo && st) {
      const vsLocal = le.values.rate / lo.values.rate, vsStrict = le.values.rate / st.values.rate;
      const met = vsLocal >= 0.5 && vsStrict >= 10 && le.values.calls <= 20;
      section.notes.push(`Target (hot key, 64 in flight): lease ≥ 0.5× local and ≥ 10× strict decisions/s, ≤ 20 Redis calls per 1,000 ` +
        `decisions. Measured ${vsLocal.toFixed(2)}× local, ${vsStrict.toFixed(2)}× strict, ${le.values.calls.toFixed(2)} calls: ${met ? 'met' : 'missed'}.`);
    }
    return [section];
  },
};
