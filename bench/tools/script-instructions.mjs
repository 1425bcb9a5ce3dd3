// Redis instructions per decision of the strict check script (lua/check.lua), counted by callgrind: a steady
// figure where CPU time on the shared 2 cores swings by 2x between runs. Starts its own redis-server under
// valgrind on a free loopback port, writes NKEYS token-bucket keys (the bench's policy: 60 a minute into a
// bucket of 1e9, so every check is admitted), then counts the instructions Redis spends inside EVALSHA over
// CALLS calls of LEGS single-leg checks on random keys. Needs valgrind (callgrind_control).
//
//   node bench/tools/script-instructions.mjs [luaDir=lua] [LEGS=64] [CALLS=100]     (NKEYS=2000 by default)
//
// Only the script is counted (--toggle-collect=evalShaCommand): reading the call off the socket and writing
// its reply are not.
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

const [, , luaDir = 'lua', LEGS = '64', CALLS = '100'] = process.argv;
const PARTS = ['lib.lua', 'token_bucket.lua', 'gcra.lua', 'fixed_window.lua', 'sliding_window.lua', 'calendar_window.lua', 'sliding_log.lua', 'check.lua'];
const lua = PARTS.map((f) => readFileSync(join(luaDir, f), 'utf8')).join('\n');
const port = await new Promise((resolve) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => {
    const p = s.address().port;
    s.close(() => resolve(p));
  });
});
const out = join(tmpdir(), `sluice-callgrind.${port}.out`);
const rs = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', '--toggle-collect=evalShaCommand', `--callgrind-out-file=${out}`,
  'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
const redis = new Redis({ port, retryStrategy: () => 200 });
redis.on('error', () => {});
await new Promise((resolve) => redis.once('ready', resolve));
const sha = await redis.script('LOAD', lua);
const NKEYS = Number(process.env.NKEYS ?? 2000);
const keys = Array.from({ length: NKEYS }, (_, i) => `bench:strict:{bench:6f1c2a9e:k${i}}:0`);
let x = 12345;
const rnd = () => {
  x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
  return x;
};
const n = Number(LEGS);
const leg = [0, 60, 60_000, 1e9, 1, 1]; // token bucket, L, P, B, cost, group length
const packed = Buffer.alloc(n * 48);
for (let j = 0; j < n; j++) leg.forEach((v, a) => packed.writeDoubleLE(v, j * 48 + a * 8));
const call = (ks) => redis.evalsha(sha, n, ...ks, '1', '0', String(n), packed);
// every key written twice before counting
for (let i = 0; i * n < NKEYS * 2; i++) await call(Array.from({ length: n }, (_, j) => keys[(i * n + j) % NKEYS]));
execFileSync('callgrind_control', ['-i', 'on', String(rs.pid)], { stdio: 'ignore' });
const calls = [];
for (let i = 0; i < Number(CALLS); i++) calls.push(call(Array.from({ length: n }, () => keys[rnd() % NKEYS])));
await Promise.all(calls);
execFileSync('callgrind_control', ['-i', 'off', String(rs.pid)], { stdio: 'ignore' });
const exited = new Promise((resolve) => rs.once('exit', resolve));
redis.shutdown('NOSAVE').catch(() => {});
await exited;
redis.disconnect();
let total = 0;
for (const f of readdirSync(tmpdir()).filter((f) => f.startsWith(`sluice-callgrind.${port}.out`))) {
  total += Number(/^totals: (\d+)/m.exec(readFileSync(join(tmpdir(), f), 'utf8'))?.[1] ?? 0);
  rmSync(join(tmpdir(), f));
}
console.log(`${luaDir}: ${Math.round(total / (Number(CALLS) * n))} Redis instructions per decision inside EVALSHA ` +
  `(${CALLS} calls of ${n} token-bucket checks over ${NKEYS} keys)`);
