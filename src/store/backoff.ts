/**
 * How every Redis connection of sluice reconnects: exponential backoff from 50 ms, capped at 2 s, with
 * jitter (×0.5 to ×1.5, so instances that lost one Redis do not all come back in step), never giving up.
 * @param n the attempt, from 1
 * @returns the wait before it, in ms
 */
export function reconnectBackoff(n: number): number {
  return Math.round(Math.min(50 * 2 ** n, 2000) * (0.5 + Math.random()));
}
