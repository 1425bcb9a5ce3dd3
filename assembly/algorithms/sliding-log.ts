// Sliding log: the exact count of admitted cost in the trailing period (t − P, t]. Each key keeps a ring of
// entries [timestamp, count] in its arena block (assembly/log-arena.ts), oldest first, one entry per ms
// (checks admitted in the same ms add to its count; equal timestamps each count). An entry at ts leaves the
// window at ts + P. Bound: live entries have distinct ms in (t − P, t] and counts ≥ 1 summing to ≤ L, so a
// key holds at most min(L, P) entries; setLimit refuses a limit whose bound passes the block size.
//
// Evaluation only reads; an admitted check's entry is written by slidingLogCommit, so a group's legs all
// commit or none does.
import { Limit } from '../layout';
import { entryAt, logEntries } from '../log-arena';
import { allow, deny, never } from '../result';

/**
 * Decides cost c at t for a key whose ring is (block w0, head and len in w1), or a fresh key. On admission
 * R.nw0 = c (the cost slidingLogCommit appends) and R.nw1 = 0.
 */
export function slidingLog(lim: Limit, exists: bool, w0: u64, w1: u64, c: u64, t: u64): void {
  const L = lim.L, P = lim.P;
  let sum: u64 = 0;
  let newest: u64 = 0;
  let live: u32 = 0;
  const b = <u32>w0, head = <u32>w1, len: u32 = exists ? <u32>(w1 >> 32) : 0;
  const N = logEntries;
  for (let i: u32 = 0; i < len; i++) {
    const e = entryAt(b, (head + i) % N);
    const ts = load<u64>(e);
    if (ts + P <= t) continue; // left the window (entries are oldest first: only a prefix does)
    sum += load<u64>(e, 8);
    newest = ts;
    live++;
  }
  const room = sum < L ? L - sum : 0;
  const reset = live > 0 ? newest + P - t : 0;
  if (c > L) {
    never(room, reset);
  } else if (c <= room) {
    allow(room - c, c > 0 ? P : reset, c, 0, c);
  } else {
    // the oldest entries must leave until what stays is ≤ L − c: the wait ends when the last of them leaves
    let stay = sum;
    let retry: u64 = 1;
    for (let i: u32 = 0; i < len; i++) {
      const e = entryAt(b, (head + i) % N);
      const ts = load<u64>(e);
      if (ts + P <= t) continue;
      stay -= load<u64>(e, 8);
      if (stay + c <= L) { retry = ts + P - t; break; }
    }
    deny(room, reset, retry);
  }
}

/**
 * Appends an admitted cost c at t to block b's ring (head | len << 32 in w1), dropping the entries that have
 * left the window first. Returns the ring's new w1.
 */
export function slidingLogCommit(lim: Limit, b: u32, w1: u64, c: u64, t: u64): u64 {
  const N = logEntries;
  let head = <u32>w1, len = <u32>(w1 >> 32);
  while (len > 0 && load<u64>(entryAt(b, head)) + lim.P <= t) {
    head = (head + 1) % N;
    len--;
  }
  if (len > 0) {
    const last = entryAt(b, (head + len - 1) % N);
    if (load<u64>(last) == t) {
      store<u64>(last, load<u64>(last, 8) + c, 8);
      return (<u64>len << 32) | head;
    }
  }
  const e = entryAt(b, (head + len) % N); // len < N: at most min(L, P) ≤ N entries are ever live
  store<u64>(e, t);
  store<u64>(e, c, 8);
  len++;
  return (<u64>len << 32) | head;
}

@inline export function slidingLogIdle(lim: Limit, last: u64, now: u64): bool {
  return now >= last + lim.P;
}
