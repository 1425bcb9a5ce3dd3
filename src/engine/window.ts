/**
 * The window roll on the JS side, written once: which counts an epoch-aligned window state (as the kernel
 * and the Lua scripts store it) holds at time `t`. Windows are [k·P, (k+1)·P) aligned to the Unix epoch; a
 * state's `last` (Unix ms) names the window its counts were made in. The kernel rolls the same way
 * (assembly/algorithms/fixed-window.ts, sliding-window.ts) and so does Lua (lua/lib.lua fwRoll, swRoll).
 */

/**
 * A fixed window's count at `t` (ms): w0 if `last` is in t's window, else 0 (the window ended).
 * @param held whether the key holds a state at all.
 */
export function fixedWindowCount(periodMs: number, held: boolean, w0: number, last: number, t: number): number {
  return held && Math.floor(last / periodMs) === Math.floor(t / periodMs) ? w0 : 0;
}

/**
 * A sliding window counter's counts at `t` (ms): `current` of t's window and `previous` of the one before.
 * The state holds (w0, w1) = (previous, current) as of `last`'s window; one window on, its current becomes
 * the previous; two or more on, both are 0.
 */
export function slidingWindowCounts(periodMs: number, held: boolean, w0: number, w1: number, last: number, t: number):
  { previous: number; current: number } {
  if (!held) return { previous: 0, current: 0 };
  const k = Math.floor(t / periodMs);
  const lk = Math.floor(last / periodMs);
  if (lk === k) return { previous: w0, current: w1 };
  if (lk + 1 === k) return { previous: w1, current: 0 };
  return { previous: 0, current: 0 };
}
