/**
 * The composition root (src/cli/compose.ts): it builds store, limiter, HTTP server, reloader, gRPC and admin
 * in that order and closes them in the reverse order, the front doors as one stage (HTTP first). Each
 * part's close is wrapped to record when it begins and ends.
 */
import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { compose, Teardown, type App, type ComposeOptions } from '../../src/cli/compose.js';
import { MemoryStore } from '../../src/store/memory.js';
import { isSluiceError } from '../../src/index.js';

const TOKEN = 'a-token-of-sixteen-or-more';
const log = pino({ level: 'silent' });

function options(over: Partial<ComposeOptions> = {}): ComposeOptions {
  return {
    logger: log,
    store: () => new MemoryStore(),
    limiter: { policies: { p: { algorithm: 'token_bucket', limit: 5, period: 1000, consistency: 'strict' } } },
    server: { host: '127.0.0.1', port: 0 },
    reloader: { file: null, signal: null },
    grpc: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0, token: TOKEN, status: true },
    ...over,
  };
}

/** Wraps the close of each part of `app` to log `begin <name>` and `end <name>`. */
function record(app: App): string[] {
  const events: string[] = [];
  const parts: Array<[string, { close(...a: never[]): Promise<void> } | null]> = [
    ['store', app.store], ['limiter', app.limiter], ['server', app.server], ['reloader', app.reloader], ['grpc', app.grpc], ['admin', app.admin],
  ];
  for (const [name, part] of parts) {
    if (part === null) continue;
    const close = part.close.bind(part) as (...a: never[]) => Promise<void>;
    part.close = async (...a: never[]) => {
      events.push(`begin ${name}`);
      await close(...a);
      events.push(`end ${name}`);
    };
  }
  return events;
}

describe('compose', () => {
  it('serves, then closes the front doors (together, the HTTP listener first), then the limiter, which closes the store last', async () => {
    const app = await compose(options());
    const events = record(app);
    const r = await fetch(`http://127.0.0.1:${app.server.port}/v1/check?policy=p&key=k`);
    expect([r.status, await r.json()]).toStrictEqual([200, { allowed: true, limit: 5, remaining: 4, resetAfterMs: 200, retryAfterMs: 0, policy: 'p' }]);
    await app.close({ drainMs: 1000 });
    expect(events.slice(0, 4)).toStrictEqual(['begin server', 'begin reloader', 'begin grpc', 'begin admin']);
    expect(new Set(events.slice(4, 8))).toStrictEqual(new Set(['end admin', 'end grpc', 'end reloader', 'end server']));
    // the limiter closes the store it was given, after its drain
    expect(events.slice(8)).toStrictEqual(['begin limiter', 'begin store', 'end store', 'end limiter']);
    await app.close(); // a second close is the first one
    expect(events).toHaveLength(12);
    await expect(fetch(`http://127.0.0.1:${app.server.port}/healthz`)).rejects.toThrow();
  });

  it('a part that fails to start closes those built before it (the store last, once) and its error is thrown', async () => {
    const first = await compose(options({ store: null, limiter: { policies: { p: { algorithm: 'token_bucket', limit: 5, period: 1000 } } } }));
    try {
      // the admin port is taken: store, limiter, server, reloader and gRPC were started and must all close
      const closed: string[] = [];
      const store = new MemoryStore();
      const storeClose = store.close.bind(store);
      store.close = async () => {
        closed.push('store');
        await storeClose();
      };
      const err = await compose(options({ store: () => store, admin: { host: '127.0.0.1', port: first.admin!.port, token: TOKEN, status: false } }))
        .then(() => null, (e: unknown) => e);
      expect(isSluiceError(err) && [err.code, err.message]).toStrictEqual(['CONFIG', `admin API: cannot listen on 127.0.0.1:${first.admin!.port} (in use?)`]);
      expect(closed).toStrictEqual(['store']);
    } finally {
      await first.close();
    }
  });

  it('Teardown: stages close last-added first (the parts of a stage begun in the order added); a failing part does not stop the others, and its error is rethrown', async () => {
    const events: string[] = [];
    const down = new Teardown();
    const part = (name: string, fail = false) => async (): Promise<void> => {
      events.push(name);
      if (fail) throw new RangeError(name);
    };
    down.add('a', part('a'));
    down.add('b', part('b', true));
    down.beside('c', part('c'));
    down.add('d', part('d'));
    await expect(down.close()).rejects.toThrow(RangeError);
    expect(events).toStrictEqual(['d', 'b', 'c', 'a']);
  });
});
