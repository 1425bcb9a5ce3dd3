// Redis instructions per decision of the strict check script (lua/check.lua), counted by callgrind: a steady
// figure where CPU time on the shared 2 cores swings by 2x between runs. Starts its own redis-server under
// valgrind on a free loopback port, writes NKEYS token-bucket keys (a bucket of 1e9, so every check is
// admitted, refilled 1 token an hour, so that no key expires during the run: under valgrind the run takes
// seconds, and a key of the bench's 60 a minute, spent once, is full again and expires after 1 s), then
// counts the instructions Redis spends inside EVALSHA over CALLS calls of LEGS single-leg checks on random
// keys. FRESH=1: every counted check is on a key never written (MGET reads it as false: the first-sight path).
// Needs valgrind (callgrind_control). The legs go marked as sluice marks them (PLAIN=1: without the UNIQUE_KEY marks
// and runs; NORUNS=1: without the runs, src/store/leg-runs.ts).
//
//   node bench/tools/script-instructions.mjs [luaDir=lua] [LEGS=64] [CALLS=100]     (NKEYS=2000 by default; MODE=fcall)
//
// Only the script is counted (--toggle-collect=evalShaCommand, or fcallCommand with MODE=fcall: the script as
// the Redis Function library sluice loads, src/store/scripts.ts checkLibrary): reading the call off the socket
// and writing its reply are not (WHOLE=1 counts them too: the whole server while the calls are made; at 32
// checks a call the script was 96 % of it). Also printed: the commands the script ran per decision (INFO commandstats).
// REDIS_SERVER=path runs another redis-server binary (one built with symbols, for a per-function profile);
// KEEP=file keeps callgrind's output for callgrind_annotate.
// MODE=envoy counts the redis bench's envoy-style baseline instead (bench/scenarios/redis.ts): per check an INCRBY
// and an EXPIRE of its fixed window's key, a call's LEGS checks written together by ioredis's auto-pipelining, no
// script; always the whole server (its commands arrive one by one), so compare it with WHOLE=1 MODE=fcall.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

const [, , luaDir = 'lua', LEGS = '64', CALLS = '100'] = process.argv;
// joined and wrapped as sluice does it (the build's src/store/scripts.ts: `npm run build` first)
const { checkSourceIn, checkChunkOf, checkLibraryOf } = await import(new URL('../../dist/src/store/scripts.js', import.meta.url).href);
const src = checkSourceIn(luaDir);
const FCALL = process.env.MODE === 'fcall';
const ENVOY = process.env.MODE === 'envoy';
const WHOLE = ENVOY || process.env.WHOLE === '1';
const lua = checkChunkOf(src);
const library = checkLibraryOf(src);
const { freePort } = await import(new URL('../../dist/bench/lib/redis-server.js', import.meta.url).href);
const port = await freePort();
const out = join(tmpdir(), `sluice-callgrind.${port}.out`);
// WHOLE=1: everything the server runs while the calls are made (reading requests, writing replies, its event
// loop), not only the script
const toggle = WHOLE ? [] : [`--toggle-collect=${FCALL ? 'fcallCommand' : 'evalShaCommand'}`];
// in an empty directory of its own: a dump.rdb in this one (a replica's full sync writes one) would be loaded,
// and a master's keeps its replication backlog, which every write of the script then feeds (~11 % more)
const dir = mkdtempSync(join(tmpdir(), 'sluice-callgrind-redis-'));
const rs = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', ...toggle, `--callgrind-out-file=${out}`,
  process.env.REDIS_SERVER ?? 'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
rs.once('exit', () => rmSync(dir, { recursive: true, force: true }));
const redis = new Redis({ port, retryStrategy: () => 200, enableAutoPipelining: ENVOY });
redis.on('error', () => {});
await new Promise((resolve) => redis.once('ready', resolve));
const sha = FCALL || ENVOY ? '' : await redis.script('LOAD', lua);
if (FCALL) await redis.call('FUNCTION', 'LOAD', 'REPLACE', library.text);
const NKEYS = Number(process.env.NKEYS ?? 2000);
const FRESH = process.env.FRESH === '1';
// the bench's keys: strict's as src/keys/store-key.ts makes them, the envoy-style baseline's `<key>_<window>`
const keys = Array.from({ length: NKEYS }, (_, i) => (ENVOY ? `bench:envoy:k${i}_29473` : `bench:strict:{bench:6f1c2a9e:k${i}}:0`));
let x = 12345;
const rnd = () => {
  x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
  return x;
};
const n = Number(LEGS);
const leg = [0, 1, 3_600_000, 1e9, 1, 1]; // token bucket, L, P, B, cost, group length
const args = Array.from({ length: n }, () => leg).flat();
// marked as sluice's strict decider marks them (src/store/contract.ts UNIQUE_KEY: a check of one leg on a key
// no other leg of the call names); PLAIN=1 sends them unmarked
const { UNIQUE_KEY } = await import(new URL('../../dist/src/store/contract.js', import.meta.url).href);
// and its runs packed as sluice's packer packs them (src/store/leg-runs.ts: a run's head marked, its later legs
// left out; NORUNS=1: every leg sent, unmarked)
const { packRuns } = await import(new URL('../../dist/src/store/leg-runs.js', import.meta.url).href);
const packedFor = (ks) => {
  const count = new Map();
  for (const k of ks) count.set(k, (count.get(k) ?? 0) + 1);
  const f = Float64Array.from(args, (v, i) => (i % 6 === 0 && process.env.PLAIN !== '1' && count.get(ks[i / 6]) === 1 ? v + UNIQUE_KEY : v));
  const kept = process.env.PLAIN !== '1' && process.env.NORUNS !== '1' ? packRuns(f, n) : f.length;
  const b = Buffer.alloc(kept * 8);
  for (let i = 0; i < kept; i++) b.writeDoubleLE(f[i], i * 8);
  return b;
};
const call = (ks) => (ENVOY ? Promise.all(ks.flatMap((k) => [redis.incrby(k, 1), redis.expire(k, 60)])) : FCALL ? redis.call('FCALL', library.fn, n, ...ks, '1', '0', String(n), packedFor(ks))
  : redis.evalsha(sha, n, ...ks, '1', '0', String(n), packedFor(ks)));
// every key written twice before counting
for (let i = 0; i * n < NKEYS * 2; i++) await call(Array.from({ length: n }, (_, j) => keys[(i * n + j) % NKEYS]));
let fresh = 0;
const pick = () => (FRESH ? (ENVOY ? `bench:envoy:f${fresh++}_29473` : `bench:strict:{bench:6f1c2a9e:f${fresh++}}:0`) : keys[rnd() % NKEYS]);
const stats = async () => {
  const m = new Map();
  for (const [, name, calls] of (await redis.info('commandstats')).matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) m.set(name, Number(calls));
  return m;
};
const before = await stats();
execFileSync('callgrind_control', ['-i', 'on', String(rs.pid)], { stdio: 'ignore' });
const calls = [];
for (let i = 0; i < Number(CALLS); i++) calls.push(call(Array.from({ length: n }, pick)));
await Promise.all(calls);
execFileSync('callgrind_control', ['-i', 'off', String(rs.pid)], { stdio: 'ignore' });
const after = await stats();
const exited = new Promise((resolve) => rs.once('exit', resolve));
redis.shutdown('NOSAVE').catch(() => {});
await exited;
redis.disconnect();
let total = 0;
for (const f of readdirSync(tmpdir()).filter((f) => f.startsWith(`sluice-callgrind.${port}.out`))) {
  const text = readFileSync(join(tmpdir(), f), 'utf8');
  total += Number(/^totals: (\d+)/m.exec(text)?.[1] ?? 0);
  if (process.env.KEEP) writeFileSync(process.env.KEEP, text);
  rmSync(join(tmpdir(), f));
}
const decisions = Number(CALLS) * n;
const perDecision = [...after].filter(([c]) => !['evalsha', 'fcall', 'function', 'info', 'script'].includes(c) && after.get(c) > (before.get(c) ?? 0))
  .map(([c, v]) => `${c} ${((v - (before.get(c) ?? 0)) / decisions).toFixed(3)}`).join(', ');
console.log(`${ENVOY ? 'envoy-style' : luaDir}: ${Math.round(total / decisions)} Redis instructions per decision ${WHOLE ? 'in the whole server' : `inside ${FCALL ? 'FCALL' : 'EVALSHA'}`} ` +
  `(${CALLS} ${ENVOY ? 'pipelines' : 'calls'} of ${n} ${ENVOY ? 'INCRBY + EXPIRE' : 'token-bucket'} checks on ${FRESH ? 'keys never written' : `${NKEYS} written keys`}; ` +
  `commands per decision: ${perDecision})`);
