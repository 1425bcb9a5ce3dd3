/**
 * Runs in a check call's legs (lua/check.lua ARGV[4]): consecutive single-leg token-bucket checks on keys no
 * other leg of the call names, all of one L, P, B and cost. The first leg of such a run carries
 * {@link RUN_MARK} × (the run's length − 1) on its algorithm code, and the legs after it are not packed: the
 * script gives them the head's 6 numbers and decides the run's admissions with them, without reading bytes of
 * their own (for a call of 32 such checks, 1,488 bytes less for Redis to read and intern as a Lua string, and
 * one struct.unpack and a dozen shape tests less per leg: bench/README.md, "Redis instructions per decision").
 *
 * The mark is the call's wire format, made as the legs are packed (src/store/check-call.ts,
 * src/store/cluster-calls.ts) after the engine's own marks: the engine's legs and the MemoryStore never carry
 * it.
 */
import { UNIQUE_KEY } from './contract.js';

/** Added per further leg of a run to its first leg's algorithm code (lua/check.lua RUN). */
export const RUN_MARK = 32;

/** The token bucket's algorithm code (src/config/policy-spec.ts ALGORITHM_CODES, pinned by a test), marked unique. */
const UNIQUE_TOKEN_BUCKET = 0 + UNIQUE_KEY;

/**
 * Packs the runs among the `n` legs of `f` (6 numbers per leg from 0: algorithm code, L, P, B, cost, group
 * length + delay), in place: each run's head marked, the legs after it removed, the other legs moved up in
 * order. Returns how many numbers of `f` are now the call's packed legs (6 per leg kept). A run's legs are
 * single-leg checks (group length 1, no delay) of the token bucket marked {@link UNIQUE_KEY}, of one L, P, B
 * and cost, the cost above 0; a run is 2 legs or more.
 */
export function packRuns(f: Float64Array, n: number): number {
  // w: where the next kept leg goes; head: the kept place of the run being grown (−1: none), its leg's numbers
  // stay there while the run grows
  let w = 0, head = -1;
  for (let j = 0, b = 0; j < n; j++, b += 6) {
    const fits = f[b] === UNIQUE_TOKEN_BUCKET && f[b + 5] === 1 && f[b + 4] > 0;
    if (fits && head >= 0 && f[b + 1] === f[head + 1] && f[b + 2] === f[head + 2] && f[b + 3] === f[head + 3] && f[b + 4] === f[head + 4]) {
      f[head] += RUN_MARK;
      continue;
    }
    if (w !== b) for (let k = 0; k < 6; k++) f[w + k] = f[b + k];
    head = fits ? w : -1;
    w += 6;
  }
  return w;
}
