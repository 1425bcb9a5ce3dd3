import net from 'node:net';
import { linkUpstream } from './proxy-link.js';

/**
 * A TCP proxy on 127.0.0.1 in front of one server, standing in for a server that freezes at a chosen command:
 * `holdAt(marker)` arms it, and the first connection whose client sends `marker` (a command's bytes, as the
 * client writes them) has everything it sends from there on held (not forwarded) until `release()`. The server
 * answered what came before and never sees the command: to that client it looks frozen just before reading it,
 * which SIGSTOP cannot time. Other connections, and every reply, pass as they come.
 */
export interface HoldProxy {
  port: number;
  /** Arms the hold; resolves once a client sent `marker` and its connection is held. */
  holdAt(marker: string): Promise<void>;
  /** Forwards what was held and lets that connection go on. */
  release(): void;
  close(): Promise<void>;
}

/** A held connection: what its client sent since the marker, and the server's socket it goes to once released. */
interface Held {
  queue: Buffer[];
  to: net.Socket;
  released: boolean;
}

export async function startHoldProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<HoldProxy> {
  const sockets = new Set<net.Socket>();
  let armed: { marker: Buffer; held: () => void } | null = null;
  /** The held connection's bytes not forwarded yet, and where they go; null while none is held. */
  let holding: Held | null = null;
  const server = net.createServer((client) => {
    const upstream = linkUpstream(client, targetPort, targetHost, sockets);
    let mine: Held | null = null;
    // the end of the last chunk forwarded: a marker split across two chunks is still found
    let tail: Buffer = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      if (mine !== null && !mine.released) {
        mine.queue.push(chunk);
        return;
      }
      if (armed !== null) {
        const at = Buffer.concat([tail, chunk]).indexOf(armed.marker);
        if (at >= 0) {
          // from the marker on (or from this chunk's start, when it began in the last one: the server then holds
          // part of the command and waits for the rest, which is as good)
          const from = Math.max(0, at - tail.length);
          if (from > 0) upstream.write(chunk.subarray(0, from));
          mine = holding = { queue: [chunk.subarray(from)], to: upstream, released: false };
          const { held } = armed;
          armed = null;
          held();
          return;
        }
        tail = chunk.subarray(Math.max(0, chunk.length - armed.marker.length + 1));
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    holdAt: (marker) => new Promise<void>((resolve) => {
      armed = { marker: Buffer.from(marker, 'latin1'), held: resolve };
    }),
    release() {
      const h = holding;
      holding = null;
      if (h === null) return;
      h.released = true;
      for (const chunk of h.queue.splice(0)) if (!h.to.destroyed) h.to.write(chunk);
    },
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
