/**
 * A redis-server of the bench's own: started on a free loopback port without persistence for a run
 * (bench/scenarios/redis.ts and lease.ts, bench/tools/), with its CPU time read from /proc, so that a round's
 * Redis CPU per decision counts that server alone.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

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
  /** Its CPU time so far, µs (from /proc: 10 ms resolution). */
  cpuMicros(): number;
  stop(): Promise<void>;
  version: string;
}

/** Starts redis-server on a free loopback port, no persistence; resolves once it accepts connections. */
export async function startRedis(): Promise<OwnRedis> {
  const port = await freePort();
  const p: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
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
  const version = /Redis version=(\S+)/.exec(log)?.[1] ?? /v=(\S+)/.exec(log)?.[1] ?? 'unknown';
  const pid = p.pid!;
  return {
    port, pid, version,
    cpuMicros() {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      // fields after "pid (comm) ": state is [0]; utime is field 14 overall → index 11 here, stime 12
      return (Number(f[11]) + Number(f[12])) * 10_000;
    },
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

/** Whether a redis-server binary is on PATH. */
export function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { timeout: 5_000 }).error === undefined;
}
