/**
 * lua/calendar_window.lua on its own: the caller passes the end of the window holding ITS time (P slot) and
 * the end of the next one (B slot); the time the script decides at may differ (Redis TIME in strict mode).
 * Driven by EVAL of the whole check script with the time in ARGV[2], against a database of the run's shared
 * redis-server: the caller's window, the next one when the script's time is past P, UNREADABLE (4) past both, and the
 * stored state (count, the window's end) with its PX.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkScript } from '../../src/store/scripts.js';
import { unpackReply } from '../../src/store/reply.js';
import { CALENDAR_WINDOW_CODE } from '../../src/config/policy-spec.js';
import { sharedRedis, type SharedRedis } from '../helpers/redis.js';

let redis: SharedRedis;
beforeAll(async () => { redis = await sharedRedis(); });
afterAll(async () => { await redis?.stop(); });

const E = Date.parse('2026-02-01T00:00:00Z'); // the caller's window (January, UTC) ends here
const E2 = Date.parse('2026-03-01T00:00:00Z'); // and February's here

/** One leg, limit 3, of a calendar window: [code, remaining, resetAfterMs, retryAfterMs]. */
async function leg(key: string, cost: number, t: number): Promise<number[]> {
  const args = [CALENDAR_WINDOW_CODE, 3, E, E2, cost, 1];
  const packed = Buffer.alloc(48); // ARGV[4]: the leg as 6 little-endian doubles (lua/check.lua)
  args.forEach((v, i) => packed.writeDoubleLE(v, 8 * i));
  const reply = unpackReply(await redis.client.callBuffer('eval', checkScript(), 1, key, '0', String(t), '1', packed), args, 0);
  return reply.slice(0, 4);
}

describe('lua/calendar_window.lua', () => {
  it('counts in the caller\'s window while the script\'s time is in it; stores count and window end with PX', async () => {
    expect(await leg('cal:a', 2, E - 10_000)).toStrictEqual([0, 1, 10_000, 0]);
    expect(await leg('cal:a', 2, E - 5000)).toStrictEqual([1, 1, 5000, 5000]);
    const raw = await redis.client.getBuffer('cal:a');
    expect([raw!.readDoubleLE(0), raw!.readDoubleLE(8), raw!.readDoubleLE(16)]).toStrictEqual([2, E, E - 10_000]);
    const pttl = await redis.client.pttl('cal:a');
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(10_000);
  });

  it('a script time past the caller\'s window end (its clock ahead across the boundary) counts in the next window', async () => {
    expect(await leg('cal:b', 1, E + 3)).toStrictEqual([0, 2, E2 - E - 3, 0]);
    expect(await leg('cal:b', 2, E + 4)).toStrictEqual([0, 0, E2 - E - 4, 0]);
    expect(await leg('cal:b', 1, E + 5)).toStrictEqual([1, 0, E2 - E - 5, E2 - E - 5]);
  });

  it('a count stored in the earlier window stops counting at its end', async () => {
    // stored with PX 60 000 (real ms): still there at the next call
    expect(await leg('cal:c', 3, E - 60_000)).toStrictEqual([0, 0, 60_000, 0]);
    expect(await leg('cal:c', 1, E - 1)).toStrictEqual([1, 0, 1, 1]);
    expect(await leg('cal:c', 3, E)).toStrictEqual([0, 0, E2 - E, 0]);
  });

  it('a time past both windows cannot be placed: UNREADABLE, nothing stored', async () => {
    expect(await leg('cal:d', 1, E2)).toStrictEqual([4, 0, 0, 0]);
    expect(await redis.client.exists('cal:d')).toBe(0);
  });
});
