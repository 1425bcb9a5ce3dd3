// Open addressing with Robin Hood linear probing and backward-shift deletion over a power-of-two array of
// 32-byte slots. The home slot comes from the hash's low bits (the router shards by the high bits, so those
// are skewed inside one shard). Robin Hood keeps probe lengths short enough to run at up to 96% load, which
// is what holds one million keys in 2^20 slots (32 MiB, about 34 bytes a key).
import { Slot, SLOT_SIZE } from './layout';

export let slots: usize = 0; // base address
export let mask: u32 = 0;
export let count: u32 = 0;
export let maxKeys: u32 = 0;

export function tableInit(base: usize, slotCount: u32, max: u32): void {
  slots = base;
  mask = slotCount - 1;
  count = 0;
  maxKeys = max;
  memory.fill(base, 0, <usize>slotCount * SLOT_SIZE);
}

@inline export function slotAt(i: u32): Slot {
  return changetype<Slot>(slots + <usize>i * SLOT_SIZE);
}

@inline function home(h: u64): u32 {
  return <u32>h & mask;
}

@inline function distance(i: u32, h: u64): u32 {
  return (i - home(h)) & mask;
}

/** The slot index holding `h`, or −1. */
export function find(h: u64): i32 {
  let i = home(h);
  let d: u32 = 0;
  while (true) {
    const s = slotAt(i);
    const sh = s.hash;
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
    const s = slotAt(i);
    const sh = s.hash;
    if (sh == 0) {
      s.hash = ch; s.w0 = c0; s.w1 = c1; s.meta = cm;
      if (placed < 0) placed = <i32>i;
      break;
    }
    const sd = distance(i, sh);
    if (sd < d) {
      // take from the rich: the carried entry settles here and the resident moves on
      const t0 = s.w0, t1 = s.w1, tm = s.meta;
      s.hash = ch; s.w0 = c0; s.w1 = c1; s.meta = cm;
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
    const n = slotAt(next);
    const s = slotAt(i);
    if (n.hash == 0 || distance(next, n.hash) == 0) {
      s.hash = 0; s.w0 = 0; s.w1 = 0; s.meta = 0;
      break;
    }
    s.hash = n.hash; s.w0 = n.w0; s.w1 = n.w1; s.meta = n.meta;
    i = next;
  }
  count--;
}
