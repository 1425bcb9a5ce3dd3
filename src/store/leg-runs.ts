/**
 * Runs in a check call's legs (lua/check.lua ARGV[4]): consecutive single-leg token-bucket checks on keys no
 * other leg of the call names, all of one L, P, B and cost. The first leg of such a run carries
 * {@link RUN_MARK} × (the run's length − 1) on its algorithm code; the script reads that leg's 6 doubles and
 * decides the rest of the run with its numbers, without reading theirs (one struct.unpack and a dozen shape
 * tests less per leg: bench/README.md, "Redis instructions per decision"). The legs keep their bytes, so a leg
 * of a run the shortcut does not admit (a denial, a state to look at closer) is decided from its own, as
 * before.
 *
 * The mark is the call's wire format, added as the legs are packed (src/store/check-call.ts,
 * src/store/cluster-calls.ts) after the engine's own marks: the engine's legs and the MemoryStore never carry
 * it.
 */
import { UNIQUE_KEY } from './contract.js';

/** Added per further leg of a run to its first leg's algorithm code (lua/check.lua RUN). */
export const RUN_MARK = 32;

/** The token bucket's algorithm code (src/config/policy-spec.ts ALGORITHM_CODES, pinned by a test), marked unique. */
const UNIQUE_TOKEN_BUCKET = 0 + UNIQUE_KEY;

/**
 * Marks the runs among the `n` legs of `f` (6 numbers per leg from 0: algorithm code, L, P, B, cost, group
 * length + delay), in place. A run's legs are single-leg checks (group length 1, no delay) of the token bucket
 * marked {@link UNIQUE_KEY}, of one L, P, B and cost, the cost above 0; a run is 2 legs or more.
 */
export function markRuns(f: Float64Array, n: number): void {
  let head = -1;
  for (let j = 0, b = 0; j <= n; j++, b += 6) {
    const fits = j < n && f[b] === UNIQUE_TOKEN_BUCKET && f[b + 5] === 1 && f[b + 4] > 0;
    if (fits && head >= 0) {
      const h = head * 6;
      if (f[b + 1] === f[h + 1] && f[b + 2] === f[h + 2] && f[b + 3] === f[h + 3] && f[b + 4] === f[h + 4]) continue;
    }
    // the run from head ends before leg j
    if (head >= 0 && j - head > 1) f[head * 6] += RUN_MARK * (j - head - 1);
    head = fits ? j : -1;
  }
}
