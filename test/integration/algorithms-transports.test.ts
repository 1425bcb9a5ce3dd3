/**
 * The sliding log and calendar windows (issue 16, item 1) through every way in besides the library: /v1/stream
 * binary frames, sluice/client (binary WebSocket and HTTP), and `sluice replay` (the replay function), on
 * controlled clocks, with exact numbers: the same decisions the library makes.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from '../../src/client/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { replay } from '../../src/cli/replay.js';
import { FRAME_CHECKS, KIND_ALLOWED } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';
import { closeAllServers, startStreamServer, TestSocket } from './ws-support.js';

afterEach(async () => {
  TestSocket.closeAll();
  await closeAllServers();
});

const POLICIES = {
  slog: { algorithm: 'sliding_log', limit: 3, period: 1000 },
  month: { algorithm: 'fixed_window', limit: 2, period: '1mo', timeZone: 'Asia/Tokyo' },
} as never;

/** 31 January 2026 23:59 in Tokyo, and the first ms of 1 February there (a 28-day month follows). */
const JAN31_2359 = 1_769_871_540_000;
const FEB1 = 1_769_871_600_000;

/** The calls and what each answers: [t, policy, allowed, remaining, retryAfterMs, resetAfterMs]. */
const SCRIPT: Array<[number, 'slog' | 'month', boolean, number, number, number]> = [
  [JAN31_2359, 'slog', true, 2, 0, 1000],
  [JAN31_2359 + 1, 'slog', true, 1, 0, 1000],
  [JAN31_2359 + 2, 'slog', true, 0, 0, 1000],
  [JAN31_2359 + 3, 'slog', false, 0, 997, 999], // the oldest entry leaves at +1000
  [JAN31_2359 + 1000, 'slog', true, 0, 0, 1000],
  [JAN31_2359, 'month', true, 1, 0, 60_000],
  [JAN31_2359 + 1, 'month', true, 0, 0, 59_999],
  [JAN31_2359 + 2, 'month', false, 0, 59_998, 59_998],
  [FEB1, 'month', true, 1, 0, 28 * 86_400_000],
];

describe('sliding_log and calendar windows over the stream, the client and replay', () => {
  it('/v1/stream binary frames', async () => {
    const s = await startStreamServer({ policies: POLICIES });
    const ws = await TestSocket.open(s.wsUrl);
    for (const [i, [t, policy, allowed, remaining, retry, reset]] of SCRIPT.entries()) {
      s.clock.set(t);
      const w = new FrameWriter(FRAME_CHECKS);
      w.check(i, policy, 'k', 1, 0);
      ws.send(w.finish()!);
      await ws.answers(i + 1);
      const a = ws.binaries[i];
      expect([a.id, a.kind === KIND_ALLOWED, a.remaining, a.retryAfterMs, a.resetAfterMs, a.name], `call ${i}`)
        .toEqual([i, allowed, remaining, retry, reset, policy]);
    }
  });

  for (const kind of ['ws', 'http'] as const) {
    it(`sluice/client over ${kind}`, async () => {
      const s = await startStreamServer({ policies: POLICIES });
      // honourRetryAfter off: each denial is the server's, not a remembered one
      const client = createClient({ url: kind === 'ws' ? s.wsUrl : s.url, honourRetryAfter: false });
      try {
        for (const [i, [t, policy, allowed, remaining, retry, reset]] of SCRIPT.entries()) {
          s.clock.set(t);
          const d = await client.check({ policy, key: 'k', cost: 1 });
          expect([d.allowed, d.remaining, d.retryAfterMs, d.resetAfterMs, d.policy], `call ${i}`).toEqual([allowed, remaining, retry, reset, policy]);
        }
      } finally {
        await client.close();
      }
    });
  }

  it('sluice replay: the trace\'s own timestamps are the clock', async () => {
    const rows = SCRIPT.filter(([, p]) => p === 'slog').map(([t]) => `${t},k`);
    const monthRows = SCRIPT.filter(([, p]) => p === 'month').map(([t]) => `${t},k`);
    const policies = compilePolicies(POLICIES);
    const [slog] = await replay({ csv: `ts_ms,client\n${rows.join('\n')}\n`, file: 'slog.csv', policies, only: ['slog'] });
    expect([slog.admitted, slog.denied, slog.mostLimited]).toEqual([4, 1, [{ key: 'k', admitted: 4, denied: 1 }]]);
    const [month] = await replay({ csv: `ts_ms,client\n${monthRows.join('\n')}\n`, file: 'month.csv', policies, only: ['month'] });
    expect([month.admitted, month.denied]).toEqual([3, 1]);
  });
});
