/**
 * A redis-server of the bench's own: started on a free loopback port without persistence for a run
 * (bench/scenarios/redis.ts and lease.ts, bench/tools/), with its CPU time read from /proc, so that a round's
 * Redis CPU per decision counts that server alone.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A free TCP port on 127.0.0.1 (bound, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface OwnRedis {
  port: number;
  pid: number;
  /**
   * Its CPU time so far (user + system, all its threads), µs: from the scheduler's own count (procCpuMicros),
   * to the nanosecond where the kernel keeps it, else /proc/<pid>/stat's 10 ms ticks.
   */
  cpuMicros(): number;
  stop(): Promise<void>;
  version: string;
}

/**
 * Starts redis-server on a free loopback port, no persistence, in an empty working directory of its own
 * (removed when it exits); resolves once it accepts connections. Started in the caller's directory, it would
 * load a dump.rdb found there (a replica's full sync writes one), and one written by a master keeps its
 * replication backlog: from then on every write a script makes is also fed to the backlog, ~11 % more Redis
 * instructions per strict decision (callgrind, bench/README.md), so the bench would measure a different server.
 */
export async function startRedis(): Promise<OwnRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-redis-'));
  const p: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${log.slice(-300)}`)), 10_000);
    p.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    p.once('exit', (code) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      reject(new Error(`redis-server exited (${code}): ${log.slice(-300)}`));
    });
    p.stdout!.on('data', (d: Buffer) => {
      log += d.toString();
      if (log.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  p.removeAllListeners('exit');
  p.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const version = /Redis version=(\S+)/.exec(log)?.[1] ?? /v=(\S+)/.exec(log)?.[1] ?? 'unknown';
  const pid = p.pid!;
  return {
    port, pid, version,
    cpuMicros: () => procCpuMicros(pid),
    stop: () => new Promise<void>((resolve) => {
      if (p.exitCode !== null) return resolve();
      const killer = setTimeout(() => p.kill('SIGKILL'), 3_000);
      p.once('exit', () => {
        clearTimeout(killer);
        resolve();
      });
      p.kill('SIGTERM');
    }),
  };
}

/**
 * Process pid's CPU time so far, µs: the sum over its threads of the first field of
 * /proc/<pid>/task/<tid>/schedstat, the nanoseconds the scheduler ran that thread (proc(5)), where the kernel
 * keeps it; else utime + stime from /proc/<pid>/stat, in 10 ms clock ticks. The ticks are too coarse for a
 * round: a 500 ms round of the envoy-style baseline spends ~100 ms of Redis CPU, 10 ticks, so one tick more or
 * less moved its Redis CPU per decision by 10 %.
 */
export function procCpuMicros(pid: number): number {
  let ns = 0;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ', 1)[0]);
    }
  } catch {
    ns = 0; // a thread that ended while being read, or no schedstat: the ticks below
  }
  if (ns > 0 && Number.isFinite(ns)) return ns / 1000;
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  // fields after "pid (comm) ": state is [0]; utime is field 14 overall → index 11 here, stime 12
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

/** Whether a redis-server binary is on PATH. */
export function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { timeout: 5_000 }).error === undefined;
}
