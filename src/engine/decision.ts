import type { Decision } from '../types.js';
import type { PolicyRuntime } from './runtime.js';
import { CODE_ALLOW, CODE_DENY, CODE_NEVER, LEG_OUT } from '../shard/protocol.js';
import { SluiceError } from '../util/errors.js';

/**
 * One check's decision from its legs' output rows at `base`. Admitted only if every leg admitted. The
 * binding leg is reported: when denied, a leg that never admits, else the one with the longest wait; when
 * admitted, the one with the fewest tokens left (the longest reset on ties).
 */
export function compose(out: Float64Array, base: number, rt: PolicyRuntime, stalenessMs = -1): Decision | SluiceError {
  let allowed = true;
  let pick = -1;
  let never = false;
  for (let j = 0; j < rt.legCount; j++) {
    const row = (base + j) * LEG_OUT;
    const code = out[row];
    if (code === CODE_ALLOW) continue;
    if (code !== CODE_DENY && code !== CODE_NEVER) {
      return new SluiceError('SHARD_FAILED', `kernel rejected leg ${j} of policy "${rt.policy.name}" (code ${code})`);
    }
    allowed = false;
    if (never) continue;
    if (code === CODE_NEVER) {
      never = true;
      pick = j;
    } else if (pick < 0 || out[row + 3] > out[(base + pick) * LEG_OUT + 3]) {
      pick = j;
    }
  }
  if (allowed) {
    pick = 0;
    for (let j = 1; j < rt.legCount; j++) {
      const r = out[(base + j) * LEG_OUT + 1], best = out[(base + pick) * LEG_OUT + 1];
      if (r < best || (r === best && out[(base + j) * LEG_OUT + 2] > out[(base + pick) * LEG_OUT + 2])) pick = j;
    }
  }
  const row = (base + pick) * LEG_OUT;
  const limit = rt.legLimits[pick];
  const retryAfterMs = allowed ? 0 : never ? null : out[row + 3];
  // a sync policy's staleness in the literal: added afterwards, it would cost each decision a property store
  const d: Decision = stalenessMs < 0
    ? { allowed, limit: limit.limit, remaining: out[row + 1], resetAfterMs: out[row + 2], retryAfterMs, policy: limit.name }
    : { allowed, limit: limit.limit, remaining: out[row + 1], resetAfterMs: out[row + 2], retryAfterMs, policy: limit.name, stalenessMs };
  if (never) d.reason = limit.limit === 0 ? 'limit is 0' : 'cost exceeds the limit\'s capacity';
  return d;
}
