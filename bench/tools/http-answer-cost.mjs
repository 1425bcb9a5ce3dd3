#!/usr/bin/env node
/**
 * The CPU cost of sluice's `GET /v1/check` route in this process, without sockets: sluice's real route handler
 * (startServer, shards 0, the built-in default config, status page and hot keys on, as the bench's `sluice,
 * shards 0`) called with a stand-in uWS request and response. The stand-in's writes convert strings as uWS's
 * do (a UTF-8 copy: TextEncoder.encodeInto) and take typed arrays as they are, so the figure covers the JS
 * path and the string conversions, not uWS's own framing, the kernel's sockets or wrk.
 *
 *   node bench/tools/http-answer-cost.mjs <package root> [<package root>...] [--hot]
 *     A/B: each root's built dist/ (run `npm run build` in it), rounds alternated (order rotated), median and
 *     fastest round of process CPU ns per request. Keys: a random one of 10,000 per request, or --hot: one key.
 *   WARM=150000 M=50000 node bench/tools/http-answer-cost.mjs <root> [--hot]
 *     runs WARM + M requests through the first root and exits: under `valgrind --tool=callgrind`, the
 *     difference of the totals of a run with M and one with M=0, divided by M, is instructions per request.
 */
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const hot = args.includes('--hot');
const roots = args.filter((a) => !a.startsWith('--')).map((r) => resolve(r));
if (roots.length === 0) {
  console.error('usage: http-answer-cost.mjs <package root>... [--hot]');
  process.exit(2);
}
const require = createRequire(pathToFileURL(`${roots[0]}/package.json`));
const uWS = require('uWebSockets.js');

// startServer registers its routes on uWS.App(): a stand-in App records the GET /v1/check handler
const realApp = uWS.App;
let handler = null;
const App = function App(...a) {
  const app = realApp(...a);
  const get = app.get.bind(app);
  app.get = (pattern, h) => {
    if (pattern === '/v1/check') handler = h;
    return get(pattern, h);
  };
  return app;
};
App.toString = () => 'function App() { [native code] }'; // startServer checks that the native binary is loaded
uWS.App = App;

const utf8 = new TextEncoder();
const sink = new Uint8Array(65_536);
let written = 0;
const take = (v) => (written += typeof v === 'string' ? utf8.encodeInto(v, sink).written : v.byteLength);
const res = {
  onAborted() { return res; },
  cork(f) { f(); return res; },
  writeStatus(s) { take(s); return res; },
  writeHeader(k, v) { take(k); take(v); return res; },
  end(b) { if (b !== undefined) take(b); return res; },
};
let query = '';
const req = {
  getQuery: () => query,
  forEach(cb) { cb('host', '127.0.0.1:8080'); }, // wrk's one header
  getHeader: () => '',
  getUrl: () => '/v1/check',
  getMethod: () => 'get',
};

const subjects = [];
for (const root of roots) {
  const url = (p) => pathToFileURL(`${root}/dist/src/${p}`).href;
  const { createLimiter } = await import(url('index.js'));
  const { defaultConfig } = await import(url('config/default.js'));
  const { startServer } = await import(url('server/http.js'));
  const cfg = defaultConfig();
  const limiter = await createLimiter({ policies: cfg.policies, shards: 0, maxKeys: cfg.engine.maxKeys });
  handler = null;
  await startServer({ limiter, host: '127.0.0.1', port: 0, statusPage: true });
  subjects.push({ root, h: handler, ns: [] });
}

let seed = 12345;
const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
const queries = hot ? ['policy=free&key=hot'] : Array.from({ length: 10_000 }, () => `policy=free&key=k${next() % 10_000}`);
const run = (h, n, from) => {
  for (let i = 0; i < n; i++) {
    query = queries[(from + i) % queries.length];
    h(res, req);
  }
};

if (process.env.WARM !== undefined) {
  run(subjects[0].h, Number(process.env.WARM) + Number(process.env.M ?? 0), 0);
  process.exit(0);
}
const N = Number(process.env.N ?? 100_000);
const ROUNDS = Number(process.env.ROUNDS ?? 12);
for (let r = 0; r < ROUNDS; r++) {
  for (let j = 0; j < subjects.length; j++) {
    const s = subjects[(j + r) % subjects.length];
    const a = process.cpuUsage();
    run(s.h, N, r * N);
    const b = process.cpuUsage(a);
    if (r >= 2) s.ns.push(((b.user + b.system) * 1000) / N); // the first two rounds warm the JIT
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
for (const s of subjects) {
  console.log(`${s.root}: ${median(s.ns).toFixed(0)} ns/request (fastest round ${Math.min(...s.ns).toFixed(0)}), ${hot ? 'one hot key' : '10k keys'}`);
}
process.exit(0);
