/**
 * Shadow mode and list outcomes, as the front counts them: per policy name, shadow evaluations (admitted,
 * would deny) and list matches (allow, deny), plus the throttled would-deny log. Counts are kept by name
 * for the limiter's life, so they survive reloads; only policies that have counted something appear.
 */
import type { Decision } from '../types/decision.js';
import type { PolicyRuntime } from './runtime.js';

/** Least time between two would-deny log lines of one shadow policy, in ms of the limiter's clock. */
export const SHADOW_LOG_INTERVAL_MS = 1000;

/** A pino-compatible sink for would-deny lines. */
export interface ShadowLogger {
  info(obj: object, msg: string): void;
}

interface ShadowCount {
  allow: number;
  wouldDeny: number;
  /** Would-denies since the last log line. */
  unlogged: number;
  /** When the last log line was written (the limiter's clock, ms); -Infinity before the first. */
  loggedAt: number;
}

export class PolicyCounters {
  private readonly shadows = new Map<string, ShadowCount>();
  private readonly lists = new Map<string, { allow: number; deny: number }>();

  constructor(private readonly log: ShadowLogger | null) {}

  /**
   * The decision a shadow policy's check gets: admitted, with `shadow` carrying the evaluation `d`; counts it,
   * and logs a would-deny at most once per {@link SHADOW_LOG_INTERVAL_MS} with the count since the last line.
   * @param now the batch's clock reading, ms.
   */
  shadowed(rt: PolicyRuntime, d: Decision, now: number): Decision {
    const name = rt.policy.name;
    let c = this.shadows.get(name);
    if (c === undefined) this.shadows.set(name, (c = { allow: 0, wouldDeny: 0, unlogged: 0, loggedAt: -Infinity }));
    if (d.allowed) c.allow++;
    else {
      c.wouldDeny++;
      c.unlogged++;
      if (this.log !== null && now >= c.loggedAt + SHADOW_LOG_INTERVAL_MS) {
        this.log.info({ policy: name, wouldDeny: c.unlogged }, 'shadow policy would deny');
        c.unlogged = 0;
        c.loggedAt = now;
      }
    }
    const out: Decision = {
      allowed: true, limit: d.limit, remaining: d.remaining, resetAfterMs: d.resetAfterMs, retryAfterMs: 0, policy: d.policy,
      shadow: d.reason === undefined
        ? { allowed: d.allowed, remaining: d.remaining, retryAfterMs: d.retryAfterMs }
        : { allowed: d.allowed, remaining: d.remaining, retryAfterMs: d.retryAfterMs, reason: d.reason },
    };
    if (d.degraded === true) {
      out.degraded = true;
      out.degradedBy = d.degradedBy;
    }
    if (d.stalenessMs !== undefined) out.stalenessMs = d.stalenessMs;
    return out;
  }

  /** Counts a check decided by `policy`'s allow or deny list. */
  listed(policy: string, list: 'allow' | 'deny'): void {
    let c = this.lists.get(policy);
    if (c === undefined) this.lists.set(policy, (c = { allow: 0, deny: 0 }));
    c[list]++;
  }

  /** The counts so far, as `LimiterStats.shadow` and `LimiterStats.lists`. */
  snapshot(): { shadow: Record<string, { allow: number; wouldDeny: number }>; lists: Record<string, { allow: number; deny: number }> } {
    // null prototypes: a policy may be named __proto__
    const shadow = Object.create(null) as Record<string, { allow: number; wouldDeny: number }>;
    for (const [name, c] of this.shadows) shadow[name] = { allow: c.allow, wouldDeny: c.wouldDeny };
    const lists = Object.create(null) as Record<string, { allow: number; deny: number }>;
    for (const [name, c] of this.lists) lists[name] = { ...c };
    return { shadow, lists };
  }
}

/** The decision of a check on its policy's allow list: admitted, nothing spent, `remaining` = the limit. */
export function allowlisted(rt: PolicyRuntime): Decision {
  const l = rt.legLimits[0];
  return { allowed: true, limit: l.limit, remaining: l.limit, resetAfterMs: 0, retryAfterMs: 0, policy: l.name, reason: 'allowlist' };
}

/** The decision of a check on its policy's deny list: refused for good, nothing spent. */
export function denylisted(rt: PolicyRuntime): Decision {
  const l = rt.legLimits[0];
  return { allowed: false, limit: l.limit, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy: l.name, reason: 'denylist' };
}
