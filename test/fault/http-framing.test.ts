/**
 * Request smuggling (issue #20, item 6): a request whose body length is ambiguous (two Content-Length
 * headers, a list of lengths, Content-Length beside Transfer-Encoding) is refused with 400 and the connection
 * is closed, so bytes after its head are never parsed as a request of their own, on every route.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerPool, type TestServer } from '../helpers/server.js';

const pool = new ServerPool();
let s: TestServer;
beforeAll(async () => {
  s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 10, period: '1h' } } });
});
afterAll(() => pool.closeAll());

/** Writes `raw` on a fresh connection and reads until the server closes it (or 3 s pass: then `closed` is false). */
function exchange(port: number, raw: string): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1');
    let text = '';
    const timer = setTimeout(() => {
      c.destroy();
      resolve({ text, closed: false });
    }, 3000);
    c.on('data', (d) => (text += d.toString('latin1')));
    c.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
    c.on('error', (e) => {
      clearTimeout(timer);
      if ((e as NodeJS.ErrnoException).code === 'ECONNRESET') resolve({ text, closed: true });
      else reject(e);
    });
    c.write(raw);
  });
}

/** How many tokens key `victim` has spent (a free peek: cost 0). */
async function spent(): Promise<number> {
  const d = await s.limiter.check({ policy: 'p', key: 'victim', cost: 0 });
  return 10 - d.remaining;
}

const smuggled = 'GET /v1/check?policy=p&key=victim&cost=2 HTTP/1.1\r\nHost: x\r\n\r\n';

const PROBLEM = /^HTTP\/1\.1 400 Bad Request\r\n[^]*\r\n\r\n\{[^]*"field":"content-length"[^]*\}$/;

describe('ambiguous request framing', () => {
  // [name, headers, what follows the head, the exact answer]: a 400 naming content-length, or (uWS's own
  // refusal, or bytes after the head) the connection closed with no answer; never a decision
  const cases: Array<[string, string, string, RegExp]> = [
    ['Content-Length: 0 then a second Content-Length (the smuggled request follows)', `Content-Length: 0\r\nContent-Length: ${smuggled.length}\r\n`, smuggled, /^$/],
    ['two equal Content-Length headers (the body is the smuggled request)', `Content-Length: ${smuggled.length}\r\nContent-Length: ${smuggled.length}\r\n`, smuggled, PROBLEM],
    ['two Content-Length: 0', 'Content-Length: 0\r\nContent-Length: 0\r\n', '', PROBLEM],
    ['a list of lengths in one Content-Length', `Content-Length: 0, ${smuggled.length}\r\n`, smuggled, /^$/],
    ['an empty Content-Length then a second', `Content-Length: \r\nContent-Length: ${smuggled.length}\r\n`, smuggled, /^$/],
    ['Content-Length with Transfer-Encoding', 'Content-Length: 0\r\nTransfer-Encoding: chunked\r\n', smuggled, /^$/],
  ];
  for (const route of ['/v1/auth?policy=p&key=attacker', '/v1/check?policy=p&key=attacker', '/healthz']) {
    for (const [name, headers, after, answer] of cases) {
      it(`${route.split('?')[0]}: ${name}: refused, the connection closed, nothing decided`, async () => {
        const before = await spent();
        const method = route.startsWith('/healthz') ? 'GET' : 'POST';
        const { text, closed } = await exchange(s.port, `${method} ${route} HTTP/1.1\r\nHost: x\r\n${headers}\r\n${after}`);
        expect(text).toMatch(answer);
        expect(closed).toBe(true);
        expect(await spent()).toBe(before);
      });
    }
  }

  it('one Content-Length (and none) still work, pipelined', async () => {
    const body = '{"policy":"p","key":"ok","cost":1}';
    const { text } = await exchange(s.port,
      `POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
      'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(text.match(/HTTP\/1\.1 200 OK/g)).toHaveLength(2);
  });
});
