/**
 * Calendar periods: fixed windows that are a local day (`1d`), an ISO week from Monday (`1w`) or a month
 * (`1mo`) in an IANA time zone (`timeZone`, default UTC). Their length varies (a DST day is 23 or 25 h, a
 * month 28 to 31 days), so a window cannot be k·P: its bounds are computed here, in TS, with Intl, once per
 * boundary (a cached window serves every check until the clock leaves it), and handed to the kernel and the
 * Lua scripts as explicit Unix-ms bounds.
 *
 * Exactness: a window starts at the first millisecond whose local calendar date (in `timeZone`) is the
 * window's first day; it is found by binary search on the ms, so it is exact whatever the zone's offsets,
 * DST rules and midnight gaps (a zone whose clocks skip 00:00 starts its day at 01:00 local). This relies on
 * the local date never running backwards, which holds in every zone whose DST changes happen at or after
 * 00:00 going forward (all of tzdata's current zones).
 */

/** The calendar unit of a period. */
export type CalendarUnit = 'd' | 'w' | 'mo';

/** A calendar period: its unit and the IANA time zone its days start in. */
export interface CalendarPeriod {
  unit: CalendarUnit;
  /** An IANA time zone name Intl accepts (`UTC`, `Asia/Tokyo`, `Europe/Berlin`...). */
  timeZone: string;
}

/** One window: [startMs, endMs), Unix ms. */
export interface CalendarWindow {
  startMs: number;
  endMs: number;
}

/** The longest window of each unit, in ms (a 25 h DST day, a week with one, a 31-day month with one). */
export const CALENDAR_MAX_MS: Readonly<Record<CalendarUnit, number>> = {
  d: 25 * 3_600_000,
  w: 7 * 86_400_000 + 3_600_000,
  mo: 31 * 86_400_000 + 3_600_000,
};

/** The nominal length of each unit (what headers and the admin API show as the period), in ms. */
export const CALENDAR_NOMINAL_MS: Readonly<Record<CalendarUnit, number>> = {
  d: 86_400_000,
  w: 7 * 86_400_000,
  mo: 30 * 86_400_000,
};

const DAY_MS = 86_400_000;
/** Widest distance between a UTC day start and a local one (offsets reach ±14 h today; LMT went past ±15 h). */
const SEARCH_MS = 36 * 3_600_000;

const formats = new Map<string, Intl.DateTimeFormat>();

function formatFor(timeZone: string): Intl.DateTimeFormat {
  let f = formats.get(timeZone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: 'numeric', day: 'numeric', era: 'short' });
    formats.set(timeZone, f);
  }
  return f;
}

/**
 * True when Intl knows `timeZone`. The config loader refuses any other.
 */
export function isTimeZone(timeZone: string): boolean {
  try {
    formatFor(timeZone);
    return true;
  } catch {
    return false;
  }
}

/** The local calendar date at `t` in `timeZone`, as the UTC ms of that date's 00:00 (a day number × DAY_MS). */
function localDay(t: number, timeZone: string): number {
  let y = 0, m = 0, d = 0, bc = false;
  for (const p of formatFor(timeZone).formatToParts(t)) {
    if (p.type === 'year') y = Number(p.value);
    else if (p.type === 'month') m = Number(p.value);
    else if (p.type === 'day') d = Number(p.value);
    else if (p.type === 'era') bc = p.value === 'BC';
  }
  const date = new Date(0);
  date.setUTCFullYear(bc ? 1 - y : y, m - 1, d);
  return date.getTime();
}

/** The first ms whose local date is ≥ `day` (UTC ms of a date's 00:00). */
function dayStart(day: number, timeZone: string): number {
  let lo = day - SEARCH_MS; // its local date is before `day`
  let hi = day + SEARCH_MS; // its local date is `day` or later
  while (hi - lo > 1) {
    const mid = lo + Math.floor((hi - lo) / 2);
    if (localDay(mid, timeZone) >= day) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** The first day of the window holding local day `day`, and the first day of the next. */
function windowDays(day: number, unit: CalendarUnit): [number, number] {
  if (unit === 'd') return [day, day + DAY_MS];
  if (unit === 'w') {
    const monday = day - ((new Date(day).getUTCDay() + 6) % 7) * DAY_MS;
    return [monday, monday + 7 * DAY_MS];
  }
  const d = new Date(day);
  return [Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)];
}

/**
 * The calendar window holding `t` (Unix ms): [start, end) with start ≤ t < end, both exact Unix ms (see the
 * module's note). Costs two binary searches over Intl (about 60 formatToParts calls); callers cache it
 * (see {@link CalendarClock}).
 */
export function calendarWindow(period: CalendarPeriod, t: number): CalendarWindow {
  const [first, next] = windowDays(localDay(t, period.timeZone), period.unit);
  return { startMs: dayStart(first, period.timeZone), endMs: dayStart(next, period.timeZone) };
}

/**
 * The windows of one calendar period around a moving clock, cached: `at(t)` answers from the cache while t
 * stays in the window it holds, and computes the window again (and the next one) when it leaves.
 */
export class CalendarClock {
  private cur: CalendarWindow = { startMs: 1, endMs: 0 };
  private nextEnd = 0;

  constructor(readonly period: CalendarPeriod) {}

  /** The window holding `t`. */
  at(t: number): CalendarWindow {
    if (t < this.cur.startMs || t >= this.cur.endMs) {
      this.cur = calendarWindow(this.period, t);
      this.nextEnd = calendarWindow(this.period, this.cur.endMs).endMs;
    }
    return this.cur;
  }

  /** The end of the window after the one holding `t`. */
  nextEndAt(t: number): number {
    this.at(t);
    return this.nextEnd;
  }
}

const clocks = new Map<string, CalendarClock>();
/** The clock of each period object seen (a compiled limit's): found again without building its id string. */
const byPeriod = new WeakMap<CalendarPeriod, CalendarClock>();

/** The shared {@link CalendarClock} of a period (one per unit and time zone, per thread). */
export function calendarClock(period: CalendarPeriod): CalendarClock {
  let c = byPeriod.get(period);
  if (c !== undefined) return c;
  const id = `${period.unit}\u0000${period.timeZone}`;
  c = clocks.get(id);
  if (c === undefined) {
    c = new CalendarClock(period);
    clocks.set(id, c);
  }
  byPeriod.set(period, c);
  return c;
}
