/**
 * HTTP/1.0 and Host-less HTTP/1.1 on the uWebSockets.js front, over raw sockets. uWebSockets.js 20.30 (the build
 * that loads on these machines; later releases answer 505 but need glibc 2.38) accepts only a request line
 * ending in ` HTTP/1.1` with a Host header; anything else it keeps buffering as if incomplete, so no handler
 * ever runs: it writes nothing and closes the connection at its HTTP idle timeout (10 s, swept every 4 s), or
 * at once when the buffered bytes pass its header limit. These tests pin that behaviour (bounded: the server
 * closes the connection; nothing is answered), so that the README's gateway settings stay true: a uWS
 * upgrade that answers 505 fails them and the README must be updated.
 */
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/config/default.js';
import { ServerPool } from '../helpers/server.js';

const pool = new ServerPool();
afterAll(() => pool.closeAll());

interface Exchange {
  /** Bytes the server wrote. */
  text: string;
  /** Who ended the connection: the server, or this test (after `giveUpMs`). */
  closedBy: 'server' | 'test';
}

/** Writes `chunks` (one per write, 100 ms apart) and reads until the server closes or `giveUpMs` passes. */
function exchange(port: number, chunks: string[], giveUpMs: number): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let text = '';
    let done = false;
    const finish = (closedBy: Exchange['closedBy']): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      resolve({ text, closedBy });
    };
    const timer = setTimeout(() => finish('test'), giveUpMs);
    s.setEncoding('latin1');
    s.on('data', (d: string) => (text += d));
    s.on('end', () => finish('server'));
    s.on('close', () => finish('server'));
    s.on('error', (e) => (done ? undefined : reject(e)));
    chunks.forEach((c, i) => setTimeout(() => s.write(c), i * 100));
  });
}

describe('what the uWebSockets.js front does with HTTP versions', () => {
  it('HTTP/1.1 with Host is answered on every route, /v1/auth included', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    for (const path of ['/healthz', '/v1/auth?policy=free&tenant=a&action=b', '/nope']) {
      const a = await exchange(s.port, [`GET ${path} HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n`], 5_000);
      expect(a.text, path).toMatch(/^HTTP\/1\.1 (200 OK|404 Not Found)\r\n/);
    }
  });

  // concurrent: each waits out the idle timeout
  it.concurrent.each([
    ['HTTP/1.0 (curl -0, nginx without proxy_http_version 1.1, ab)', 'GET /healthz HTTP/1.0\r\nHost: sluice\r\n\r\n'],
    ['HTTP/1.0 without Host', 'GET /healthz HTTP/1.0\r\n\r\n'],
    ['HTTP/1.1 without Host', 'GET /healthz HTTP/1.1\r\n\r\n'],
  ])('%s: nothing is answered, and the server closes the connection (its idle timeout)', async (_name, request) => {
    const s = await pool.start({ policies: defaultConfig().policies });
    // 30 s is far past uWS's 10 s idle timeout (swept every 4 s): a server that held the socket for good fails here.
    expect(await exchange(s.port, [request], 30_000)).toStrictEqual({ text: '', closedBy: 'server' });
  }, 40_000);

  it('HTTP/1.0 followed by more bytes than uWS buffers for a header: closed at once, nothing answered', async () => {
    const s = await pool.start({ policies: defaultConfig().policies });
    expect(await exchange(s.port, ['GET /healthz HTTP/1.0\r\n\r\n', 'x'.repeat(8192)], 30_000)).toStrictEqual({ text: '', closedBy: 'server' });
  });
});
