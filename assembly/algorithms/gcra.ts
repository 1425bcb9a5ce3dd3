// GCRA (generic cell rate algorithm, ITU-T I.371; the "virtual scheduling" form): the state is one
// theoretical arrival time TAT, kept exactly as whole ms plus a fraction frac/L (0 ≤ frac < L), so an
// emission interval of P/L ms never rounds. debt = (TAT − t)·L is B·P minus the token bucket's x, which is
// why both algorithms give the same numbers. Ranges: debt ≤ BP < 2^63 locally (in sync mode, where
// B·P ≤ 2^51, the merged debt may pass BP: tokens are then owed, and nothing is admitted until they are repaid).
import { Limit } from '../layout';
import { ceilDiv } from '../math';
import { allow, allowLater, deny, never } from '../result';

/** (TAT − t)·L, or 0 when TAT ≤ t. */
@inline export function debtAt(lim: Limit, tatMs: u64, frac: u64, t: u64): u64 {
  return tatMs >= t ? (tatMs - t) * lim.L + frac : 0;
}

/** floor((BP − debt) / P): the whole tokens left, 0 when the debt passes BP (sync mode's over-admission). */
@inline function left(BP: u64, debt: u64, P: u64): u64 {
  return debt < BP ? (BP - debt) / P : 0;
}

/**
 * maxDelay (onLimit: delay): a check whose emission is due within maxDelay ms is admitted now with the TAT
 * pushed past t + B·P/L by the wait (debt up to B·P + maxDelay·L), exactly as the token bucket's debt.
 */
export function gcra(lim: Limit, exists: bool, w0: u64, w1: u64, c: u64, t: u64, maxDelay: u64): void {
  const P = lim.P, L = lim.L, BP = lim.BP;
  const debt = exists ? debtAt(lim, w0, w1, t) : 0;
  if (c > lim.B) {
    never(left(BP, debt, P), ceilDiv(debt, L));
    return;
  }
  const cP = c * P;
  if (c == 0 || debt + cP <= BP) {
    const nd = debt + cP;
    allow(left(BP, nd, P), ceilDiv(nd, L), t + nd / L, nd % L, c);
  } else {
    const wait = ceilDiv(debt + cP - BP, L);
    if (wait <= maxDelay) {
      const nd = debt + cP;
      allowLater(ceilDiv(nd, L), t + nd / L, nd % L, wait);
    } else {
      deny(left(BP, debt, P), ceilDiv(debt, L), maxDelay > 0 ? wait - maxDelay : wait);
    }
  }
}

@inline export function gcraIdle(lim: Limit, tatMs: u64, frac: u64, last: u64, now: u64): bool {
  return debtAt(lim, tatMs, frac, now > last ? now : last) == 0;
}
