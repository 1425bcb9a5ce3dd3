/**
 * Admissions made on this instance while a merge was in flight, applied to the merged state that merge
 * returns: the state Redis sent back holds this instance's deltas up to the merge's send, not what it
 * admitted since, and installing it bare would hand those tokens out again (issue #20, item 3).
 *
 * The arithmetic is lua/sync.lua's merge() of `d` tokens at the state's own time (t = lastSeen, so nothing
 * refills in between): the next merge adds the same `d` to Redis, later, after a refill this leaves out,
 * so the local view is never more generous than Redis's will be.
 *
 * @param alg the algorithm code (0 token_bucket, 1 GCRA, 2 fixed_window, 3 sliding_window)
 * @param limit L, tokens per period; @param periodMs P, ms
 * @param w0 @param w1 @param last the merged state as the kernel stores it (lastSeen in Unix ms)
 * @param d tokens admitted since the merge was sent (> 0)
 * @returns the state with `d` spent, written into `out` at `at` (w0, w1, lastSeen)
 */
export function debitState(
  alg: number, limit: number, periodMs: number, w0: number, w1: number, last: number, d: number, out: number[], at: number,
): void {
  const t = last;
  if (alg === 0) {
    // token bucket: x = tokens·P; the debt of an over-admission is a negative x
    out[at] = w0 - d * periodMs;
    out[at + 1] = 0;
  } else if (alg === 1) {
    // GCRA: TAT = w0 + w1/L, pushed on by d emission intervals (d·P/L ms), kept as a whole part and a fraction
    const nd = (w0 >= t ? (w0 - t) * limit + w1 : 0) + d * periodMs;
    const whole = Math.floor(nd / limit);
    out[at] = t + whole;
    out[at + 1] = nd - whole * limit;
  } else if (alg === 2) {
    out[at] = w0 + d; // fixed window: the count of the window `last` is in
    out[at + 1] = w1;
  } else {
    out[at] = w0; // sliding window: previous window's count, then the current one's
    out[at + 1] = w1 + d;
  }
  out[at + 2] = t;
}
