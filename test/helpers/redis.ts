import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import type { Limiter } from '../../src/index.js';

/** A redis-server of the test's own on a free port (no persistence), with controls for fault tests. */
export interface TestRedis {
  port: number;
  url: string;
  /** A plain client for inspecting keys (TTL, SCAN...). */
  client: Redis;
  /** SIGSTOP: connections stay open, nothing answers. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** SIGKILL, then a new server on the same port with no data. */
  restart(): Promise<void>;
  /** SIGKILL and wait for the exit. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/**
 * Starts a redis-server on `port` (127.0.0.1, no persistence) with `extraArgs` after the defaults, and
 * resolves with its process once it accepts connections (rejects after 5 s). Its working directory is an empty
 * one of its own, removed when it exits (a `--dir` in `extraArgs` replaces it): a server made a replica writes
 * its full sync's RDB there, which in the caller's directory (the project's) every later redis-server started
 * there, the bench's included, would load.
 */
export async function launchRedis(port: number, extraArgs: string[] = [], env?: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-test-redis-'));
  try {
    const child = await spawnRedisServer(['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extraArgs],
      'Ready to accept connections', 'redis-server', env);
    void exited(child).then(() => rmSync(dir, { recursive: true, force: true }));
    return child;
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/**
 * Spawns `redis-server args` and resolves with its process once its stdout shows `ready` (rejects after 5 s,
 * saying `what` did not start, with what it printed).
 */
export function spawnRedisServer(args: string[], ready: string, what: string, env?: NodeJS.ProcessEnv): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${what} did not start: ${out}`)), 5000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(ready)) {
        clearTimeout(timer);
        resolve(child);
      }
    });
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    // one that exits first (its port taken meanwhile by another test's process) fails now, not after 5 s
    child.once('exit', () => {
      clearTimeout(timer);
      reject(new Error(`${what} did not start: ${out}`));
    });
  });
}

/**
 * Whether `e` says a redis-server did not start because its port was taken: freePort() frees the port it found
 * before the server binds it, and another test's process can take it in between.
 */
export function portTaken(e: unknown): boolean {
  return /Address already in use/.test(String((e as Error | null)?.message));
}

/** Resolves once `child` has exited (at once if it already has). */
export function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once('exit', () => r()));
}

export async function startRedis(): Promise<TestRedis> {
  let port = await freePort();
  let child: ChildProcess;
  // another free port when this one was taken before the server bound it (portTaken)
  for (let attempt = 1; ; attempt++) {
    try {
      child = await launchRedis(port);
      break;
    } catch (e) {
      if (!portTaken(e) || attempt === 5) throw e;
      port = await freePort();
    }
  }
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => undefined);
  const kill = async (): Promise<void> => {
    child.kill('SIGKILL');
    await exited(child);
  };
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    client,
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    kill,
    async restart() {
      await kill();
      child = await launchRedis(port);
    },
    async stop() {
      client.disconnect();
      child.kill('SIGCONT');
      await kill();
    },
  };
}

/** Databases of the run's shared redis-server: one per test file that uses it (database 0 hands them out). */
export const SHARED_DATABASES = 64;

/** A database of the run's shared redis-server (test/helpers/redis-global.ts), this test file's alone. */
export interface SharedRedis {
  port: number;
  /** `redis://127.0.0.1:<port>/<db>`: a limiter or `sluice serve --redis` given it uses this database. */
  url: string;
  db: number;
  /** A plain client on this database. */
  client: Redis;
  /** Empties this database and disconnects (the server stays up for other files). */
  stop(): Promise<void>;
}

/**
 * A database of the run's shared redis-server, emptied, for a test file that needs a Redis but does not
 * pause, kill, restart, flush scripts of or reconfigure it (those use {@link startRedis}). Databases are
 * handed out by INCR on database 0, so files running in parallel never share one.
 * @throws Error when the shared server is not running (redis-server missing), or no database is left.
 */
export async function sharedRedis(): Promise<SharedRedis> {
  const port = inject('sharedRedisPort');
  if (!port) throw new Error(inject('sharedRedisError') || 'no shared redis-server: vitest.config.ts globalSetup did not run');
  const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  const db = await admin.incr('sluice-test:next-db');
  admin.disconnect();
  if (db >= SHARED_DATABASES) throw new Error(`the shared redis-server has no database left (${db}): raise SHARED_DATABASES`);
  const client = new Redis(port, '127.0.0.1', { db, maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => undefined);
  await client.flushdb();
  return {
    port,
    url: `redis://127.0.0.1:${port}/${db}`,
    db,
    client,
    async stop() {
      await client.flushdb();
      client.disconnect();
    },
  };
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Redis's clock, in Unix ms. */
export async function redisNow(client: Redis): Promise<number> {
  const [s, us] = await client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Waits, if need be, until a clock that reads `now` (Unix ms) has at least `needMs` left in the current window of `period`. */
async function insideWindowAt(now: number, period: number, needMs: number): Promise<void> {
  const left = period - (now % period);
  if (left < needMs) await pause(left + 20);
}

/** Waits, if need be, until Redis's clock has at least `needMs` left in the current window of `period`. */
export async function insideWindow(client: Redis, period: number, needMs: number): Promise<void> {
  await insideWindowAt(await redisNow(client), period, needMs);
}

/**
 * Waits, if need be, until this process's clock (Date.now) has at least `needMs` left in the current window of
 * `period`: for a limiter on the wall clock (no `clock` option) deciding locally, whose fixed and sliding
 * windows are epoch-aligned too.
 */
export async function insideLocalWindow(period: number, needMs: number): Promise<void> {
  await insideWindowAt(Date.now(), period, needMs);
}

/** Waits (up to 10 s) until the limiter's store is connected. */
export async function connected(limiter: Limiter): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await limiter.stats()).store?.connected) {
    if (Date.now() > deadline) throw new Error('limiter did not connect to Redis within 10 s');
    await pause(5);
  }
}

/** Every key under `prefix`, sorted (SCAN: keys already expired are not listed). */
export async function keysUnder(client: Redis, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    out.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return out.sort();
}

const FROZEN_C = `
#include <stddef.h>
#include <sys/time.h>
/* Redis 7.0 reads wall time only through gettimeofday() (ustime, mstime, TIME, key expiry); its event loop
   runs on the monotonic clock, which stays real. */
int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  if (tv != NULL) { tv->tv_sec = 1700000000; tv->tv_usec = 0; }
  return 0;
}
`;

/** A redis-server whose wall clock stands still (keys never expire): see startFrozenRedis. */
export interface FrozenRedis {
  url: string;
  client: Redis;
  stop(): Promise<void>;
}

/**
 * A redis-server whose gettimeofday() is pinned by a tiny LD_PRELOAD library (built here with cc): no key ever
 * expires, so with `clock: 'limiter'` Redis state lives exactly as long as the controlled clock says.
 */
export async function startFrozenRedis(): Promise<FrozenRedis> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-frozen-'));
  const src = path.join(dir, 'frozen.c');
  const lib = path.join(dir, 'frozen.so');
  writeFileSync(src, FROZEN_C);
  execFileSync('cc', ['-shared', '-fPIC', '-O2', '-o', lib, src], { stdio: 'pipe' });
  const port = await freePort();
  const child = await launchRedis(port, [], { ...process.env, LD_PRELOAD: lib });
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  return {
    url: `redis://127.0.0.1:${port}`,
    client,
    async stop() {
      client.disconnect();
      child.kill('SIGKILL');
      await exited(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
