// The sliding log's entries live outside the 32-byte slots, in one arena of equal blocks allocated at init:
// `blocks` blocks of `entries` entries of 16 bytes ([timestamp ms u64, count u64]). A key's slot holds its
// block's index (w0) and the ring's head and length (w1 = head | len << 32). One block size for the whole
// kernel keeps the arena free of fragmentation: a freed block serves any sliding-log key. Free blocks form a
// list threaded through their first word.
export const ENTRY_SIZE: usize = 16;
const NONE: u32 = 0xffffffff;

export let logBase: usize = 0;
export let logBlocks: u32 = 0;
export let logEntries: u32 = 0;
let blockBytes: usize = 0;
let bump: u32 = 0;
let freeHead: u32 = NONE;
/** Blocks in use. */
export let logUsed: u32 = 0;

export function logInit(base: usize, blocks: u32, entries: u32): void {
  logBase = base;
  logBlocks = blocks;
  logEntries = entries;
  blockBytes = <usize>entries * ENTRY_SIZE;
  bump = 0;
  freeHead = NONE;
  logUsed = 0;
}

/** A free block's index, or −1 when every block is in use (the caller evicts a sliding-log key and retries). */
export function logAlloc(): i64 {
  let b: u32;
  if (freeHead != NONE) {
    b = freeHead;
    freeHead = load<u32>(logBase + <usize>b * blockBytes);
  } else if (bump < logBlocks) {
    b = bump++;
  } else {
    return -1;
  }
  logUsed++;
  return <i64>b;
}

export function logFree(b: u32): void {
  store<u32>(logBase + <usize>b * blockBytes, freeHead);
  freeHead = b;
  logUsed--;
}

/** Address of entry `i` (0 ≤ i < entries) of block `b`. */
@inline export function entryAt(b: u32, i: u32): usize {
  return logBase + <usize>b * blockBytes + <usize>i * ENTRY_SIZE;
}
