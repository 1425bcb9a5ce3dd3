/**
 * The JS window roll (src/engine/window.ts): exact counts at the edges of epoch-aligned windows of 1,000 ms.
 */
import { describe, expect, it } from 'vitest';
import { fixedWindowCount, slidingWindowCounts } from '../../../src/engine/window.js';

describe('window roll', () => {
  it('fixed window: the count holds to the window\'s last ms and is 0 from the next window', () => {
    expect(fixedWindowCount(1000, true, 7, 5_000, 5_000)).toBe(7);
    expect(fixedWindowCount(1000, true, 7, 5_000, 5_999)).toBe(7);
    expect(fixedWindowCount(1000, true, 7, 5_999, 6_000)).toBe(0);
    expect(fixedWindowCount(1000, false, 7, 5_000, 5_000)).toBe(0);
  });

  it('sliding window: same window, one window on (current becomes previous), two windows on', () => {
    expect(slidingWindowCounts(1000, true, 3, 4, 5_500, 5_999)).toEqual({ previous: 3, current: 4 });
    expect(slidingWindowCounts(1000, true, 3, 4, 5_500, 6_000)).toEqual({ previous: 4, current: 0 });
    expect(slidingWindowCounts(1000, true, 3, 4, 5_500, 6_999)).toEqual({ previous: 4, current: 0 });
    expect(slidingWindowCounts(1000, true, 3, 4, 5_500, 7_000)).toEqual({ previous: 0, current: 0 });
    expect(slidingWindowCounts(1000, false, 3, 4, 5_500, 5_500)).toEqual({ previous: 0, current: 0 });
  });
});
