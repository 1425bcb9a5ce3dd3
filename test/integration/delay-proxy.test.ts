/**
 * The delaying proxy of the region tests (test/helpers/delay-proxy.ts): bytes arrive in order through it,
 * `cut()` fails connections at once and refuses new ones, `restore()` lets them through again.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDelayProxy, type DelayProxy } from '../helpers/delay-proxy.js';
import { prng } from '../helpers/prng.js';

let echo: net.Server;
let proxy: DelayProxy;

beforeAll(async () => {
  echo = net.createServer((s) => s.on('error', () => undefined).pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  proxy = await startDelayProxy((echo.address() as net.AddressInfo).port, { minMs: 1, maxMs: 20, random: prng(7) });
});
afterAll(async () => {
  await proxy.close();
  await new Promise((r) => echo.close(r));
});

/** Sends `chunks` one by one through the proxy and resolves with everything echoed back (or the error). */
function roundTrip(chunks: string[]): Promise<string | Error> {
  return new Promise((resolve) => {
    const s = net.connect(proxy.port, '127.0.0.1');
    const want = chunks.join('').length;
    let got = '';
    s.on('data', (d) => {
      got += d.toString();
      if (got.length >= want) {
        s.end();
        resolve(got);
      }
    });
    s.on('error', (e) => resolve(e));
    s.on('close', () => resolve(got.length >= want ? got : new Error('closed')));
    s.on('connect', () => {
      for (const c of chunks) s.write(c);
    });
  });
}

describe('delay proxy', () => {
  it('keeps the order of chunks whatever their delays', async () => {
    const chunks = Array.from({ length: 50 }, (_, i) => `<${i}>`);
    expect(await roundTrip(chunks)).toBe(chunks.join(''));
  });

  it('cut: connections fail and new ones are refused; restore: they pass again', async () => {
    const before = proxy.accepted;
    proxy.cut();
    expect(await roundTrip(['x'])).toBeInstanceOf(Error);
    expect(proxy.accepted).toBe(before);
    proxy.restore();
    expect(await roundTrip(['y'])).toBe('y');
    expect(proxy.accepted).toBe(before + 1);
  });
});
