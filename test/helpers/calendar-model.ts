/**
 * Calendar windows for the reference model, computed independently of src/util/calendar.ts: the local
 * wall clock comes from `toLocaleString('sv-SE')` (its formatter kept per zone) and the UTC offset from it;
 * a day starts at the offset fixpoint of its local 00:00, or, when that local time does not exist (a DST gap
 * at midnight), at the first minute, then second, then ms, whose local date is the day, found by counting
 * forward. Slow and plain, by design; windows are cached per day.
 */

const DAY = 86_400_000;

const formats = new Map<string, Intl.DateTimeFormat>();

/**
 * `new Date(t).toLocaleString('sv-SE', { timeZone: tz })` with its formatter built once per zone:
 * toLocaleString builds one on every call (~50 times the cost of formatting), and this model calls it for
 * every check. The options are the ones toLocaleString fills in (ECMA-402 ToDateTimeOptions "any", "all"),
 * so the text is the same.
 */
function localeString(t: number, tz: string): string {
  let f = formats.get(tz);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('sv-SE', { timeZone: tz, year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formats.set(tz, f);
  }
  return f.format(t);
}

/** Local [y, m, d, h, mi, s] at `t` in `tz`. */
function wall(t: number, tz: string): number[] {
  const s = localeString(t, tz); // "2026-01-31 23:59:00"
  const m = /^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+)$/.exec(s);
  if (m === null) throw new Error(`calendar-model: unexpected local time "${s}"`);
  return m.slice(1).map(Number);
}

/** Local date at t as UTC ms of its 00:00. */
function localDate(t: number, tz: string): number {
  const [y, mo, d] = wall(t, tz);
  return Date.UTC(y, mo - 1, d);
}

/** Local time − UTC at t, in ms. */
function offset(t: number, tz: string): number {
  const [y, mo, d, h, mi, s] = wall(t, tz);
  const whole = t - (((t % 1000) + 1000) % 1000);
  return Date.UTC(y, mo - 1, d, h, mi, s) - whole;
}

function dayStart(day: number, tz: string): number {
  const u = day - offset(day - offset(day, tz), tz);
  if (localDate(u, tz) === day && localDate(u - 1, tz) < day) return u;
  // no local midnight (or the fixpoint missed): count forward from well before, minutes, then s, then ms
  let t = day - 15 * 3_600_000;
  while (localDate(t + 60_000, tz) < day) t += 60_000;
  while (localDate(t + 1000, tz) < day) t += 1000;
  while (localDate(t + 1, tz) < day) t += 1;
  return t + 1;
}

const cache = new Map<string, readonly [bigint, bigint]>();

/** The model's window function for a calendar period (unit d, w or mo) in time zone `tz`. */
export function modelWindow(unit: 'd' | 'w' | 'mo', tz: string): (t: bigint) => readonly [bigint, bigint] {
  return (tb: bigint) => {
    const t = Number(tb);
    const day = localDate(t, tz);
    const id = `${unit}|${tz}|${day}`;
    let w = cache.get(id);
    if (w === undefined) {
      const date = new Date(day);
      let first: number, next: number;
      if (unit === 'd') {
        first = day;
        next = day + DAY;
      } else if (unit === 'w') {
        const back = (date.getUTCDay() + 6) % 7; // days since Monday
        first = day - back * DAY;
        next = first + 7 * DAY;
      } else {
        first = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
        next = Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
      }
      w = [BigInt(dayStart(first, tz)), BigInt(dayStart(next, tz))] as const;
      cache.set(id, w);
    }
    return w;
  };
}
