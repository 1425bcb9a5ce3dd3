/**
 * A strict key's state as the `local` failure rule seeds it (src/engine/strict/cache.ts), rebuilt from the
 * numbers an admitted answer carries (remaining, resetAfterMs), in the state layout of lua/check.lua and the
 * kernel (w0, w1, lastSeen).
 */
import { CALENDAR_WINDOW_CODE } from '../../config/policy-spec.js';
import type { PolicyRuntime } from '../runtime.js';

/**
 * Leg j's state rebuilt from an admitted (or peeked) answer: remaining r (floor of tokens) and resetAfterMs z
 * at Redis time t, rounded toward fewer tokens, written as w0, w1, lastSeen at s[at].
 * - token bucket: tokens·P x satisfies x ≥ r·P and x ≥ B·P − z·L (z = ⌈(B·P − x)/L⌉): x = the larger.
 * - GCRA: debt ≤ z·L and ≤ B·P − r·P: debt = the smaller; TAT = t + debt / L (whole ms w0, the rest w1).
 * - fixed window: count = L − r, exactly.
 * - sliding window: the previous window's weight cannot be told from the current's: all of L − r is put
 *   in the current window, which admits no more now and no more later than the true state.
 * - calendar window: count = L − r and its window's end t + z (resetAfterMs is until that end), exactly.
 * A sliding log (code 5) cannot be rebuilt from numbers: its legs are left as they are (the caller skips them).
 */
export function rebuild(rt: PolicyRuntime, j: number, r: number, z: number, t: number, s: Float64Array, at: number): void {
  const l = rt.legLimits[j];
  const L = l.limit, P = l.periodMs, B = l.burst;
  let w0 = 0, w1 = 0, last = t;
  switch (l.algorithmCode) {
    case 0: {
      const BP = B * P;
      w0 = Math.min(BP, Math.max(r * P, BP - z * L));
      break;
    }
    case 1: {
      if (L === 0) {
        last = -1;
        break;
      }
      const debt = Math.max(0, Math.min(z * L, B * P - r * P));
      const whole = Math.floor(debt / L);
      w0 = t + whole;
      w1 = debt - whole * L;
      break;
    }
    case 2:
      w0 = L - r;
      break;
    case CALENDAR_WINDOW_CODE:
      w0 = L - r;
      w1 = t + z;
      break;
    default:
      w0 = 0;
      w1 = L - r;
  }
  if (l.algorithmCode === 0 && L === 0) last = -1;
  s[at] = w0;
  s[at + 1] = w1;
  s[at + 2] = last;
}
