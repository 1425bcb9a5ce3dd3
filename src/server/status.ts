/**
 * `GET /v1/status` and `GET /v1/hot`: what an instance is doing, as JSON, for the status page (src/server/
 * status-page.ts) and for scripts. Read-only. Served by the admin API (behind its token) when one is
 * configured, else by the public server (`server.statusPage`, default on in `sluice serve`).
 *
 * `/v1/status` document:
 *
 * ```text
 * { service: "sluice", now: <unix ms>, uptimeSeconds, policiesVersion,
 *   policies: [{ name, consistency, onStoreError, shadow, descriptors: [names], limits: [{ name, algorithm, limit, periodMs, burst }] }],
 *   activity: { at: <unix ms of the current second>, intervalMs: 1000,
 *               policies: { <name>: { admitted: [per s], denied: [...], degraded: [...], checks, deniedTotal, nearLimit } } },
 *   hot: { <policy>: { checks, errorBound, top: [{ key, checks, denied, error, share }] } },   // top 10 per policy
 *   engine: { shards, keys, evictions, pending, perShard: [{ up, queuedChecks, queuedBatches, downs, recoveries }] } | null,
 *   store: { status, breaker, errors, timeouts, scriptErrors, connectionErrors, breakerRejections,
 *            latency: { calls, meanMs, p50Ms, p99Ms } } | null,     // latency since start; p50/p99 are bucket upper bounds
 *   sync: { merges, failures, dropped, pendingKeys, lagMs } | null }
 * ```
 *
 * `/v1/hot?policy=P[&limit=N]` (N 1..1000, default 20): `{ policy, checks, errorBound, keys: [{ key, checks,
 * denied, error, share }] }`; 400 naming `policy` or `limit`, 404 UNKNOWN_POLICY for a policy not in force.
 */
import type { Limiter } from '../types.js';
import type { LimiterStats } from '../types/stats.js';
import type { Activity } from '../metrics/activity.js';
import type { HotKey } from '../metrics/hot-keys.js';
import { invalidArgument, unknownPolicy } from '../util/errors.js';

/** How long `/v1/status` waits for the shards' counters (as a scrape does). */
const STATS_WAIT_MS = 500;
/** Hot keys per policy in `/v1/status`. */
const STATUS_HOT_KEYS = 10;

/** What the status routes read: one per server process (the public server makes it; the admin API reuses it). */
export interface StatusSource {
  /** The `/v1/status` document as JSON text. */
  statusJson(): Promise<string>;
  /**
   * The `/v1/hot` answer for a query string (`policy=P&limit=N`), as JSON text.
   * @throws SluiceError INVALID_ARGUMENT naming `policy` or `limit`, UNKNOWN_POLICY (`policy`).
   */
  hotJson(query: string): string;
}

/** The status of `limiter`, with the rates and hot keys `activity` counts (null: those parts empty). */
export function createStatusSource(limiter: Limiter, activity: Activity | null): StatusSource {
  const started = Date.now();
  let last: LimiterStats | null = null;
  const hotOf = (policy: string, limit: number): { checks: number; errorBound: number; top: HotKey[] } | undefined => {
    const top = activity?.hot(policy, limit);
    if (top === undefined) return undefined;
    return { ...activity!.hotTotals(policy), top };
  };
  return {
    async statusJson(): Promise<string> {
      try {
        last = await limiter.stats({ waitMs: STATS_WAIT_MS });
      } catch {
        // closed or stalled: the last counters stand
      }
      const policies = [...limiter.policies.values()].map((p) => ({
        name: p.name, consistency: p.consistency, onStoreError: p.onStoreError, shadow: p.shadow,
        descriptors: p.descriptors.map((d) => d.name),
        limits: p.limits.map((l) => ({ name: l.name, algorithm: l.algorithm, limit: l.limit, periodMs: l.periodMs, burst: l.burst })),
      }));
      const hot: Record<string, ReturnType<typeof hotOf>> = {};
      for (const name of limiter.policies.keys()) {
        const h = hotOf(name, STATUS_HOT_KEYS);
        if (h !== undefined && h.top.length > 0) hot[name] = h;
      }
      const st = last?.store;
      const status = limiter.storeStatus();
      return JSON.stringify({
        service: 'sluice',
        now: Date.now(),
        uptimeSeconds: Math.floor((Date.now() - started) / 1000),
        policiesVersion: limiter.version,
        policies,
        activity: activity?.snapshot() ?? null,
        hot,
        engine: last === null ? null : {
          shards: last.shards, keys: last.keys, evictions: last.evictions, pending: last.pending,
          perShard: last.perShard.map((s) => ({ up: s.up, queuedChecks: s.queuedChecks, queuedBatches: s.queuedBatches, downs: s.downs, recoveries: s.recoveries })),
        },
        store: status === 'none' ? null : {
          status,
          breaker: st?.breaker ?? null,
          errors: st?.storeErrors ?? 0, timeouts: st?.timeouts ?? 0, scriptErrors: st?.scriptErrors ?? 0,
          connectionErrors: st?.connectionErrors ?? 0, breakerRejections: st?.breakerRejections ?? 0,
          latency: st === undefined ? null : latencySummary(st.latency),
        },
        sync: st?.sync ?? null,
      });
    },
    hotJson(query: string): string {
      const params = new URLSearchParams(query);
      const policy = params.get('policy');
      if (policy === null || policy === '') throw invalidArgument('policy', 'is required (GET /v1/hot?policy=NAME[&limit=N])');
      const limitText = params.get('limit');
      const limit = limitText === null ? 20 : Number(limitText);
      if (!/^\d+$/.test(limitText ?? '20') || !Number.isSafeInteger(limit) || limit < 1 || limit > 1000) {
        throw invalidArgument('limit', `must be an integer from 1 to 1000 (got ${JSON.stringify(limitText)})`);
      }
      if (!limiter.policies.has(policy)) throw unknownPolicy(policy);
      const h = hotOf(policy, limit) ?? { checks: 0, errorBound: 0, top: [] };
      return JSON.stringify({ policy, checks: h.checks, errorBound: h.errorBound, keys: h.top });
    },
  };
}

/**
 * Calls, mean, and the bucket upper bounds holding the 50th and 99th percentiles, in ms (null past the last
 * bound), of a latency histogram (counts per bucket of `bounds`, in seconds, +Inf last).
 */
export function latencySummary(h: { bounds: readonly number[]; counts: number[]; sumSeconds: number }): { calls: number; meanMs: number | null; p50Ms: number | null; p99Ms: number | null } {
  const calls = h.counts.reduce((a, b) => a + b, 0);
  const at = (q: number): number | null => {
    if (calls === 0) return null;
    let seen = 0;
    for (let i = 0; i < h.counts.length; i++) {
      seen += h.counts[i];
      if (seen >= q * calls) return i < h.bounds.length ? h.bounds[i] * 1000 : null;
    }
    return null;
  };
  return { calls, meanMs: calls === 0 ? null : (h.sumSeconds / calls) * 1000, p50Ms: at(0.5), p99Ms: at(0.99) };
}
