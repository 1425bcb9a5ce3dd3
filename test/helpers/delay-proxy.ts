import net from 'node:net';
import { linkUpstream } from './proxy-link.js';

/**
 * A TCP proxy on 127.0.0.1 that delays every chunk, each way, by a delay drawn in [minMs, maxMs] (order kept:
 * a chunk never overtakes the one before it), standing in for a cross-region link. `cut()` drops every
 * connection and refuses new ones (connections are reset at once, so callers fail fast) until `restore()`.
 */
export interface DelayProxy {
  port: number;
  url: string;
  /** Drops every connection through the proxy and refuses new ones. */
  cut(): void;
  /** Accepts connections again. */
  restore(): void;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

export interface DelayOptions {
  minMs: number;
  maxMs: number;
  /** A uniform [0, 1) source (default Math.random); pass a seeded one (test/helpers/prng.ts) for a replayable run. */
  random?: () => number;
}

export async function startDelayProxy(targetPort: number, o: DelayOptions, targetHost = '127.0.0.1'): Promise<DelayProxy> {
  const random = o.random ?? Math.random;
  const sockets = new Set<net.Socket>();
  let cut = false;
  let accepted = 0;
  const delay = (): number => o.minMs + random() * (o.maxMs - o.minMs);
  /**
   * Forwards from `a` to `b`, each chunk delayed, never reordered: the chunks wait in one queue drained by one
   * timer (a timer per chunk could fire out of order: Node orders timers of different durations that fall due
   * in the same millisecond by duration, not by when they were set).
   */
  const pipe = (a: net.Socket, b: net.Socket): void => {
    const queue: Array<{ at: number; chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | null = null;
    let ended = false;
    const drain = (): void => {
      timer = null;
      const now = Date.now();
      while (queue.length > 0 && queue[0].at <= now) {
        const { chunk } = queue.shift()!;
        if (!b.destroyed) b.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(drain, queue[0].at - now);
      else if (ended && !b.destroyed) b.end();
    };
    a.on('data', (chunk: Buffer) => {
      const at = Math.max(queue.length > 0 ? queue[queue.length - 1].at : 0, Date.now() + delay());
      queue.push({ at, chunk });
      if (timer === null) timer = setTimeout(drain, at - Date.now());
    });
    a.on('end', () => {
      ended = true;
      if (timer === null) drain();
    });
  };
  const server = net.createServer((client) => {
    if (cut) {
      client.resetAndDestroy();
      return;
    }
    accepted++;
    const upstream = linkUpstream(client, targetPort, targetHost, sockets);
    pipe(client, upstream);
    pipe(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get accepted() {
      return accepted;
    },
    cut() {
      cut = true;
      for (const s of sockets) s.resetAndDestroy();
      sockets.clear();
    },
    restore() {
      cut = false;
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
