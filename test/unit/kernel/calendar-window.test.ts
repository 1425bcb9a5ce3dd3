/**
 * Calendar windows (fixed_window over `1d` in a time zone, `1w`, `1mo`) in the kernel: the window bounds come
 * from src/util/calendar.ts (Kernel.decide sets them when the clock leaves the window it holds), each key
 * keeps its count with the end of its window. Expectations are hand-computed from the calendar: 31 January
 * 23:59 in Asia/Tokyo, both DST nights of 2026 in Europe/Berlin, February 2028 (a leap year), an ISO week.
 */
import { describe, expect, it } from 'vitest';
import type { KernelLimit } from '../../../src/shard/protocol.js';
import { CALENDAR_WINDOW_CODE } from '../../../src/config/policy-spec.js';
import { allow, check, deny, never, newKernel, peek } from './harness.js';

const H = 3_600_000;
const D = 24 * H;

function cal(limit: number, unit: 'd' | 'w' | 'mo', timeZone: string): KernelLimit {
  return { algorithmCode: CALENDAR_WINDOW_CODE, limit, periodMs: D, burst: limit, calendar: { unit, timeZone } };
}

const TOKYO_MONTH = 0;
const BERLIN_DAY = 1;
const UTC_MONTH = 2;
const UTC_WEEK = 3;
const LIMITS = [cal(3, 'mo', 'Asia/Tokyo'), cal(2, 'd', 'Europe/Berlin'), cal(5, 'mo', 'UTC'), cal(1, 'w', 'UTC')];
const fresh = () => newKernel(LIMITS);

describe('calendar windows in the kernel', () => {
  it('Asia/Tokyo month: 31 January 23:59 local has 60 s left; 00:00 on 1 February starts a 28-day window', () => {
    const k = fresh();
    const t = Date.parse('2026-01-31T14:59:00Z'); // 23:59 JST
    expect(check(k, 1, TOKYO_MONTH, 1, t)).toStrictEqual(allow(2, 60_000));
    expect(check(k, 1, TOKYO_MONTH, 2, t)).toStrictEqual(allow(0, 60_000));
    expect(check(k, 1, TOKYO_MONTH, 1, t + 59_999)).toStrictEqual(deny(0, 1, 1));
    // 2026-02-01 00:00 JST: February 2026 has 28 days
    expect(check(k, 1, TOKYO_MONTH, 1, t + 60_000)).toStrictEqual(allow(2, 28 * D));
    expect(check(k, 1, TOKYO_MONTH, 4, t + 60_000)).toStrictEqual(never(2, 28 * D));
    // in UTC the same instant is 31 January 15:00: a UTC month limit is still in January
    expect(check(k, 1, UTC_MONTH, 1, t + 60_000)).toStrictEqual(allow(4, 9 * H));
  });

  it('Europe/Berlin, spring forward (29 March 2026): the local day is 23 h', () => {
    const k = fresh();
    const start = Date.parse('2026-03-28T23:00:00Z'); // 00:00 CET
    expect(check(k, 1, BERLIN_DAY, 1, start)).toStrictEqual(allow(1, 23 * H));
    // 01:30 CET, 30 minutes before the clocks jump to 03:00 CEST
    expect(check(k, 1, BERLIN_DAY, 1, start + 90 * 60_000)).toStrictEqual(allow(0, 23 * H - 90 * 60_000));
    expect(check(k, 1, BERLIN_DAY, 1, start + 23 * H - 1)).toStrictEqual(deny(0, 1, 1));
    // 30 March 00:00 CEST = 29 March 22:00 UTC, a 24 h day
    expect(check(k, 1, BERLIN_DAY, 1, start + 23 * H)).toStrictEqual(allow(1, 24 * H));
  });

  it('Europe/Berlin, fall back (25 October 2026): the local day is 25 h, 02:00-03:00 twice in one window', () => {
    const k = fresh();
    const start = Date.parse('2026-10-24T22:00:00Z'); // 00:00 CEST
    const firstTwo = Date.parse('2026-10-25T00:30:00Z'); // 02:30 CEST
    const secondTwo = Date.parse('2026-10-25T01:30:00Z'); // 02:30 CET, the same wall time an hour later
    expect(check(k, 1, BERLIN_DAY, 1, start)).toStrictEqual(allow(1, 25 * H));
    expect(check(k, 1, BERLIN_DAY, 1, firstTwo)).toStrictEqual(allow(0, 25 * H - 150 * 60_000));
    expect(check(k, 1, BERLIN_DAY, 1, secondTwo)).toStrictEqual(deny(0, 25 * H - 210 * 60_000, 25 * H - 210 * 60_000));
    expect(check(k, 1, BERLIN_DAY, 1, start + 25 * H)).toStrictEqual(allow(1, 24 * H));
  });

  it('February 2028 (leap year, UTC): 29 days; the last ms of the 29th, then March', () => {
    const k = fresh();
    const feb1 = Date.parse('2028-02-01T00:00:00Z');
    expect(check(k, 1, UTC_MONTH, 5, feb1)).toStrictEqual(allow(0, 29 * D));
    const last = Date.parse('2028-02-29T23:59:59.999Z');
    expect(check(k, 1, UTC_MONTH, 1, last)).toStrictEqual(deny(0, 1, 1));
    expect(peek(k, 1, UTC_MONTH, last + 1)).toStrictEqual(allow(5, 31 * D));
    expect(check(k, 1, UTC_MONTH, 5, last + 1)).toStrictEqual(allow(0, 31 * D));
  });

  it('ISO week (UTC): from Monday 00:00; Tuesday noon has 5.5 days left', () => {
    const k = fresh();
    const tue = Date.parse('2026-12-01T12:00:00Z');
    expect(check(k, 1, UTC_WEEK, 1, tue)).toStrictEqual(allow(0, 5 * D + 12 * H));
    const sun = Date.parse('2026-12-06T23:59:59.999Z');
    expect(check(k, 1, UTC_WEEK, 1, sun)).toStrictEqual(deny(0, 1, 1));
    expect(check(k, 1, UTC_WEEK, 1, sun + 1)).toStrictEqual(allow(0, 7 * D));
  });

  it('a clock that runs back into the previous window decides at the key\'s last time (time never runs backwards)', () => {
    const k = fresh();
    const feb1 = Date.parse('2026-02-01T00:00:00Z');
    expect(check(k, 1, UTC_MONTH, 2, feb1)).toStrictEqual(allow(3, 28 * D));
    // the clock says 31 January: the kernel is set to January's window, but key 1 lives in February
    expect(check(k, 1, UTC_MONTH, 3, feb1 - 1000)).toStrictEqual(allow(0, 28 * D));
    // a fresh key at that time counts in January
    expect(check(k, 2, UTC_MONTH, 1, feb1 - 1000)).toStrictEqual(allow(4, 1000));
  });

  it('a key idle past its window reads as fresh and can be evicted first', () => {
    const k = newKernel(LIMITS, { maxKeys: 2 });
    const t = Date.parse('2026-05-31T23:59:59.000Z');
    expect(check(k, 1, UTC_MONTH, 5, t)).toStrictEqual(allow(0, 1000));
    expect(check(k, 2, UTC_MONTH, 5, t + 500)).toStrictEqual(allow(0, 500));
    // June: key 1's window is over (idle), key 2's too; a third key evicts one of them, both idle
    expect(check(k, 3, UTC_MONTH, 1, t + 1000)).toStrictEqual(allow(4, 30 * D));
    expect(k.stats().keys).toBe(2);
    expect(check(k, 1, UTC_MONTH, 5, t + 1000)).toStrictEqual(allow(0, 30 * D));
  });
});
