// Reading a batch's slots ahead of deciding them. In a table far larger than the caches (1 M keys: 32 MiB)
// almost every lookup misses them, and deciding one leg after another waits for one miss at a time: the
// core's reorder window holds a leg or two of decision work, not more. wasm has no prefetch instruction, so
// the batch loop reads ahead itself, a chunk of CHUNK legs at a time, in two stages (checkBatch calls ahead()
// before each leg or group):
//   1. two chunks ahead: a load of each leg's home hash line and of the next block's (a walk is ~11 slots at
//      95% load). The loads of a chunk depend on nothing before them and follow each other closely, so the
//      core has the whole chunk's misses in flight at once.
//   2. one chunk ahead: each leg's probe walk (its hash lines are in the caches by then, so no branch waits
//      on memory) and a load of the record it found, the index kept as the leg's hint.
// Deciding the leg then finds everything in the caches. A hint is only a guess: an insert or an eviction
// between stage 2 and the decision moves slots, so it is used only if that slot still holds the leg's hash
// (hashes in the table are unique), else the leg looks its key up again. Decisions do not depend on it.
import { LEG_IN_STRIDE, IN_HASH_LO, IN_HASH_HI } from './layout';
import { find, touchHome, hashAt, slotAt, mask } from './table';

/** Tables of at least this many slots (256 Ki slots, 8 MiB) are read ahead; smaller ones stay in the caches. */
const FAR_SLOTS: u32 = 1 << 18;
/** Legs per stage: the misses a chunk puts in flight together. */
const CHUNK: u32 = 16;

let legs: usize = 0;
/** One i32 per leg of the batch: the slot stage 2 found, or −1. */
let hints: usize = 0;
/** One u64 per leg of the batch: its hash, read once by stage 1. */
let hashes: usize = 0;
let far: bool = false;
let homeTo: u32 = 0;
let findTo: u32 = 0;
/** Where the loads' values go, so that no compiler drops them. */
let sink: u64 = 0;

/** Bytes prefetchInit needs for a batch of `maxBatch` legs. */
export function prefetchBytes(maxBatch: u32): usize {
  return <usize>maxBatch * 12;
}

export function prefetchInit(legIn: usize, at: usize, maxBatch: u32): void {
  legs = legIn;
  hashes = at;
  hints = at + (<usize>maxBatch << 3);
}

@inline function hashOf(leg: u32): u64 {
  const p = legs + <usize>leg * LEG_IN_STRIDE;
  return (<u64><u32>load<f64>(p, IN_HASH_HI) << 32) | <u64><u32>load<f64>(p, IN_HASH_LO);
}

/**
 * Starts a batch of `n` legs: nothing read ahead yet. A batch of a chunk or less (a single check) has nothing
 * to overlap and is not read ahead.
 */
export function prefetchStart(n: u32): void {
  far = mask + 1 >= FAR_SLOTS && n > CHUNK;
  homeTo = 0;
  findTo = 0;
}

/** Reads ahead of leg `i` of a batch of `n` legs (a no-op for a table that fits the caches). */
@inline export function ahead(i: u32, n: u32): void {
  if (far) readAhead(i, n);
}

function readAhead(i: u32, n: u32): void {
  if (i < findTo) return;
  let acc: u64 = 0;
  // stage 1 up to two chunks past this one (on the batch's first call, from its start)
  let to = i + 3 * CHUNK;
  if (to > n) to = n;
  let prev: u64 = homeTo > 0 ? load<u64>(hashes + (<usize>(homeTo - 1) << 3)) : 0;
  for (let j = homeTo; j < to; j++) {
    const h = hashOf(j);
    store<u64>(hashes + (<usize>j << 3), h);
    // a run of one key (a hot key) reads its lines once
    if (h != prev) acc ^= touchHome(h);
    prev = h;
  }
  homeTo = to;
  // stage 2 up to the next chunk: first every walk (in the caches), then the records in one burst
  const from = findTo;
  to = i + 2 * CHUNK;
  if (to > n) to = n;
  prev = 0;
  let idx: i32 = -1;
  for (let j = from; j < to; j++) {
    const h = load<u64>(hashes + (<usize>j << 3));
    if (h != prev) idx = find(h);
    prev = h;
    store<i32>(hints + (<usize>j << 2), idx);
  }
  prev = 0;
  for (let j = from; j < to; j++) {
    const h = load<u64>(hashes + (<usize>j << 3));
    idx = load<i32>(hints + (<usize>j << 2));
    if (idx >= 0 && h != prev) acc ^= slotAt(<u32>idx).meta;
    prev = h;
  }
  findTo = to;
  sink ^= acc;
}

/** The slot holding `h`, the hash of leg `leg`, or −1: its hint when still right, else a lookup. */
@inline export function slotOf(leg: u32, h: u64): i32 {
  if (far && leg < findTo) {
    const x = load<i32>(hints + (<usize>leg << 2));
    if (x >= 0 && hashAt(<u32>x) == h) return x;
  }
  return find(h);
}
