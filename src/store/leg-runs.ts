/**
 * Runs in a check call's legs (lua/check.lua ARGV[4]): consecutive single-leg token-bucket checks on keys no
 * other leg of the call names, all of one L, P, B and cost. The first leg of such a run carries
 * {@link RUN_MARK} × (the run's length − 1) on its algorithm code, and the legs after it are not packed: the
 * script gives them the head's 6 numbers and decides the run's admissions with them, without reading bytes of
 * their own (for a call of 32 such checks, 1,488 bytes less for Redis to read and intern as a Lua string, and
 * one struct.unpack and a dozen shape tests less per leg: bench/README.md, "Redis instructions per decision").
 *
 * The mark is the call's wire format, made as the legs are packed ({@link packLegs}, for src/store/check-call.ts
 * and src/store/cluster-calls.ts) after the engine's own marks: the engine's legs and the MemoryStore never
 * carry it.
 */
import { endianness } from 'node:os';
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

/** Whether a Float64Array holds little-endian doubles here (then the packed legs are sent as they lie). */
const LITTLE_ENDIAN = endianness() === 'LE';

/** The legs of the call being packed, as doubles (grown as needed; {@link packLegs} returns a view of it). */
let legScratch = new Float64Array(64 * 6);

/**
 * lua/check.lua's ARGV[4] for the `n` legs of `args` from `from` (6 numbers per leg: algorithm code, L, P, B,
 * cost, group length + delay): each leg's numbers as little-endian doubles, its runs packed by
 * {@link packRuns} (6 doubles, 48 bytes, per leg kept). `args` is left as it is. The bytes are a view of one
 * scratch shared by every call: valid until the next call, so copy them before packing another call's legs.
 */
export function packLegs(args: ArrayLike<number>, from: number, n: number): Uint8Array {
  const m = n * 6;
  // the doubles are made in one scratch reused call after call (a request's Buffer, from Node's pool, need not
  // start at a multiple of 8 to hold them), then packed there, and their bytes copied where they go
  if (legScratch.length < m) legScratch = new Float64Array(Math.max(m, 2 * legScratch.length));
  const f = legScratch;
  for (let i = 0; i < m; i++) f[i] = args[from + i];
  const bytes = packRuns(f, n) * 8;
  // a big-endian host: each double's bytes turned around in place (the scratch is refilled on every call); a
  // plain view otherwise, cheaper to make than a Buffer's
  return LITTLE_ENDIAN ? new Uint8Array(f.buffer, 0, bytes) : Buffer.from(f.buffer, 0, bytes).swap64();
}
