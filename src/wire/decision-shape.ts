/**
 * The shape of a decision as the server writes it (src/wire/codec.ts `decisionJson`, the answer record of
 * binary-format.ts): what a reader of answers (the client) checks before handing one over, so that a broken
 * server or an intermediary cannot pass `null`, `{}` or `"allowed":"false"` off as a decision.
 */
import { describe } from '../keys/derive.js';

/** A non-negative safe integer: every count and time of a decision (tokens, whole ms). */
function natural(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/**
 * What is wrong with `v` as a decision, naming the field (`allowed: must be true or false (got "yes")`), or
 * null when it is one: `allowed` a boolean; `limit`, `remaining` and `resetAfterMs` non-negative safe integers;
 * `retryAfterMs` one or null; `policy` a string; `delayMs` (when present) a positive safe integer and `reason`
 * (when present) a string.
 */
export function decisionProblem(v: unknown): string | null {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return `must be an object (got ${Array.isArray(v) ? 'an array' : describe(v)})`;
  const d = v as Record<string, unknown>;
  if (typeof d.allowed !== 'boolean') return `allowed: must be true or false (got ${describe(d.allowed)})`;
  for (const f of ['limit', 'remaining', 'resetAfterMs'] as const) {
    if (!natural(d[f])) return `${f}: must be a non-negative safe integer (got ${describe(d[f])})`;
  }
  if (d.retryAfterMs !== null && !natural(d.retryAfterMs)) {
    return `retryAfterMs: must be a non-negative safe integer or null (got ${describe(d.retryAfterMs)})`;
  }
  if (typeof d.policy !== 'string') return `policy: must be a string (got ${describe(d.policy)})`;
  if (d.delayMs !== undefined && !(natural(d.delayMs) && d.delayMs > 0)) return `delayMs: must be a positive safe integer (got ${describe(d.delayMs)})`;
  if (d.reason !== undefined && typeof d.reason !== 'string') return `reason: must be a string (got ${describe(d.reason)})`;
  return null;
}

/**
 * What is wrong with `v` as a subscription's ready event (`{"id", "ready": true, limit, remaining, resetAfterMs,
 * policy}`), naming the field, or null: the three counts non-negative safe integers, `policy` a string.
 */
export function readyProblem(v: Record<string, unknown>): string | null {
  for (const f of ['limit', 'remaining', 'resetAfterMs'] as const) {
    if (!natural(v[f])) return `${f}: must be a non-negative safe integer (got ${describe(v[f])})`;
  }
  if (typeof v.policy !== 'string') return `policy: must be a string (got ${describe(v.policy)})`;
  return null;
}
