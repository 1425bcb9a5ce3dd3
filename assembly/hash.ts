// XXH64 (Yann Collet, https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), over bytes in linear
// memory. 64-bit, seeded; the seed carries the policy (name and version), so equal keys under two policies
// hash apart without any string joining.
const P1: u64 = 0x9E3779B185EBCA87;
const P2: u64 = 0xC2B2AE3D27D4EB4F;
const P3: u64 = 0x165667B19E3779F9;
const P4: u64 = 0x85EBCA77C2B2AE63;
const P5: u64 = 0x27D4EB2F165667C5;

@inline function round(acc: u64, input: u64): u64 {
  return rotl<u64>(acc + input * P2, 31) * P1;
}

@inline function merge(acc: u64, val: u64): u64 {
  return (acc ^ round(0, val)) * P1 + P4;
}

export function xxh64(ptr: usize, len: usize, seed: u64): u64 {
  const end = ptr + len;
  let h: u64;
  if (len >= 32) {
    const limit = end - 32;
    let v1 = seed + P1 + P2;
    let v2 = seed + P2;
    let v3 = seed;
    let v4 = seed - P1;
    do {
      v1 = round(v1, load<u64>(ptr));
      v2 = round(v2, load<u64>(ptr, 8));
      v3 = round(v3, load<u64>(ptr, 16));
      v4 = round(v4, load<u64>(ptr, 24));
      ptr += 32;
    } while (ptr <= limit);
    h = rotl<u64>(v1, 1) + rotl<u64>(v2, 7) + rotl<u64>(v3, 12) + rotl<u64>(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = seed + P5;
  }
  h += <u64>len;
  while (ptr + 8 <= end) {
    h ^= round(0, load<u64>(ptr));
    h = rotl<u64>(h, 27) * P1 + P4;
    ptr += 8;
  }
  if (ptr + 4 <= end) {
    h ^= <u64>load<u32>(ptr) * P1;
    h = rotl<u64>(h, 23) * P2 + P3;
    ptr += 4;
  }
  while (ptr < end) {
    h ^= <u64>load<u8>(ptr) * P5;
    h = rotl<u64>(h, 11) * P1;
    ptr++;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}
