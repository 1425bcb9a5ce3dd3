/**
 * A check's Redis keys as the bytes of a RESP request (`$<bytes>\r\n<key>\r\n` per key), made once per key
 * and kept with what the instance knows of it (src/engine/strict/table.ts): the check script's request then
 * copies these bytes (src/store/check-call.ts) instead of building a string of every key, counting its UTF-8
 * bytes and writing it per call, which was a quarter of the client's CPU per strict decision at 64 in flight
 * (`--cpu-prof` of the bench's loop: the string's flattening and `Buffer.byteLength` read every key's
 * characters again on every call).
 */
export function keyWire(keys: readonly string[]): Buffer {
  let s = '';
  for (const k of keys) s += `$${Buffer.byteLength(k)}\r\n${k}\r\n`;
  return Buffer.from(s);
}
