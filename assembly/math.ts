// Integer helpers. All kernel arithmetic is unsigned 64-bit; the policy loader guarantees the ranges noted
// at each call site (B·P, L·P < 2^63, so sums of two such values stay below 2^64).

/** ceil(a / b) for b > 0, without the overflow of (a + b − 1) / b. */
@inline export function ceilDiv(a: u64, b: u64): u64 {
  const q = a / b;
  return q + (q * b != a ? 1 : 0);
}

@inline export function max64(a: u64, b: u64): u64 {
  return a > b ? a : b;
}
