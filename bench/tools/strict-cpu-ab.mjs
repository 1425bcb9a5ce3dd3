// Client CPU per strict decision of two (or more) builds of sluice, A/B alternated in one run: where the
// redis bench's decisions/s swing with the machine's load, the CPU time the limiter's process spends per
// decision, in rounds taken back to back, is the steadier figure. Each build is a child process with its own
// limiter (createLimiter from that build's dist/, shards 0, `consistency: strict`, onStoreError closed,
// timeoutMs 1000) running the loop of bench/scenarios/redis.ts: C checks always in flight on keys uniform over
// 10,000, a token bucket of 1e9 refilled 1/s (every check admitted), each answer's replacement issued in the
// next turn (setImmediate), all of a turn's together. All children share one redis-server started for the run
// on a free loopback port (no persistence); rounds alternated A B, B A, ...; medians of µs of process CPU
// (user + system, the loop included) per decision, of decisions/s, and of Redis CPU per decision (/proc), that
// one also as the median ratio to the first build's round taken next to it (the host's drift cancels), and how
// often Redis's main thread slept per 1,000 decisions (its voluntary context switches: an epoll_wait that found
// nothing to do); then each round's figures. The first line gives the host's CPU steal over the run
// (bench/lib/host.ts).
//
//   node bench/tools/strict-cpu-ab.mjs C ROUNDS MS ROOT_A ROOT_B ...
//
// A ROOT is a built checkout (its dist/ and build/ made by `npm run build`), e.g. a `git worktree` of the
// commit to compare against. OVER=1 puts 90 % of checks on 100 over-limit keys (bench/scenarios/redis.ts'
// over-limit case). PROF=1 runs the children with --cpu-prof (profiles in ./prof). ROOT@n runs that build with
// redis.pipelineCalls n (PIPELINE=n: every child), so one build's call splits compare in one run; ROOT#h with
// redis.holdUnder h (HOLD_UNDER=h: every child), and ROOT@n#h both.
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const KEYS = 10_000, HOT_KEYS = 100;

if (process.argv[2] === '--child') {
  const [, , , root, port] = process.argv;
  const { createLimiter } = await import(`${root}/dist/src/index.js`);
  const strict = (limit, burst) => ({ algorithm: 'token_bucket', limit, period: 60_000, burst, consistency: 'strict', onStoreError: 'closed' });
  const lim = await createLimiter({
    policies: { bench: strict(60, 1_000_000_000), hot: strict(10, 10) },
    shards: 0,
    maxKeys: KEYS * 2,
    redis: { url: `redis://127.0.0.1:${port}`, prefix: `ab:${process.pid}:`, timeoutMs: 1_000, ...(process.env.PIPELINE ? { pipelineCalls: Number(process.env.PIPELINE) } : {}),
      ...(process.env.HOLD_UNDER ? { holdUnder: Number(process.env.HOLD_UNDER) } : {}) },
  });
  const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
  const hotKeys = Array.from({ length: HOT_KEYS }, (_, i) => `h${i}`);
  for (let i = 0; i < 10; i++) await lim.check({ policy: 'bench', key: keys[i], cost: 1 });
  let seed = 0x5eed;
  const next = () => {
    seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
    return seed;
  };
  const round = (c, ms, over) => new Promise((resolve) => {
    let done = 0, denied = 0, degraded = 0, inFlight = 0, owed = 0, scheduled = false, running = true, cpu = null, elapsed = 0;
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const issueOwed = () => {
      scheduled = false;
      const k = owed;
      owed = 0;
      for (let i = 0; i < k; i++) one();
    };
    const one = () => {
      inFlight++;
      const r = next();
      const hot = over && r % 10 !== 0;
      lim.check({ policy: hot ? 'hot' : 'bench', key: hot ? hotKeys[(r >>> 4) % HOT_KEYS] : keys[r % KEYS], cost: 1 }).then((d) => {
        inFlight--;
        if (running) {
          done++;
          if (!d.allowed) denied++;
          if (d.degraded === true) degraded++;
          owed++;
          if (!scheduled) {
            scheduled = true;
            setImmediate(issueOwed);
          }
        } else if (inFlight === 0) resolve({ done, denied, degraded, cpu, elapsed });
      });
    };
    for (let i = 0; i < c; i++) one();
    setTimeout(() => {
      running = false;
      elapsed = performance.now() - t0;
      const u = process.cpuUsage(cpu0);
      cpu = u.user + u.system;
      if (inFlight === 0) resolve({ done, denied, degraded, cpu, elapsed });
    }, ms);
  });
  process.on('message', async (m) => {
    if (m.stop) {
      await lim.close();
      process.exit(0);
    }
    process.send(await round(m.c, m.ms, m.over));
  });
  process.send({ ready: true });
} else {
  const [cArg, roundsArg, msArg, ...roots] = process.argv.slice(2);
  if (!(Number(cArg) > 0) || roots.length === 0) {
    console.error('usage: node bench/tools/strict-cpu-ab.mjs C ROUNDS MS ROOT_A [ROOT_B ...]');
    process.exit(2);
  }
  const c = Number(cArg), rounds = Number(roundsArg), ms = Number(msArg), over = process.env.OVER === '1';
  // the bench's own redis-server (this checkout's build: `npm run build` first)
  const { startRedis } = await import(new URL('../../dist/bench/lib/redis-server.js', import.meta.url).href);
  const own = await startRedis();
  const { port } = own;
  const redisCpu = () => own.cpuMicros();
  // Redis's main thread's sleeps: its voluntary context switches (each an epoll_wait that found nothing to do)
  const { readFileSync } = await import('node:fs');
  const redisSleeps = () => Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`/proc/${own.pid}/task/${own.pid}/status`, 'utf8'))[1]);
  const self = fileURLToPath(import.meta.url);
  const kids = [];
  for (const root of roots) {
    const execArgv = process.env.PROF ? ['--cpu-prof', '--cpu-prof-dir=prof'] : [];
    // ROOT@n#h: that build with redis.pipelineCalls n, redis.holdUnder h (either may be left out)
    const [build, hold] = root.split('#');
    const [given, pipe] = build.split('@');
    // from the caller's directory (the child imports it from this file's)
    const dir = resolve(given);
    const env = { ...process.env, ...(pipe === undefined ? {} : { PIPELINE: pipe }), ...(hold === undefined ? {} : { HOLD_UNDER: hold }) };
    const ch = fork(self, ['--child', dir, String(port)], { execArgv, env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    // a child that exits before the run's end (a root without a build) stops the run, and its redis-server
    const early = (code) => {
      console.error(`strict-cpu-ab: the child for ${root} exited (${code}) before the run's end`);
      for (const k of kids) k.ch.kill();
      own.stop().then(() => process.exit(1));
    };
    ch.once('exit', early);
    await new Promise((r) => ch.once('message', r));
    kids.push({ root, ch, res: [], early });
  }
  const ask = (k, q) => new Promise((r) => {
    k.ch.once('message', r);
    k.ch.send(q);
  });
  const load0 = loadavg()[0];
  const { cpuTicks, stealPercent } = await import(new URL('../../dist/bench/lib/host.js', import.meta.url).href);
  const ticks0 = cpuTicks();
  for (const k of kids) await ask(k, { c, ms: 300, over }); // warm-up
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? kids : [...kids].reverse();
    for (const k of order) {
      const r0 = redisCpu(), s0 = redisSleeps();
      const res = await ask(k, { c, ms, over });
      res.redis = redisCpu() - r0;
      res.sleeps = redisSleeps() - s0;
      k.res.push(res);
    }
  }
  const med = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  console.log(`strict-cpu-ab: ${c} in flight${over ? ', 90 % over limit' : ''}, ${rounds} rounds of ${ms} ms, load average ${load0.toFixed(2)} → ${loadavg()[0].toFixed(2)}` +
    `, CPU steal ${stealPercent(ticks0, cpuTicks())?.toFixed(1) ?? 'unknown'} %`);
  let base = null;
  for (const k of kids) {
    const us = med(k.res.map((x) => x.cpu / x.done));
    const rate = med(k.res.map((x) => (x.done * 1000) / x.elapsed));
    const rus = med(k.res.map((x) => x.redis / x.done));
    const bad = k.res.reduce((a, x) => a + x.degraded, 0);
    base ??= { us, rate, res: k.res };
    // Redis CPU per decision against the first build's round taken next to it (the host's drift cancels)
    const paired = med(k.res.map((x, r) => (x.redis / x.done) / (base.res[r].redis / base.res[r].done)));
    console.log(`${k.root}: client ${us.toFixed(2)} µs/decision (${(us / base.us).toFixed(3)}×), ${(rate / 1000).toFixed(1)} k/s (${(rate / base.rate).toFixed(3)}×), ` +
      `Redis ${rus.toFixed(2)} µs/decision (paired by round ${paired.toFixed(3)}×), ${med(k.res.map((x) => (1000 * x.sleeps) / x.done)).toFixed(1)} sleeps per 1000; per round ${k.res.map((x) => (x.cpu / x.done).toFixed(2)).join(' ')} (client), ` +
      `${k.res.map((x) => (x.redis / x.done).toFixed(2)).join(' ')} (Redis), ${k.res.map((x) => (1000 * x.sleeps / x.done).toFixed(1)).join(' ')} (sleeps)${bad ? `; ${bad} degraded` : ''}`);
  }
  for (const k of kids) {
    k.ch.off('exit', k.early);
    k.ch.send({ stop: true });
  }
  await Promise.all(kids.map((k) => new Promise((r) => k.ch.once('exit', r))));
  await own.stop();
}
