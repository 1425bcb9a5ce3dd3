/**
 * One keep-alive HTTP/1.1 connection on a raw socket, one request at a time: for tests that send thousands
 * of requests one after another. fetch (undici) spends several times the CPU of the server's own work on each
 * request (headers objects, an abort timer, stream bodies); on a machine whose cores are shared that CPU,
 * not the server, was most of such a test's time. The bytes on the wire are an ordinary HTTP/1.1 exchange:
 * the server cannot tell this client from another.
 *
 * It reads only what the sluice front writes: a status line, headers, and a Content-Length body (no chunked
 * encoding: anything else is an error, not a guess).
 */
import net from 'node:net';

/** Per-request timeout: a hang fails the test instead of stalling it (fetch's too: test/helpers/server.ts send). */
export const REQUEST_TIMEOUT_MS = 5_000;

/** A response read in full. */
export interface ConnAnswer {
  status: number;
  /** Header names lower-cased. */
  headers: Record<string, string>;
  text: string;
  /** The body parsed as JSON (undefined when empty or not JSON). */
  json: any;
}

/** A keep-alive connection to 127.0.0.1:`port`; requests wait for the one before them (no pipelining). */
export class HttpConn {
  private readonly socket: net.Socket;
  private buf: Buffer = Buffer.alloc(0);
  private waiting: { resolve: (a: ConnAnswer) => void; reject: (e: Error) => void; timer: NodeJS.Timeout } | null = null;
  private failed: Error | null = null;
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
      this.parse();
    });
    const fail = (e: Error): void => {
      this.failed ??= e;
      const w = this.waiting;
      this.waiting = null;
      if (w !== null) {
        clearTimeout(w.timer);
        w.reject(e);
      }
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed by the server')));
  }

  /** Opens a connection; resolves once it is connected. */
  static open(port: number): Promise<HttpConn> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.off('error', reject);
        resolve(new HttpConn(s));
      });
      s.once('error', reject);
    });
  }

  /** GET `path` (with its query string), with `headers` as field lines in order (a name may repeat). */
  get(path: string, headers: Array<[name: string, value: string]> = []): Promise<ConnAnswer> {
    const lines = headers.map(([n, v]) => `${n}: ${v}\r\n`).join('');
    return this.request(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${lines}\r\n`);
  }

  /** POST `body` (a string as is, anything else JSON.stringified) as application/json. */
  postJson(path: string, body: unknown): Promise<ConnAnswer> {
    const text = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${text.length}\r\n\r\n`;
    return this.request(Buffer.concat([Buffer.from(head, 'latin1'), text]));
  }

  close(): void {
    this.socket.destroy();
  }

  private request(bytes: string | Buffer): Promise<ConnAnswer> {
    const run = (): Promise<ConnAnswer> => new Promise<ConnAnswer>((resolve, reject) => {
      if (this.failed !== null) {
        reject(this.failed);
        return;
      }
      const timer = setTimeout(() => {
        this.waiting = null;
        reject(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`));
        this.socket.destroy();
      }, REQUEST_TIMEOUT_MS);
      this.waiting = { resolve, reject, timer };
      this.socket.write(bytes);
    });
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p;
  }

  private parse(): void {
    const w = this.waiting;
    if (w === null) {
      if (this.buf.length > 0) this.socket.destroy(new Error(`bytes with no request waiting: ${this.buf.toString('latin1', 0, 200)}`));
      return;
    }
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const lines = this.buf.toString('latin1', 0, end).split('\r\n');
    const m = /^HTTP\/1\.1 (\d{3})/.exec(lines[0]);
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    const length = Number(headers['content-length']);
    if (m === null || !Number.isSafeInteger(length)) {
      this.socket.destroy(new Error(`not a Content-Length HTTP/1.1 response: ${lines.join(' | ')}`));
      return;
    }
    if (this.buf.length < end + 4 + length) return;
    const text = this.buf.toString('utf8', end + 4, end + 4 + length);
    this.buf = this.buf.subarray(end + 4 + length);
    let json: unknown;
    if (text !== '') {
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
    }
    this.waiting = null;
    clearTimeout(w.timer);
    w.resolve({ status: Number(m[1]), headers, text, json });
  }
}
