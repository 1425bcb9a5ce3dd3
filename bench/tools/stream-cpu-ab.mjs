// Server CPU per /v1/stream decision of two (or more) builds of sluice, A/B alternated in one run: where the
// bench's decisions/s swing with the machine's load, CPU time per decision of rounds taken back to back is
// the steadier figure. Each build's server is a child process (`startServer`, shards 0, the ws scenario's
// policy: a token bucket of 1e9 a minute, maxKeys 200,000) that reports its own process.cpuUsage(); one
// connection per server, 8 frames of 4,096 checks in flight (keys uniform over 100,000, as
// bench/scenarios/ws.ts sends them), rounds alternated A B, B A, ...; medians of ns per decision.
//
//   node bench/tools/stream-cpu-ab.mjs json|binary ROUNDS MS ROOT_A ROOT_B ...
//
// A ROOT is a built checkout (its dist/ and build/ made by `npm run build`), e.g. a `git worktree` of the
// commit to compare against. PROF=1 runs the servers with --cpu-prof (profiles in ./prof).
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { ANSWER_HEAD, FRAME_CHECKS, FRAME_HEADER, FrameWriter } from '../../dist/src/wire/binary.js';

if (process.argv[2] === '--server') {
  const root = process.argv[3];
  const { createLimiter } = await import(`${root}/dist/src/index.js`);
  const { startServer } = await import(`${root}/dist/src/server/http.js`);
  const policies = { bench: { algorithm: 'token_bucket', limit: 1_000_000_000, period: 60_000, burst: 1_000_000_000 } };
  const limiter = await createLimiter({ policies, shards: 0, maxKeys: 200_000 });
  const srv = await startServer({ limiter, host: '127.0.0.1', port: 0 });
  process.on('message', (m) => {
    if (m === 'cpu') {
      const u = process.cpuUsage();
      process.send({ cpu: u.user + u.system });
    } else if (m === 'stop') srv.close().then(() => limiter.close()).then(() => process.exit(0));
  });
  process.send({ port: srv.port });
} else {
  const [enc, roundsArg, msArg, ...roots] = process.argv.slice(2);
  if (enc !== 'json' && enc !== 'binary' || roots.length === 0) {
    console.error('usage: node bench/tools/stream-cpu-ab.mjs json|binary ROUNDS MS ROOT_A [ROOT_B ...]');
    process.exit(2);
  }
  const FRAME = 4096, WINDOW = 8, KEYS = 100_000;
  let seed = 12345;
  const next = () => {
    seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
    return seed;
  };
  const frames = [];
  for (let s = 0; s < WINDOW; s++) {
    if (enc === 'binary') {
      const w = new FrameWriter(FRAME_CHECKS, 1 << 17);
      for (let i = 0; i < FRAME; i++) w.check(s * FRAME + i, 'bench', `k${next() % KEYS}`, 1, 0);
      frames.push(w.finish().slice());
    } else {
      const p = [];
      for (let i = 0; i < FRAME; i++) p.push(`{"id":${s * FRAME + i},"policy":"bench","key":"k${next() % KEYS}","cost":1}`);
      frames.push(`[${p.join(',')}]`);
    }
  }
  const self = fileURLToPath(import.meta.url);
  const servers = [];
  for (const root of roots) {
    const execArgv = process.env.PROF ? ['--cpu-prof', '--cpu-prof-dir=prof'] : [];
    const ch = fork(self, ['--server', root], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const port = await new Promise((r) => ch.once('message', (m) => r(m.port)));
    const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/stream`, { perMessageDeflate: false });
    await new Promise((r) => ws.once('open', r));
    servers.push({ root, ch, ws, res: [] });
  }
  const cpu = (ch) => new Promise((r) => {
    ch.once('message', (m) => r(m.cpu));
    ch.send('cpu');
  });
  const round = async (s, ms) => {
    let decisions = 0, errors = 0, busy = 0, running = true, idle = () => {};
    const left = new Int32Array(WINDOW);
    const send = (slot) => {
      left[slot] = FRAME;
      busy++;
      s.ws.send(frames[slot], { binary: enc === 'binary' });
    };
    const got = (slot) => {
      decisions++;
      if (--left[slot] > 0) return;
      busy--;
      if (running) send(slot);
      else if (busy === 0) idle();
    };
    const onMessage = (data, isBinary) => {
      if (isBinary) {
        const count = data[2] | (data[3] << 8);
        let at = FRAME_HEADER;
        for (let i = 0; i < count; i++) {
          if (data[at + 4] === 2) errors++;
          got(Math.floor((data[at] | (data[at + 1] << 8) | (data[at + 2] << 16)) / FRAME));
          at += ANSWER_HEAD + data[at + 40] + data[at + 41] + (data[at + 42] | (data[at + 43] << 8));
        }
        return;
      }
      const t = data.toString('latin1');
      for (let pos = 0; ;) {
        const k = t.indexOf('{"id":', pos);
        if (k < 0) break;
        let j = k + 6, id = 0;
        for (let c = t.charCodeAt(j); c >= 48 && c <= 57; c = t.charCodeAt(++j)) id = id * 10 + (c - 48);
        if (t.startsWith(',"error"', j)) errors++;
        got(Math.floor(id / FRAME));
        pos = j;
      }
    };
    s.ws.on('message', onMessage);
    const c0 = await cpu(s.ch);
    const t0 = performance.now();
    for (let i = 0; i < WINDOW; i++) send(i);
    await new Promise((r) => setTimeout(r, ms));
    running = false;
    await new Promise((r) => {
      idle = r;
      if (busy === 0) r();
    });
    const c1 = await cpu(s.ch);
    const t1 = performance.now();
    s.ws.off('message', onMessage);
    return { perSecond: decisions / ((t1 - t0) / 1000), ns: ((c1 - c0) * 1000) / decisions, errors };
  };
  const startLoad = loadavg().map((x) => x.toFixed(1)).join(' ');
  for (const s of servers) await round(s, 300); // warm-up
  for (let r = 0; r < Number(roundsArg); r++) {
    for (const s of r % 2 === 0 ? servers : [...servers].reverse()) s.res.push(await round(s, Number(msArg)));
  }
  const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  for (const s of servers) {
    const ns = s.res.map((x) => x.ns);
    console.log(`${s.root}: ${enc}, server CPU ns/decision median ${median(ns).toFixed(0)} (rounds ${ns.map((x) => x.toFixed(0)).join(' ')}), ` +
      `decisions/s median ${(median(s.res.map((x) => x.perSecond)) / 1000).toFixed(0)} k, errors ${s.res.reduce((a, x) => a + x.errors, 0)}`);
    s.ws.close();
    s.ch.send('stop');
  }
  console.log(`load average at start ${startLoad}, at end ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
}
