import type { Decision } from '../types/decision.js';
import type { PolicyRuntime } from './runtime.js';
import { CODE_ALLOW, CODE_DENY, CODE_NEVER, LEG_OUT, OUT_CODE, OUT_DELAY, OUT_REMAINING, OUT_RESET_AFTER, OUT_RETRY_AFTER } from '../shard/abi.js';
import { SluiceError, shardFailed } from '../util/errors.js';

/** {@link bindingLeg}'s outcome, in bits 8 and up of its result (the leg index is in the low 8 bits). */
export const BOUND_ALLOWED = 0;
export const BOUND_DENIED = 1 << 8;
export const BOUND_NEVER = 2 << 8;

/**
 * The binding leg of one check from its legs' output rows at `base`: admitted only if every leg admitted;
 * when denied, a leg that never admits, else the one with the longest wait; when admitted, the one with the
 * fewest tokens left (the longest reset on ties). Returns the leg index | BOUND_ALLOWED, _DENIED or _NEVER, or
 * −(j + 1) when leg j carries a code the kernel only gives a bad leg.
 */
export function bindingLeg(out: Float64Array, base: number, rt: PolicyRuntime): number {
  let allowed = true;
  let pick = -1;
  let never = false;
  for (let j = 0; j < rt.legCount; j++) {
    const row = (base + j) * LEG_OUT;
    const code = out[row + OUT_CODE];
    if (code === CODE_ALLOW) continue;
    if (code !== CODE_DENY && code !== CODE_NEVER) return -(j + 1);
    allowed = false;
    if (never) continue;
    if (code === CODE_NEVER) {
      never = true;
      pick = j;
    } else if (pick < 0 || out[row + OUT_RETRY_AFTER] > out[(base + pick) * LEG_OUT + OUT_RETRY_AFTER]) {
      pick = j;
    }
  }
  if (!allowed) return pick | (never ? BOUND_NEVER : BOUND_DENIED);
  pick = 0;
  for (let j = 1; j < rt.legCount; j++) {
    const r = out[(base + j) * LEG_OUT + OUT_REMAINING], best = out[(base + pick) * LEG_OUT + OUT_REMAINING];
    if (r < best || (r === best && out[(base + j) * LEG_OUT + OUT_RESET_AFTER] > out[(base + pick) * LEG_OUT + OUT_RESET_AFTER])) pick = j;
  }
  return pick;
}

/** The error for a check whose leg j (from {@link bindingLeg}'s −(j + 1)) the kernel rejected. */
export function badLegError(out: Float64Array, base: number, rt: PolicyRuntime, bound: number): SluiceError {
  const j = -bound - 1;
  return shardFailed(`kernel rejected leg ${j} of policy "${rt.policy.name}" (code ${out[(base + j) * LEG_OUT + OUT_CODE]})`);
}

/** Why a check can never be admitted, from its binding limit. */
export function neverReason(limit: number): string {
  return limit === 0 ? 'limit is 0' : 'cost exceeds the limit\'s capacity';
}

/** One check's decision from its legs' output rows at `base` (the binding leg's, see {@link bindingLeg}). */
export function compose(out: Float64Array, base: number, rt: PolicyRuntime, stalenessMs = -1): Decision | SluiceError {
  const bound = bindingLeg(out, base, rt);
  if (bound < 0) return badLegError(out, base, rt, bound);
  const pick = bound & 0xff;
  const allowed = bound < BOUND_DENIED;
  const never = bound >= BOUND_NEVER;
  const row = (base + pick) * LEG_OUT;
  const limit = rt.legLimits[pick];
  const retryAfterMs = allowed ? 0 : never ? null : out[row + OUT_RETRY_AFTER];
  // a sync policy's staleness in the literal: added afterwards, it would cost each decision a property store
  const d: Decision = stalenessMs < 0
    ? { allowed, limit: limit.limit, remaining: out[row + OUT_REMAINING], resetAfterMs: out[row + OUT_RESET_AFTER], retryAfterMs, policy: limit.name }
    : { allowed, limit: limit.limit, remaining: out[row + OUT_REMAINING], resetAfterMs: out[row + OUT_RESET_AFTER], retryAfterMs, policy: limit.name, stalenessMs };
  if (never) d.reason = neverReason(limit.limit);
  if (allowed && rt.legDelayMs !== null) {
    // onLimit: delay: the check waits for its slowest leg (each leg's debt is its own, reserved now)
    let delay = 0;
    for (let j = 0; j < rt.legCount; j++) delay = Math.max(delay, out[(base + j) * LEG_OUT + OUT_DELAY]);
    if (delay > 0) d.delayMs = delay;
  }
  return d;
}
