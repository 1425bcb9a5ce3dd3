import net from 'node:net';

/**
 * The server side of a test proxy's connection: connects to targetHost:targetPort for the accepted `client`,
 * tracks both sockets in `sockets` (the proxy's close() destroys what is left there), tears both down when
 * either ends or fails, and turns Nagle off both ways (a proxy that batches would change what it stands in
 * for). The caller decides what flows between them.
 */
export function linkUpstream(client: net.Socket, targetPort: number, targetHost: string, sockets: Set<net.Socket>): net.Socket {
  const upstream = net.connect(targetPort, targetHost);
  sockets.add(client);
  sockets.add(upstream);
  const drop = (): void => {
    client.destroy();
    upstream.destroy();
    sockets.delete(client);
    sockets.delete(upstream);
  };
  client.on('error', drop).on('close', drop);
  upstream.on('error', drop).on('close', drop);
  client.setNoDelay(true);
  upstream.setNoDelay(true);
  return upstream;
}
