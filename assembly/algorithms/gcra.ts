// GCRA (generic cell rate algorithm, ITU-T I.371; the "virtual scheduling" form): the state is one
// theoretical arrival time TAT, kept exactly as whole ms plus a fraction frac/L (0 ≤ frac < L), so an
// emission interval of P/L ms never rounds. debt = (TAT − t)·L is B·P minus the token bucket's x, which is
// why both algorithms give the same numbers. Ranges: debt ≤ BP < 2^63; TAT ≤ t + fullAfter.
import { Limit } from '../layout';
import { ceilDiv } from '../math';
import { allow, deny, never } from '../result';

/** (TAT − t)·L, or 0 when TAT ≤ t. */
@inline export function debtAt(lim: Limit, tatMs: u64, frac: u64, t: u64): u64 {
  return tatMs >= t ? (tatMs - t) * lim.L + frac : 0;
}

export function gcra(lim: Limit, exists: bool, w0: u64, w1: u64, c: u64, t: u64): void {
  const P = lim.P, L = lim.L, BP = lim.BP;
  const debt = exists ? debtAt(lim, w0, w1, t) : 0;
  if (c > lim.B) {
    never((BP - debt) / P, ceilDiv(debt, L));
    return;
  }
  const cP = c * P;
  if (debt + cP <= BP) {
    const nd = debt + cP;
    allow((BP - nd) / P, ceilDiv(nd, L), t + nd / L, nd % L, c);
  } else {
    deny((BP - debt) / P, ceilDiv(debt, L), ceilDiv(debt + cP - BP, L));
  }
}

@inline export function gcraIdle(lim: Limit, tatMs: u64, frac: u64, last: u64, now: u64): bool {
  return debtAt(lim, tatMs, frac, now > last ? now : last) == 0;
}
