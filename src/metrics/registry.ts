/**
 * Prometheus metrics: one {@link Registry} per server (so two servers in one process, or a test's, never
 * share counts), built by {@link createMetrics} and served as text by `GET /metrics`.
 *
 * Hot-path counts are plain numbers bumped per check and per response; prom-client reads them when a
 * scrape asks (`collect`), so a check pays a Map lookup and an increment, not a label hash. Gauges that
 * describe the engine (pending checks, keys held, evictions, kernel memory) are read from
 * `limiter.stats()` once per scrape, by the files that declare them.
 *
 * The metrics counted here, as the server's checks, responses and reloads happen:
 *
 * | metric | type | labels |
 * |---|---|---|
 * | sluice_decisions_total | counter | policy, result = allowed / denied / never / error |
 * | sluice_decision_duration_seconds | histogram | (none): from `check()` to its answer |
 * | sluice_shard_failures_total | counter | checks failed with SHARD_FAILED (a worker died or failed holding them) |
 * | sluice_overload_rejections_total | counter | checks refused with OVERLOADED (queues full) |
 * | sluice_http_responses_total | counter | class = 2xx / 3xx / 4xx / 5xx |
 * | sluice_policies_info | gauge | version: the policy-set version in force (`limiter.version`), value 1; only that one |
 * | sluice_policy_reloads_total | counter | source = file / signal / api / peer, result = ok / rejected |
 * | sluice_policy_announcements_refused_total | counter | reason = malformed / unsigned / bad_mac / replayed |
 * | process_resident_memory_bytes | gauge | the process's RSS |
 * | sluice_near_limit_total | counter | policy: admitted checks that left less than 20 % of the limit, decided by Redis or the kernel, not degraded (with an {@link Activity}) |
 * | sluice_hot_key_checks, sluice_hot_key_denied | gauge | policy, key: the top `hotKeyMetrics` keys per policy of the hot-key sketch (estimates: see src/metrics/hot-keys.ts); none when 0 |
 *
 * and, read from `limiter.stats()`, the engine's and the shards' (src/metrics/engine.ts); with a Redis store
 * only (`limiter.storeStatus() !== 'none'`), the store's and the write-behind's (src/metrics/store.ts) and
 * lease mode's (src/metrics/lease.ts); with the region option (`limiter.region`), the reconciler's
 * `sluice_region_*` (src/metrics/region.ts).
 */
import { performance } from 'node:perf_hooks';
import { AggregatorRegistry, Counter, Gauge, Registry, type Metric, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { CheckRequest, Decision } from '../types/decision.js';
import type { Limiter } from '../types.js';
import type { LimiterStats } from '../types/stats.js';
import type { RefusalReason, ReloadSource } from '../types/reload.js';
import { isSluiceError } from '../util/errors.js';
import type { Activity } from './activity.js';
import { keyOf } from '../keys/derive.js';
import { registerRegionMetrics } from './region.js';
import { registerEngineGauges, registerListAndShadowMetrics, registerShardMetrics } from './engine.js';
import { registerStoreMetrics } from './store.js';
import { registerLeaseMetrics } from './lease.js';
import { LatencyHistogram } from './histograms.js';

/** How long a scrape waits for `limiter.stats()` (shard workers answer it between batches). */
export const STATS_TIMEOUT_MS = 1000;
/**
 * How long a scrape waits for one shard's kernel counters (keys, evictions) before taking its last ones, in
 * ms: a shard stalled in a batch does not hold the per-shard gauges, which the pool reads without it.
 */
export const SHARD_STATS_WAIT_MS = 500;

/** What became of a check that reached the engine under a known policy. */
export type DecisionResult = 'allowed' | 'denied' | 'never' | 'error';
const RESULTS: readonly DecisionResult[] = ['allowed', 'denied', 'never', 'error'];
const CLASSES = ['2xx', '3xx', '4xx', '5xx'] as const;
const RELOAD_SOURCES: readonly ReloadSource[] = ['file', 'signal', 'api', 'peer'];
const REFUSAL_REASONS: readonly RefusalReason[] = ['malformed', 'unsigned', 'bad_mac', 'replayed'];

/**
 * Decision latency buckets, in seconds: an in-thread decision takes microseconds, a shard round trip tens
 * to hundreds of microseconds, a queue under load milliseconds and up.
 */
export const LATENCY_BUCKETS = [
  0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5,
  0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];

/** What {@link createMetrics} counts besides its own counters. */
export interface MetricsOptions {
  /** Per-policy rates, near-limit counts and hot keys, fed with every decision counted here. Default none. */
  activity?: Activity | null;
  /** Keys per policy exported as `sluice_hot_key_*` (the sketch's top N; bounded cardinality); 0: none. Default 10. */
  hotKeyMetrics?: number;
}

export interface ServerMetrics {
  /** This server's registry: add your own metrics to it if you like. */
  readonly registry: Registry;
  /** The activity counts decisions feed (rates, near-limit, hot keys), or null. */
  readonly activity: Activity | null;
  /** `Content-Type` of {@link render}'s text. */
  readonly contentType: string;
  /**
   * The limiter as the server uses it: the same object (through its prototype) except `check`, which counts
   * each check's result and latency. Checks rejected as invalid (4xx) are not decisions and are not counted
   * here; their responses are, by class.
   */
  instrument(limiter: Limiter): Limiter;
  /**
   * For a caller that calls the limiter itself and counts its checks as {@link instrument} does (the HTTP
   * front, saving a promise per check): the start time of a check entering now, for {@link decided} or
   * {@link failed}.
   */
  started(): number;
  /**
   * The clock of {@link started}, read now: for a caller that times a check decided synchronously itself
   * (two reads, no per-turn caching and its microtasks), passing `ended`.
   */
  now(): number;
  /**
   * Counts a check's decision under `policy` (the check's), started at {@link started}, `ended` or now;
   * `req`, the check, gives its key to the hot-key sketch.
   */
  decided(policy: unknown, d: Decision, started: number, ended?: number, req?: CheckRequest): void;
  /**
   * For a batch counted by {@link tally}: one of its decisions for the activity (rates, near-limit, hot keys):
   * admitted or not, degraded, tokens left of the limit. Does nothing without an activity.
   */
  observe(policy: string, key: string, allowed: boolean, degraded: boolean, remaining: number, limit: number): void;
  /** Counts a check that failed with `e`: only a 5xx is the engine failing to decide. */
  failed(policy: unknown, e: unknown, started: number, ended?: number): void;
  /**
   * Counts decisions of one batch under `policy` (the checks'), all started at `started` and decided at
   * `ended` ({@link now}): as {@link decided} once per decision, with one lookup for the batch.
   */
  tally(policy: unknown, allowed: number, denied: number, never: number, started: number, ended: number): void;
  /** Counts one HTTP response by its status class. */
  response(status: number): void;
  /** Counts one policy reload (`sluice_policy_reloads_total`) by what started it and whether it was applied. */
  reloaded(source: ReloadSource, result: 'ok' | 'rejected'): void;
  /** Counts a refused policy announcement (`sluice_policy_announcements_refused_total`) by reason. */
  announcementRefused(reason: RefusalReason): void;
  /**
   * Reads `limiter.stats()` into the gauges and renders every metric as Prometheus text. `others`: the
   * metrics of the server's other front threads (prom-client `getMetricsAsJSON`): their counters and
   * histograms are summed into this one's (prom-client's AggregatorRegistry), their gauges left out (the
   * engine's gauges, read from the shards through this thread's limiter, already cover every thread).
   */
  render(others?: () => Promise<readonly unknown[]>): Promise<string>;
}

/** Creates the metrics of one server over `limiter`. */
export function createMetrics(limiter: Limiter, options: MetricsOptions = {}): ServerMetrics {
  const registry = new Registry();
  const activity = options.activity ?? null;
  const hotKeyMetrics = options.hotKeyMetrics ?? 10;
  if (!Number.isSafeInteger(hotKeyMetrics) || hotKeyMetrics < 0 || hotKeyMetrics > 1000) {
    throw new RangeError(`hotKeyMetrics: must be an integer from 0 to 1000 (got ${hotKeyMetrics})`);
  }
  const registers = [registry];

  /** Per policy: counts by result, in RESULTS order. Only configured policy names: bounded label values. */
  const decided = new Map<string, Float64Array>();
  for (const name of limiter.policies.keys()) decided.set(name, new Float64Array(RESULTS.length));
  let shardFailures = 0;
  let overloads = 0;
  const responses = new Float64Array(CLASSES.length);
  let stats: LimiterStats | null = null;

  new Counter({
    name: 'sluice_decisions_total',
    help: 'Checks decided, by policy and result: allowed, denied, never (can never pass), error (could not be decided: overloaded, shard failed, closed...).',
    labelNames: ['policy', 'result'],
    registers,
    collect() {
      this.reset();
      for (const [policy, counts] of decided) {
        for (let r = 0; r < RESULTS.length; r++) this.inc({ policy, result: RESULTS[r] }, counts[r]);
      }
    },
  });
  const read = (): LimiterStats | null => stats;
  registerListAndShadowMetrics(registers, read);
  const latency = new LatencyHistogram(
    'sluice_decision_duration_seconds',
    'Time from a check entering the engine to its decision or error, in seconds.',
    LATENCY_BUCKETS,
  );
  registry.registerMetric(latency as unknown as Metric);
  new Counter({
    name: 'sluice_shard_failures_total',
    help: 'Checks failed with SHARD_FAILED: the shard worker holding them died or failed.',
    registers,
    collect() {
      this.reset();
      this.inc(shardFailures);
    },
  });
  new Counter({
    name: 'sluice_overload_rejections_total',
    help: 'Checks refused with OVERLOADED because a bounded queue was full.',
    registers,
    collect() {
      this.reset();
      this.inc(overloads);
    },
  });
  registerEngineGauges(registers, read);
  new Counter({
    name: 'sluice_http_responses_total',
    help: 'HTTP responses sent, by status class.',
    labelNames: ['class'],
    registers,
    collect() {
      this.reset();
      for (let c = 0; c < CLASSES.length; c++) this.inc({ class: CLASSES[c] }, responses[c]);
    },
  });
  registerShardMetrics(registers, read);
  if (limiter.region !== undefined) registerRegionMetrics(registers, () => stats?.region);
  if (limiter.storeStatus() !== 'none') {
    registerStoreMetrics(registry, read);
    registerLeaseMetrics(registers, read);
  }
  new Gauge({
    name: 'sluice_policies_info',
    help: 'The policy-set version in force (label version: 12 hex chars of a sha256 over the compiled policies); always 1.',
    labelNames: ['version'],
    registers,
    collect() {
      this.reset();
      this.set({ version: limiter.version }, 1);
    },
  });
  /** Policy announcements refused, by reason (src/reload/announce.ts). */
  const refusedAnnouncements = new Float64Array(REFUSAL_REASONS.length);
  new Counter({
    name: 'sluice_policy_announcements_refused_total',
    help: 'Policy announcements from the Redis channel refused before being read: malformed, unsigned, bad_mac (forged or another secret), replayed (too old, or not newer than the last from its origin).',
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset();
      REFUSAL_REASONS.forEach((reason, i) => this.inc({ reason }, refusedAnnouncements[i]));
    },
  });
  /** Reloads by source and result, in RELOAD_SOURCES x (ok, rejected) order. */
  const reloads = new Float64Array(RELOAD_SOURCES.length * 2);
  new Counter({
    name: 'sluice_policy_reloads_total',
    help: 'Policy reloads by source (file watch, signal = SIGHUP, api = admin API, peer = another instance via Redis) and result (ok: in force, or already in force; rejected: invalid, the old rules stay).',
    labelNames: ['source', 'result'],
    registers,
    collect() {
      this.reset();
      RELOAD_SOURCES.forEach((source, i) => {
        this.inc({ source, result: 'ok' }, reloads[2 * i]);
        this.inc({ source, result: 'rejected' }, reloads[2 * i + 1]);
      });
    },
  });
  if (activity !== null) {
    new Counter({
      name: 'sluice_near_limit_total',
      help: 'Admitted checks that left less than 20 % of the limit, by policy (tenants close to their quota); degraded decisions are not counted.',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset();
        for (const [policy, n] of activity.nearLimit()) this.inc({ policy }, n);
      },
    });
    if (hotKeyMetrics > 0 && activity.hotKeys > 0) {
      const hotGauge = (name: string, help: string, read: (h: { checks: number; denied: number }) => number): void => {
        new Gauge({
          name, help, labelNames: ['policy', 'key'], registers,
          collect() {
            this.reset();
            for (const policy of activity.policies()) {
              for (const h of activity.hot(policy, hotKeyMetrics) ?? []) this.set({ policy, key: h.key }, read(h));
            }
          },
        });
      };
      hotGauge('sluice_hot_key_checks', `Checks of the hottest keys per policy (the top ${hotKeyMetrics} of a Space-Saving sketch: an overestimate by at most checks/K).`, (h) => h.checks);
      hotGauge('sluice_hot_key_denied', `Denied checks of the hottest keys per policy (the top ${hotKeyMetrics} by checks), since each entered the sketch.`, (h) => h.denied);
    }
  }
  new Gauge({
    name: 'process_resident_memory_bytes',
    help: 'Resident memory size of the process in bytes.',
    registers,
    collect() {
      this.set(process.memoryUsage.rss());
    },
  });

  // Reading the clock costs 50-150 ns here (kvm-clock), as much as a decision: checks entering in one
  // synchronous run share one start time, and answers settled in one microtask run share one end time.
  // (A resolved promise's then() schedules the reset: queueMicrotask costs twice as much, an AsyncResource each.)
  let entered = -1;
  let settled = -1;
  const forgetEntered = (): void => { entered = -1; };
  const forgetSettled = (): void => { settled = -1; };
  const enteredAt = (): number => {
    if (entered < 0) {
      entered = monotonicMs();
      void RESOLVED.then(forgetEntered);
    }
    return entered;
  };
  /** A policy a reload added gets its counts on its first decision (names stay bounded: configured ones only). */
  const addPolicy = (policy: string): Float64Array | undefined => {
    if (!limiter.policies.has(policy)) return undefined;
    const counts = new Float64Array(RESULTS.length);
    decided.set(policy, counts);
    return counts;
  };
  const count = (policy: unknown, r: number, started: number, ended?: number): void => {
    const counts = typeof policy === 'string' ? decided.get(policy) ?? addPolicy(policy) : undefined;
    if (counts === undefined) return;
    counts[r]++;
    if (ended === undefined) {
      if (settled < 0) {
        settled = monotonicMs();
        void RESOLVED.then(forgetSettled);
      }
      ended = settled;
    }
    latency.observe((ended - started) / 1000);
  };
  /** The check's key for the hot-key sketch: its `key`, or its descriptors joined (only while the sketch is on). */
  const keyFor = (policy: string, req: CheckRequest | undefined): string | undefined => {
    if (req === undefined) return undefined;
    if (req.key !== undefined || req.descriptors === undefined || !activity!.wantsKeys()) return req.key;
    const p = limiter.policies.get(policy);
    try {
      return p === undefined ? undefined : keyOf(p, undefined, req.descriptors);
    } catch {
      return undefined;
    }
  };
  const countDecision = (policy: unknown, d: Decision, started: number, ended?: number, req?: CheckRequest): void => {
    count(policy, d.allowed ? 0 : d.retryAfterMs === null ? 2 : 1, started, ended);
    if (activity !== null && typeof policy === 'string') {
      activity.record(policy, keyFor(policy, req), d.allowed, d.degraded === true, d.remaining, d.limit);
    }
  };
  const countFailure = (policy: unknown, e: unknown, started: number, ended?: number): void => {
    // A 4xx is the caller's mistake, not a decision; a 5xx is the engine failing to decide.
    if (isSluiceError(e) && e.status >= 500) {
      count(policy, 3, started, ended);
      if (e.code === 'SHARD_FAILED') shardFailures++;
      else if (e.code === 'OVERLOADED') overloads++;
    }
  };

  return {
    registry,
    activity,
    contentType: registry.contentType,
    instrument(inner: Limiter): Limiter {
      const check = (req: CheckRequest): Promise<Decision> => {
        const started = enteredAt();
        return inner.check(req).then(
          (d) => {
            countDecision(req.policy, d, started, undefined, req);
            return d;
          },
          (e: unknown) => {
            countFailure(req?.policy, e, started);
            throw e;
          },
        );
      };
      const checkMany = (reqs: readonly CheckRequest[]): Promise<Array<Decision | Error>> =>
        Promise.all(reqs.map((r) => check(r).catch((e: Error) => e)));
      const checkSync = (req: CheckRequest): Decision => {
        const started = enteredAt();
        let d: Decision;
        try {
          d = inner.checkSync(req);
        } catch (e) {
          countFailure(req?.policy, e, started);
          throw e;
        }
        countDecision(req.policy, d, started, undefined, req);
        return d;
      };
      // Everything else (policies, stats, close...) is read through the prototype: the same limiter.
      return Object.assign(Object.create(inner) as Limiter, { check, checkMany, checkSync });
    },
    started: enteredAt,
    now: monotonicMs,
    decided: countDecision,
    failed: countFailure,
    observe(policy: string, key: string, allowed: boolean, degraded: boolean, remaining: number, limit: number): void {
      activity?.record(policy, key, allowed, degraded, remaining, limit);
    },
    tally(policy: unknown, allowed: number, denied: number, never: number, started: number, ended: number): void {
      const counts = typeof policy === 'string' ? decided.get(policy) ?? addPolicy(policy) : undefined;
      if (counts === undefined) return;
      counts[0] += allowed;
      counts[1] += denied;
      counts[2] += never;
      latency.observeMany((ended - started) / 1000, allowed + denied + never);
    },
    reloaded(source: ReloadSource, result: 'ok' | 'rejected'): void {
      const i = RELOAD_SOURCES.indexOf(source);
      if (i >= 0) reloads[2 * i + (result === 'ok' ? 0 : 1)]++;
    },
    announcementRefused(reason: RefusalReason): void {
      const i = REFUSAL_REASONS.indexOf(reason);
      if (i >= 0) refusedAnnouncements[i]++;
    },
    response(status: number): void {
      const c = Math.floor(status / 100) - 2;
      if (c >= 0 && c < CLASSES.length) responses[c]++;
    },
    async render(others?: () => Promise<readonly unknown[]>): Promise<string> {
      // A shard that is stalled or down must not hold the scrape: past STATS_TIMEOUT_MS (or on an error) the
      // engine gauges keep their last values and the counters still render.
      let timer: NodeJS.Timeout | undefined;
      try {
        stats = await Promise.race([
          limiter.stats({ waitMs: SHARD_STATS_WAIT_MS }),
          new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error('stats timed out')), STATS_TIMEOUT_MS); }),
        ]);
      } catch {
        // keep the last values
      } finally {
        clearTimeout(timer);
      }
      if (others === undefined) return registry.metrics();
      const [mine, theirs] = await Promise.all([registry.getMetricsAsJSON(), others()]);
      const summed = (theirs as MetricObjectWithValues<MetricValue<string>>[][]).map((m) => m.filter((x) => String(x.type) === 'counter' || String(x.type) === 'histogram'));
      return AggregatorRegistry.aggregate([mine, ...summed]).metrics();
    },
  };
}

const RESOLVED = Promise.resolve();

/**
 * A monotonic clock in ms, for latencies: performance.now() reads the same clock as process.hrtime() with no
 * allocation (hrtime returns a new [s, ns] array per call, and a request reads the clock twice), at about the
 * same cost (60-120 ns each here, measured).
 */
function monotonicMs(): number {
  return performance.now();
}
