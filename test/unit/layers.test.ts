/**
 * Layers point one way. Every relative import (static, `export ... from`, `import type`, and `import('...')`
 * in a type or a dynamic load) of every src/**.ts file is read, and:
 * - a file in one room (top-level folder or file of src/) imports another room only if that room's layer is
 *   strictly lower (two rooms of one layer do not import each other);
 * - no import circle exists between files.
 *
 * The layers, lowest first: util; shard and store; keys; config; types (the public contract); wire and engine;
 * metrics, reload and limiter (the composition of engine, store and shards); the transports and clients
 * (server, grpc, middleware, client); cli; index (the package's entry).
 */
import { readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SRC, sourceFiles } from '../helpers/sources.js';

const LAYER: Record<string, number> = {
  util: 0,
  shard: 1, store: 1,
  keys: 2,
  config: 3,
  types: 4,
  wire: 5, engine: 5,
  metrics: 6, reload: 6, limiter: 6,
  server: 7, grpc: 7, middleware: 7, client: 7,
  cli: 8,
  index: 9,
};

/** Relative imports of one file, as paths under src/ ending in .ts. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const re = /(?:^|[\s;])(?:import|export)\s[^;]*?\sfrom\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)/g;
  const out: string[] = [];
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const spec = m[1] ?? m[2];
    out.push(relative(SRC, normalize(join(dirname(file), spec))).replace(/\.js$/, '.ts'));
  }
  return out;
}

/** The room of a path under src/: its top-level folder, or its file name without `.ts`. */
function room(path: string): string {
  const [first, ...rest] = path.split('/');
  return rest.length > 0 ? first : first.replace(/\.ts$/, '');
}

const graph = new Map<string, string[]>();
for (const f of sourceFiles(SRC)) graph.set(relative(SRC, f), importsOf(f));

describe('layers', () => {
  it('reads the imports it judges (the parser finds known edges of each form)', () => {
    expect(graph.get('engine/batch.ts')).toContain('keys/bounds.ts'); // import { X } from
    expect(graph.get('engine/batch.ts')).toContain('types/decision.ts'); // import type
    expect(graph.get('types.ts')).toContain('store/redis.ts'); // import('...') in a type
    expect(graph.get('cli/index.ts')).toContain('cli/serve.ts'); // dynamic import()
    expect(graph.get('reload/reloader.ts')).toContain('types/reload.ts'); // export type { X } from
  });

  it('places every room of src/ in a layer', () => {
    const rooms = new Set([...graph.keys()].map(room));
    expect([...rooms].filter((r) => !(r in LAYER))).toEqual([]);
  });

  it('has no import from a room to one of the same or a higher layer', () => {
    const upward: string[] = [];
    for (const [file, deps] of graph) {
      for (const dep of deps) {
        const a = room(file);
        const b = room(dep);
        if (a !== b && LAYER[b] >= LAYER[a]) upward.push(`${file} -> ${dep}`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('has no import circle', () => {
    // Tarjan's strongly connected components; a component of more than one file is a circle
    const index = new Map<string, number>();
    const low = new Map<string, number>();
    const stack: string[] = [];
    const onStack = new Set<string>();
    const circles: string[][] = [];
    let next = 0;
    const visit = (v: string): void => {
      index.set(v, next);
      low.set(v, next++);
      stack.push(v);
      onStack.add(v);
      for (const w of graph.get(v) ?? []) {
        if (!graph.has(w)) continue;
        if (!index.has(w)) {
          visit(w);
          low.set(v, Math.min(low.get(v)!, low.get(w)!));
        } else if (onStack.has(w)) {
          low.set(v, Math.min(low.get(v)!, index.get(w)!));
        }
      }
      if (low.get(v) === index.get(v)) {
        const c: string[] = [];
        let w: string;
        do {
          w = stack.pop()!;
          onStack.delete(w);
          c.push(w);
        } while (w !== v);
        if (c.length > 1) circles.push(c.sort());
      }
    };
    for (const v of graph.keys()) if (!index.has(v)) visit(v);
    expect(circles).toEqual([]);
  });

  it('leaves the transports no hidden door: the Limiter interface and the engine handle are the contract', () => {
    // transports reach engine internals only through src/engine/handle.ts (engineOf), never a cast; the only
    // casts left are uWS's own undeclared calls, typed once in server/uws.ts
    const transports = sourceFiles(SRC).map((f) => relative(SRC, f))
      .filter((f) => ['server', 'grpc', 'middleware', 'client'].includes(room(f)) && f !== 'server/uws.ts');
    expect(transports.filter((f) => readFileSync(join(SRC, f), 'utf8').includes('as unknown as'))).toEqual([]);
    // no symbol-keyed property carries an internal any more; the symbols left are error brands and fastify's
    const symbols = sourceFiles(SRC).flatMap((f) =>
      [...readFileSync(f, 'utf8').matchAll(/Symbol\.for\('([^']+)'\)/g)].map((m) => m[1])).sort();
    expect(symbols).toEqual(['fastify.display-name', 'skip-override', 'sluice.client-error', 'sluice.error']);
  });

  it('keeps ioredis and uWebSockets.js in their rooms', () => {
    const outside = (pkg: string, rooms: string[]): string[] =>
      sourceFiles(SRC)
        .filter((f) => new RegExp(`from '${pkg}'`).test(readFileSync(f, 'utf8')))
        .map((f) => relative(SRC, f))
        .filter((f) => !rooms.includes(room(f)));
    // every Redis client lives behind the store contract (src/store/contract.ts)
    expect(outside('ioredis', ['store'])).toEqual([]);
    expect(outside('uWebSockets\\.js', ['server'])).toEqual([]);
  });
});
