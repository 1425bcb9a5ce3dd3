/**
 * Calendar periods in policies: what compiles (codes, nominal period, calendar), what is refused (naming the
 * field), and src/util/calendar.ts's windows at hand-checked instants.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLimiter } from '../../../src/index.js';
import { parseConfig } from '../../../src/config/load.js';
import { CALENDAR_WINDOW_CODE } from '../../../src/config/policy-spec.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { calendarWindow, CalendarClock } from '../../../src/util/calendar.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';

const H = 3_600_000;
const D = 24 * H;

function limitOf(spec: Record<string, unknown>) {
  return compilePolicies({ p: spec }).get('p')!.limits[0];
}

function refusal(spec: Record<string, unknown>): SluiceError {
  try {
    compilePolicies({ p: spec });
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a CONFIG error');
}

describe('calendar periods: compile', () => {
  it('fixed_window 1mo, 1w: calendar windows in UTC by default; 1d with a timeZone', () => {
    expect(limitOf({ algorithm: 'fixed_window', limit: 10, period: '1mo' })).toStrictEqual({
      algorithm: 'fixed_window', algorithmCode: CALENDAR_WINDOW_CODE, limit: 10, periodMs: 30 * D, burst: 10,
      calendar: { unit: 'mo', timeZone: 'UTC' }, name: 'p',
    });
    expect(limitOf({ algorithm: 'fixed_window', limit: 10, period: '1w', timeZone: 'Asia/Tokyo' }).calendar)
      .toStrictEqual({ unit: 'w', timeZone: 'Asia/Tokyo' });
    expect(limitOf({ algorithm: 'fixed_window', limit: 10, period: '1d', timeZone: 'Europe/Berlin' })).toMatchObject({
      algorithmCode: CALENDAR_WINDOW_CODE, periodMs: D, calendar: { unit: 'd', timeZone: 'Europe/Berlin' },
    });
  });

  it('1d without a timeZone stays the epoch-aligned day (the UTC day); 1w elsewhere is 7 days of ms', () => {
    expect(limitOf({ algorithm: 'fixed_window', limit: 10, period: '1d' })).toStrictEqual({
      algorithm: 'fixed_window', algorithmCode: 2, limit: 10, periodMs: D, burst: 10, name: 'p',
    });
    expect(limitOf({ algorithm: 'token_bucket', limit: 10, period: '1w' })).toMatchObject({ algorithmCode: 0, periodMs: 7 * D });
    expect(limitOf({ algorithm: 'fixed_window', limit: 10, period: '2w' })).toMatchObject({ algorithmCode: 2, periodMs: 14 * D });
  });

  it('a limits entry takes timeZone too', () => {
    const p = compilePolicies({ p: { limits: [
      { algorithm: 'fixed_window', limit: 1000, period: '1d', timeZone: 'America/New_York' },
      { algorithm: 'token_bucket', limit: 10, period: '1s' },
    ] } }).get('p')!;
    expect(p.limits.map((l) => l.calendar)).toStrictEqual([{ unit: 'd', timeZone: 'America/New_York' }, undefined]);
  });
});

describe('calendar periods: refused, naming the field', () => {
  const cases: Array<[string, Record<string, unknown>, string, string]> = [
    ['1mo on a token bucket', { algorithm: 'token_bucket', limit: 1, period: '1mo' }, 'period',
      'policy "p": period: "1mo" is a calendar month, for fixed_window only (a month has no fixed length in ms for token_bucket; got "1mo")'],
    ['2mo', { algorithm: 'fixed_window', limit: 1, period: '2mo' }, 'period',
      'policy "p": period: months: only "1mo" (one calendar month) is accepted (got "2mo")'],
    ['timeZone on sliding_window', { algorithm: 'sliding_window', limit: 1, period: '1d', timeZone: 'UTC' }, 'timeZone',
      'policy "p": timeZone: applies to fixed_window only, whose windows start at local midnight (got algorithm sliding_window)'],
    ['timeZone with 1h', { algorithm: 'fixed_window', limit: 1, period: '1h', timeZone: 'UTC' }, 'timeZone',
      'policy "p": timeZone: applies to the calendar periods "1d", "1w" and "1mo" only (got period "1h")'],
    ['timeZone with a period in ms', { algorithm: 'fixed_window', limit: 1, period: 86_400_000, timeZone: 'UTC' }, 'timeZone',
      'policy "p": timeZone: applies to the calendar periods "1d", "1w" and "1mo" only (got period 86400000)'],
    ['an unknown zone', { algorithm: 'fixed_window', limit: 1, period: '1d', timeZone: 'Mars/Olympus' }, 'timeZone',
      'policy "p": timeZone: must be an IANA time zone name such as "Europe/Berlin" or "UTC" (got "Mars/Olympus")'],
    ['a zone that is not a string', { algorithm: 'fixed_window', limit: 1, period: '1d', timeZone: 9 }, 'timeZone',
      'policy "p": timeZone: must be an IANA time zone name such as "Europe/Berlin" or "UTC" (got 9)'],
    ['sync mode', { algorithm: 'fixed_window', limit: 1, period: '1mo', consistency: 'sync' }, 'period',
      'policy "p": period: calendar period "1mo" cannot be merged in consistency sync (its merge aligns windows to the epoch): use local or strict'],
  ];
  it.each(cases)('%s', (_name, spec, field, message) => {
    const e = refusal(spec);
    expect(e.code).toBe('CONFIG');
    expect(e.field).toBe(field);
    expect(e.message).toBe(message);
  });

  it('names the entry of a limits array', () => {
    const e = refusal({ limits: [{ algorithm: 'gcra', limit: 1, period: '1s' }, { algorithm: 'gcra', limit: 1, period: '1d', timeZone: 'UTC' }] });
    expect(e.field).toBe('limits[1].timeZone');
  });
});

describe('src/util/calendar.ts: windows at hand-checked instants', () => {
  const at = (unit: 'd' | 'w' | 'mo', timeZone: string, iso: string): [string, string] => {
    const w = calendarWindow({ unit, timeZone }, Date.parse(iso));
    return [new Date(w.startMs).toISOString(), new Date(w.endMs).toISOString()];
  };

  it('Asia/Tokyo (UTC+9, no DST): 31 January 23:59 local is in January; a minute later, February', () => {
    expect(at('mo', 'Asia/Tokyo', '2026-01-31T14:59:00Z')).toStrictEqual(['2025-12-31T15:00:00.000Z', '2026-01-31T15:00:00.000Z']);
    expect(at('mo', 'Asia/Tokyo', '2026-01-31T15:00:00Z')).toStrictEqual(['2026-01-31T15:00:00.000Z', '2026-02-28T15:00:00.000Z']);
    expect(at('d', 'Asia/Tokyo', '2026-01-31T14:59:59.999Z')).toStrictEqual(['2026-01-30T15:00:00.000Z', '2026-01-31T15:00:00.000Z']);
  });

  it('Europe/Berlin: 23 h on 29 March 2026, 25 h on 25 October 2026; a month holding the change is 31 d − 1 h', () => {
    expect(at('d', 'Europe/Berlin', '2026-03-29T12:00:00Z')).toStrictEqual(['2026-03-28T23:00:00.000Z', '2026-03-29T22:00:00.000Z']);
    expect(at('d', 'Europe/Berlin', '2026-10-25T12:00:00Z')).toStrictEqual(['2026-10-24T22:00:00.000Z', '2026-10-25T23:00:00.000Z']);
    const march = calendarWindow({ unit: 'mo', timeZone: 'Europe/Berlin' }, Date.parse('2026-03-15T00:00:00Z'));
    expect(march.endMs - march.startMs).toBe(31 * D - H);
  });

  it('February of a leap year: 29 days (UTC); of 2100 (not a leap year): 28', () => {
    expect(at('mo', 'UTC', '2028-02-29T23:59:59.999Z')).toStrictEqual(['2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z']);
    expect(at('mo', 'UTC', '2100-02-10T00:00:00Z')).toStrictEqual(['2100-02-01T00:00:00.000Z', '2100-03-01T00:00:00.000Z']);
  });

  it('America/Santiago: DST starts at 00:00 (6 September 2026), so that day starts at 01:00 local', () => {
    expect(at('d', 'America/Santiago', '2026-09-06T12:00:00Z')).toStrictEqual(['2026-09-06T04:00:00.000Z', '2026-09-07T03:00:00.000Z']);
  });

  it('ISO weeks start on Monday 00:00 local', () => {
    expect(at('w', 'UTC', '2026-12-01T12:00:00Z')).toStrictEqual(['2026-11-30T00:00:00.000Z', '2026-12-07T00:00:00.000Z']);
    expect(at('w', 'Asia/Tokyo', '2026-11-29T15:00:00Z')).toStrictEqual(['2026-11-29T15:00:00.000Z', '2026-12-06T15:00:00.000Z']);
  });

  it('CalendarClock: the window and the next one\'s end, recomputed only when the time leaves the window', () => {
    const c = new CalendarClock({ unit: 'mo', timeZone: 'UTC' });
    const jan = Date.parse('2026-01-20T00:00:00Z');
    const w = c.at(jan);
    expect(c.at(jan + 5 * D)).toBe(w);
    expect(c.nextEndAt(jan)).toBe(Date.parse('2026-03-01T00:00:00Z'));
    expect(c.at(Date.parse('2026-02-01T00:00:00Z'))).toStrictEqual({ startMs: Date.parse('2026-02-01T00:00:00Z'), endMs: Date.parse('2026-03-01T00:00:00Z') });
  });
});

describe('README: Calendar periods', () => {
  const file = readFileSync(path.resolve(process.cwd(), 'examples/calendar-quotas.yaml'), 'utf8');

  it('shows examples/calendar-quotas.yaml verbatim', () => {
    expect(readFileSync(path.resolve(process.cwd(), 'README.md'), 'utf8')).toContain('```yaml\n' + file + '```');
  });

  it('its numbers: a check answers the daily cap (60000 ms at 31 January 23:59 in Tokyo, 86400000 a minute later); inspect shows a 28-day February', async () => {
    const readme = readFileSync(path.resolve(process.cwd(), 'README.md'), 'utf8').replace(/\s+/g, ' ');
    expect(readme).toContain('a first check of `plan` answers `policy: "daily"` with `resetAfterMs: 60000`');
    expect(readme).toContain('the next check answers `policy: "daily"` with `resetAfterMs: 86400000`');
    expect(readme).toContain("`inspect` shows the monthly window's `resetAfterMs: 2419200000` (28 days)");
    let t = Date.parse('2026-01-31T14:59:00Z');
    const limiter = await createLimiter({ policies: parseConfig(file, 'calendar-quotas.yaml').policies, shards: 0, clock: () => t });
    try {
      expect(await limiter.check({ policy: 'plan', key: 'acme', cost: 1 })).toMatchObject({ allowed: true, remaining: 4999, resetAfterMs: 60_000, policy: 'daily' });
      expect((await limiter.inspect({ policy: 'plan', key: 'acme' })).limits.map((l) => [l.name, l.resetAfterMs]))
        .toStrictEqual([['monthly', 60_000], ['daily', 60_000]]);
      t += 60_000;
      expect(await limiter.check({ policy: 'plan', key: 'acme', cost: 1 })).toMatchObject({ allowed: true, remaining: 4999, resetAfterMs: D, policy: 'daily' });
      expect((await limiter.inspect({ policy: 'plan', key: 'acme' })).limits.map((l) => [l.name, l.count, l.resetAfterMs]))
        .toStrictEqual([['monthly', 1, 28 * D], ['daily', 1, D]]);
      expect(await limiter.check({ policy: 'weekly', key: 'x', cost: 700 })).toMatchObject({ allowed: true, remaining: 0, resetAfterMs: Date.parse('2026-02-02T00:00:00Z') - t });
    } finally {
      await limiter.close();
    }
  });
});

describe('sliding_log: compile and refuse', () => {
  it('compiles to code 5; burst refused as for windows', () => {
    expect(limitOf({ algorithm: 'sliding_log', limit: 64, period: '1m' })).toStrictEqual({
      algorithm: 'sliding_log', algorithmCode: 5, limit: 64, periodMs: 60_000, burst: 64, name: 'p',
    });
    expect(refusal({ algorithm: 'sliding_log', limit: 5, period: '1s', burst: 6 }).field).toBe('burst');
  });

  it('min(limit, period) past 1024 entries per key (maxLogEntries\' cap) is refused naming the field that binds', () => {
    // the limiter's own bound (maxLogEntries, default 64) is checked by createLimiter: test/unit/engine/log-entries.test.ts
    const e = refusal({ algorithm: 'sliding_log', limit: 1025, period: '1h' });
    expect([e.field, e.message]).toStrictEqual(['limit',
      'policy "p": limit: sliding_log keeps up to min(limit, period in ms) entries per key, at most 1024 (got min(1025, 3600000) = 1025); use sliding_window or a smaller limit']);
    expect(refusal({ algorithm: 'sliding_log', limit: 100_000, period: 2000 }).field).toBe('period');
    expect(limitOf({ algorithm: 'sliding_log', limit: 1_000_000, period: 1024 }).limit).toBe(1_000_000);
  });

  it('sync is refused naming consistency; strict compiles (lua/sliding_log.lua)', () => {
    const e = refusal({ algorithm: 'sliding_log', limit: 5, period: '1s', consistency: 'sync' });
    expect([e.field, e.message]).toStrictEqual(['consistency',
      'policy "p": consistency: sliding_log cannot be merged in consistency sync (a log is not a sum of deltas): use local or strict']);
    expect(compilePolicies({ p: { algorithm: 'sliding_log', limit: 5, period: '1s', consistency: 'strict' } }).get('p')!.consistency).toBe('strict');
  });
});
