/**
 * A leg's numbers for the store's check script (lua/check.lua: algorithm, L, P, B, cost, group length). A
 * calendar window has no fixed P: its P and B slots carry the end of the window holding `nowMs` and the end
 * of the next one (lua/calendar_window.lua), from the shared cached window clocks of src/util/calendar.ts.
 */
import type { CompiledLimit } from '../config/policy-spec.js';
import { calendarClock } from '../util/calendar.js';

/** The P argument of limit `l` at `nowMs`: periodMs, or a calendar window's end (Unix ms). */
export function scriptPeriod(l: CompiledLimit, nowMs: number): number {
  return l.calendar === undefined ? l.periodMs : calendarClock(l.calendar).at(nowMs).endMs;
}

/** The B argument of limit `l` at `nowMs`: burst, or the end of the calendar window after the current one. */
export function scriptBurst(l: CompiledLimit, nowMs: number): number {
  return l.calendar === undefined ? l.burst : calendarClock(l.calendar).nextEndAt(nowMs);
}
