/**
 * A writer's buffer made larger: a copy of `buf`'s first `used` bytes in a buffer of at least `need` bytes,
 * doubling, so a writer that grows with what it is asked to hold copies each byte O(1) times on average.
 */
export function grown(buf: Uint8Array, used: number, need: number): Uint8Array {
  let size = buf.byteLength * 2;
  while (size < need) size *= 2;
  const next = new Uint8Array(size);
  next.set(buf.subarray(0, used));
  return next;
}
