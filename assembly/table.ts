// Open addressing with Robin Hood linear probing and backward-shift deletion over a power-of-two array of
// slots. The home slot comes from the hash's low bits (the router shards by the high bits, so those are
// skewed inside one shard). Robin Hood keeps probe lengths short enough to run at up to 96% load, which is
// what holds one million keys in 2^20 slots (32 MiB, about 34 bytes a key).
//
// At that load a lookup walks about 11 slots (linear probing's mean for a key present, (1 + 1/(1 − α)) / 2 at
// α = 0.95), so the hashes are stored apart from the state, in blocks (assembly/layout.ts): a walk reads 8
// hashes per cache line instead of 2 whole slots, and the record it ends at is in the same page.
import { Slot, SLOT_BLOCK, BLOCK_SIZE, RECORD_SIZE } from './layout';

export let slots: usize = 0; // base address
export let mask: u32 = 0;
export let count: u32 = 0;
export let maxKeys: u32 = 0;

/** Bytes of a table of `slotCount` slots (whole blocks). */
export function tableBytes(slotCount: u32): u64 {
  return (<u64>(slotCount + SLOT_BLOCK - 1) / SLOT_BLOCK) * <u64>BLOCK_SIZE;
}

export function tableInit(base: usize, slotCount: u32, max: u32): void {
  slots = base;
  mask = slotCount - 1;
  count = 0;
  maxKeys = max;
  memory.fill(base, 0, <usize>tableBytes(slotCount));
}

/** Address of slot i's hash. */
@inline export function hashPtr(i: u32): usize {
  return slots + <usize>(i >> 3) * BLOCK_SIZE + (<usize>(i & 7) << 3);
}

@inline export function hashAt(i: u32): u64 {
  return load<u64>(hashPtr(i));
}

/** Slot i's record (w0, w1, meta). */
@inline export function slotAt(i: u32): Slot {
  return changetype<Slot>(slots + <usize>(i >> 3) * BLOCK_SIZE + 64 + <usize>(i & 7) * RECORD_SIZE);
}

@inline function home(h: u64): u32 {
  return <u32>h & mask;
}

@inline function distance(i: u32, h: u64): u32 {
  return (i - home(h)) & mask;
}

/**
 * Reads the line holding the hash of `h`'s home slot and the next block's (a prefetch: wasm has none), for
 * the walk from home that usually crosses into the next block at high load.
 */
@inline export function touchHome(h: u64): u64 {
  const i = home(h);
  return load<u64>(hashPtr(i)) ^ load<u64>(hashPtr((i + SLOT_BLOCK) & mask));
}

/** The slot index holding `h`, or −1. */
export function find(h: u64): i32 {
  let i = home(h);
  let d: u32 = 0;
  while (true) {
    const sh = hashAt(i);
    if (sh == h) return <i32>i;
    // an empty slot, or one richer than we would be here, ends the search
    if (sh == 0 || distance(i, sh) < d) return -1;
    i = (i + 1) & mask;
    d++;
  }
}

/** Inserts absent `h` with zeroed state and returns its index. The caller guarantees count < maxKeys. */
export function insert(h: u64): u32 {
  let i = home(h);
  let d: u32 = 0;
  let ch = h, c0: u64 = 0, c1: u64 = 0, cm: u64 = 0;
  let placed: i32 = -1;
  while (true) {
    const hp = hashPtr(i);
    const sh = load<u64>(hp);
    if (sh == 0) {
      const s = slotAt(i);
      store<u64>(hp, ch); s.w0 = c0; s.w1 = c1; s.meta = cm;
      if (placed < 0) placed = <i32>i;
      break;
    }
    const sd = distance(i, sh);
    if (sd < d) {
      // take from the rich: the carried entry settles here and the resident moves on
      const s = slotAt(i);
      const t0 = s.w0, t1 = s.w1, tm = s.meta;
      store<u64>(hp, ch); s.w0 = c0; s.w1 = c1; s.meta = cm;
      ch = sh; c0 = t0; c1 = t1; cm = tm;
      if (placed < 0) placed = <i32>i;
      d = sd;
    }
    i = (i + 1) & mask;
    d++;
  }
  count++;
  return <u32>placed;
}

/** Removes the entry at `i`, shifting its followers back so no tombstone is needed. */
export function removeAt(i: u32): void {
  while (true) {
    const next = (i + 1) & mask;
    const nh = hashAt(next);
    const s = slotAt(i);
    if (nh == 0 || distance(next, nh) == 0) {
      store<u64>(hashPtr(i), 0); s.w0 = 0; s.w1 = 0; s.meta = 0;
      break;
    }
    const n = slotAt(next);
    store<u64>(hashPtr(i), nh); s.w0 = n.w0; s.w1 = n.w1; s.meta = n.meta;
    i = next;
  }
  count--;
}
