import { describe } from '../keys/derive.js';
import { SluiceError, clockError } from '../util/errors.js';

/** Clock values the kernel keeps exactly (last-seen times are stored in 48 bits). */
export const MAX_TIME = 2 ** 48 - 1;

/**
 * Reads the limiter's clock once.
 * @throws SluiceError CLOCK when the clock throws or returns anything but an integer Unix-epoch ms in [0, 2^48).
 */
export function readClock(clock: () => number): number {
  let now: unknown;
  try {
    now = clock();
  } catch (e) {
    throw clockError(`clock threw: ${(e as Error)?.message ?? String(e)}`);
  }
  if (typeof now !== 'number' || !Number.isSafeInteger(now) || now < 0 || now > MAX_TIME) {
    throw clockError(`clock must return integer Unix-epoch ms in [0, 2^48) (got ${describe(now)})`);
  }
  return now;
}
