import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerPool } from '../helpers/server.js';

const pool = new ServerPool();
afterEach(() => pool.closeAll());

/** Writes `requests` in one TCP segment and collects the bytes until `count` responses (or a close) arrive. */
function pipelined(port: number, requests: string[], count: number): Promise<{ statuses: number[]; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    const statuses = (): number[] => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`timed out with: ${text}`)); }, 5000);
    socket.on('connect', () => socket.write(requests.join('')));
    socket.on('data', (b) => {
      text += b.toString('latin1');
      if (statuses().length === count) { clearTimeout(timer); socket.end(); resolve({ statuses: statuses(), closed: false }); }
    });
    socket.on('close', () => { clearTimeout(timer); resolve({ statuses: statuses(), closed: true }); });
    socket.on('error', reject);
  });
}

describe('HTTP/1.1 pipelining (shards 0 answers within the turn)', () => {
  it('ten pipelined checks on one connection get ten answers, in order', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'fixed_window', limit: 9, period: 60_000 } } });
    const get = (): string => 'GET /v1/check?policy=p&key=k HTTP/1.1\r\nHost: x\r\n\r\n';
    const r = await pipelined(s.port, Array.from({ length: 10 }, () => get()), 10);
    expect(r).toStrictEqual({ statuses: Array(10).fill(200), closed: false });
    // the ten went through in order on one key: nine admitted, the tenth denied
    const peek = await fetch(`${s.url}/v1/check?policy=p&key=k&cost=0`);
    expect(await peek.json()).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('pipelined forward-auth requests get 200s then a 429', async () => {
    const s = await pool.start({ policies: { p: { algorithm: 'token_bucket', limit: 2, period: 60_000 } } });
    const req = 'GET /v1/auth?policy=p&key=a HTTP/1.1\r\nHost: x\r\n\r\n';
    const r = await pipelined(s.port, [req, req, req], 3);
    expect(r).toStrictEqual({ statuses: [200, 200, 429], closed: false });
  });
});
