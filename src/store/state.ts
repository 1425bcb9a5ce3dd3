/**
 * A Redis-backed key's stored state, as lua/lib.lua writes and reads it (encodeState / decodeState): w0, w1,
 * lastSeen as three little-endian doubles, 24 bytes. The decimal text "w0 w1 lastSeen" of earlier versions
 * is still read.
 */

/** 2^53: the integers a double holds exactly. */
const MAXN = 2 ** 53;

/** [w0, w1, lastSeen] of a stored value, or null when it is not a state (lua/lib.lua decodeState's rule). */
export function decodeState(raw: Buffer): [w0: number, w1: number, last: number] | null {
  if (raw.length === 24) {
    const w0 = raw.readDoubleLE(0), w1 = raw.readDoubleLE(8), last = raw.readDoubleLE(16);
    if (Number.isInteger(w0) && Number.isInteger(w1) && Number.isInteger(last) && w0 >= -MAXN && w0 <= MAXN &&
      w1 >= 0 && w1 <= MAXN && last >= 0 && last <= MAXN) return [w0, w1, last];
  }
  const m = /^(-?\d+) (\d+) (\d+)$/.exec(raw.toString('latin1'));
  return m === null ? null : [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** The state packed as lua/lib.lua encodeState packs it (for tests and tools that plant a state). */
export function encodeState(w0: number, w1: number, last: number): Buffer {
  const b = Buffer.allocUnsafe(24);
  b.writeDoubleLE(w0, 0);
  b.writeDoubleLE(w1, 8);
  b.writeDoubleLE(last, 16);
  return b;
}
