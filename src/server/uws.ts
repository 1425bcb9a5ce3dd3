/**
 * The uWebSockets.js calls its bundled d.ts does not declare (they exist at run time in 20.30), typed once
 * here so that no other transport file needs a cast.
 */
import uWS from 'uWebSockets.js';
import type { TemplatedApp, us_listen_socket } from 'uWebSockets.js';

type ListenWithOptions = (host: string, port: number, options: number, cb: (t: us_listen_socket | false) => void) => void;

/**
 * Listens on host:port with LIBUS_LISTEN_EXCLUSIVE_PORT: uWS would otherwise set SO_REUSEPORT, and a second
 * instance started on the same port by mistake would silently take half the connections, each with its own
 * counters. `cb` gets the listen socket, or false when the port cannot be had.
 */
export function listenExclusive(app: TemplatedApp, host: string, port: number, cb: (t: us_listen_socket | false) => void): void {
  const exclusive = (uWS as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT: number }).LIBUS_LISTEN_EXCLUSIVE_PORT;
  (app.listen as unknown as ListenWithOptions).call(app, host, port, exclusive, cb);
}

/**
 * Listens on host:port sharing the port (SO_REUSEPORT, uWS's default without the exclusive flag): the extra
 * HTTP front threads of one instance (src/server/threads.ts) each listen on it.
 */
export function listenShared(app: TemplatedApp, host: string, port: number, cb: (t: us_listen_socket | false) => void): void {
  (app.listen as unknown as ListenWithOptions).call(app, host, port, 0, cb);
}

/** Closes every socket of the app at once (its listen sockets should be closed first). */
export function closeApp(app: TemplatedApp): void {
  (app as unknown as { close(): void }).close();
}

/** Replaces the app's registration method `m` (get, post, ... any) with `register`. */
export function replaceRoute(app: TemplatedApp, m: 'get' | 'post' | 'put' | 'del' | 'patch' | 'options' | 'head' | 'any',
  register: TemplatedApp['get']): void {
  (app as unknown as Record<string, unknown>)[m] = register;
}
