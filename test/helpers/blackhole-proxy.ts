import net from 'node:net';
import { linkUpstream } from './proxy-link.js';

/**
 * A TCP proxy on 127.0.0.1 in front of one server that can lose traffic without closing anything, as a broken
 * middlebox or a dead NAT mapping does: `swallow` drops what clients send while it is set (on every connection,
 * new ones too; replies still pass), `freeze()` stops forwarding both ways on the connections open now (they
 * stay open, silently dead; connections made later pass), `cut()` destroys every connection (the client sees an
 * abrupt close, 1006).
 */
export interface BlackholeProxy {
  port: number;
  /** While true, bytes from clients are dropped (not forwarded, not buffered). */
  swallow: boolean;
  /** Stops forwarding, both ways and for good, on every connection open now; later connections pass. */
  freeze(): void;
  /** Destroys every connection. */
  cut(): void;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

export async function startBlackholeProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<BlackholeProxy> {
  const sockets = new Set<net.Socket>();
  const frozen = new WeakSet<net.Socket>();
  const open = new Set<net.Socket>();
  let accepted = 0;
  const proxy: BlackholeProxy = {
    port: 0,
    swallow: false,
    get accepted() {
      return accepted;
    },
    freeze() {
      for (const s of open) frozen.add(s);
    },
    cut() {
      for (const s of sockets) s.destroy();
      sockets.clear();
      open.clear();
    },
    close: () => new Promise<void>((resolve) => {
      proxy.cut();
      server.close(() => resolve());
    }),
  };
  const server = net.createServer((client) => {
    accepted++;
    const upstream = linkUpstream(client, targetPort, targetHost, sockets);
    open.add(client);
    client.on('close', () => open.delete(client));
    client.on('data', (chunk: Buffer) => {
      if (!proxy.swallow && !frozen.has(client)) upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!frozen.has(client)) client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.port = (server.address() as net.AddressInfo).port;
  return proxy;
}
