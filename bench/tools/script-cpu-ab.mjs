// Redis CPU per strict decision of the check script of two (or more) builds, with a client that costs almost
// nothing: where bench/tools/strict-cpu-ab.mjs runs each build's whole limiter (so Redis's figure there also
// moves with how fast the client turns answers into the next call), this sends prebuilt FCALL requests of N
// token-bucket checks (keys uniform over 10,000, marked and packed as sluice's strict decider and packer do:
// src/store/contract.ts UNIQUE_KEY, src/store/leg-runs.ts), K calls always in flight on one raw socket, each
// answer's replacement written at once. Every build's library is loaded on one redis-server started for the run
// on a free loopback port (no persistence); rounds alternate A B, B A, ...; printed: the median over rounds of
// Redis's CPU (user + system, /proc) per decision, the median of each round's ratio to the first build's round
// taken next to it (the host's speed drifts within a run; a pair shares it), how often Redis's main thread slept
// per 1,000 decisions (its voluntary context switches), and each round's figure. callgrind counts instructions
// (bench/tools/script-instructions.mjs); this is what they cost in time on this host, memory stalls included.
//
//   node bench/tools/script-cpu-ab.mjs N K MS ROUNDS ROOT_A ROOT_B ...
//
// A ROOT is a built checkout (its dist/ made by `npm run build`), e.g. a `git worktree` of the commit to compare.
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { resolve } from 'node:path';

const [N, K, MS, ROUNDS] = process.argv.slice(2, 6).map(Number);
// from the caller's directory (imported below from this file's)
const roots = process.argv.slice(6).map((r) => resolve(r));
if (!(N > 0 && K > 0 && MS > 0 && ROUNDS > 0) || roots.length === 0) {
  console.error('usage: node bench/tools/script-cpu-ab.mjs N K MS ROUNDS ROOT_A [ROOT_B ...]');
  process.exit(2);
}
const { startRedis } = await import(new URL('../../dist/bench/lib/redis-server.js', import.meta.url).href);
const { cpuTicks, stealPercent } = await import(new URL('../../dist/bench/lib/host.js', import.meta.url).href);
const { median: medianOfSorted } = await import(new URL('../../dist/bench/lib/measure.js', import.meta.url).href);
const own = await startRedis();

/** One RESP request of `args` (strings, numbers or Buffers). */
const encode = (args) => {
  const parts = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
};

const sock = net.connect(own.port, '127.0.0.1');
sock.setNoDelay(true);
await new Promise((resolve) => sock.once('connect', resolve));
// the answers' callbacks, in order; the replies are bulk strings (FCALL), simple strings or errors
const waiting = [];
let buf = Buffer.alloc(0);
sock.on('data', (d) => {
  buf = buf.length > 0 ? Buffer.concat([buf, d]) : d;
  let p = 0;
  while (p < buf.length) {
    const eol = buf.indexOf('\r\n', p);
    if (eol < 0) break;
    let next = eol + 2;
    if (buf[p] === 0x24) { // $
      const len = Number(buf.toString('latin1', p + 1, eol));
      if (len >= 0) {
        if (eol + 4 + len > buf.length) break;
        next = eol + 4 + len;
      }
    } else if (buf[p] === 0x2d) { // -
      console.error(`redis: ${buf.toString('latin1', p, eol)}`);
      process.exit(1);
    }
    p = next;
    waiting.shift()();
  }
  buf = buf.subarray(p);
});
const send = (req) => new Promise((resolve) => {
  waiting.push(resolve);
  sock.write(req);
});

const builds = [];
for (const root of roots) {
  const { checkSourceIn, checkLibraryOf } = await import(`${root}/dist/src/store/scripts.js`);
  const { UNIQUE_KEY } = await import(`${root}/dist/src/store/contract.js`);
  const runs = await import(`${root}/dist/src/store/leg-runs.js`);
  const lib = checkLibraryOf(checkSourceIn(`${root}/lua`));
  await send(encode(['FUNCTION', 'LOAD', 'REPLACE', lib.text]));
  let x = 12345;
  const rnd = () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x;
  };
  // the bench's strict policy: 60 a minute into a bucket of 1e9, cost 1
  const leg = [0, 60, 60_000, 1e9, 1, 1];
  const request = () => {
    const keys = Array.from({ length: N }, () => `bench:strict:{bench:6f1c2a9e:k${rnd() % 10_000}}:0`);
    const count = new Map();
    for (const k of keys) count.set(k, (count.get(k) ?? 0) + 1);
    const f = new Float64Array(N * 6);
    for (let i = 0; i < N; i++) for (let j = 0; j < 6; j++) f[i * 6 + j] = leg[j] + (j === 0 && count.get(keys[i]) === 1 ? UNIQUE_KEY : 0);
    // packRuns (a run's later legs left out) or, in builds before it, markRuns (every leg packed)
    const kept = runs.packRuns ? runs.packRuns(f, N) : (runs.markRuns(f, N), f.length);
    return encode(['FCALL', lib.fn, N, ...keys, '1', '0', String(N), Buffer.from(f.buffer, 0, kept * 8)]);
  };
  builds.push({ root, requests: Array.from({ length: 300 }, request), res: [], sleeps: [] });
}
// every key written before counting
for (const b of builds) for (let i = 0; i < 20_000 / N; i++) await send(b.requests[i % b.requests.length]);

// Redis's main thread's sleeps so far: its voluntary context switches (an epoll_wait that found nothing to do)
const sleeps = () => Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`/proc/${own.pid}/task/${own.pid}/status`, 'utf8'))[1]);
const round = (b) => new Promise((resolve) => {
  let done = 0, next = 0, inFlight = 0, running = true;
  const cpu0 = own.cpuMicros(), s0 = sleeps();
  const go = () => {
    inFlight++;
    void send(b.requests[next++ % b.requests.length]).then(() => {
      inFlight--;
      done += N;
      if (running) go();
      else if (inFlight === 0) {
        b.sleeps.push((1000 * (sleeps() - s0)) / done);
        resolve((own.cpuMicros() - cpu0) / done);
      }
    });
  };
  for (let i = 0; i < K; i++) go();
  setTimeout(() => { running = false; }, MS);
});
const ticks0 = cpuTicks();
for (let r = 0; r < ROUNDS; r++) for (const b of r % 2 === 0 ? builds : [...builds].reverse()) b.res.push(await round(b));
const median = (xs) => medianOfSorted([...xs].sort((a, b) => a - b));
console.log(`script-cpu-ab: ${N} checks a call, ${K} calls in flight, ${ROUNDS} rounds of ${MS} ms, CPU steal ${stealPercent(ticks0, cpuTicks())?.toFixed(1) ?? 'unknown'} %`);
const base = median(builds[0].res);
for (const b of builds) {
  const m = median(b.res);
  // round r of this build against round r of the first, taken back to back: the host's slow drifts cancel
  const paired = median(b.res.map((v, r) => v / builds[0].res[r]));
  console.log(`${b.root}: Redis ${m.toFixed(2)} µs/decision (${(m / base).toFixed(3)}×, paired by round ${paired.toFixed(3)}×), Redis asleep ${median(b.sleeps).toFixed(1)} times per 1000 decisions; per round ${b.res.map((v) => v.toFixed(2)).join(' ')}`);
}
sock.end();
await own.stop();
