/**
 * A redis-server whose wall clock stands still (gettimeofday() pinned by a tiny LD_PRELOAD library, built
 * with cc): no key ever expires, so Redis state driven on a controlled clock (`redis.clock: 'limiter'`)
 * lives exactly as long as the kernel's. For the differential tests of the Lua scripts against the kernel.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { exited, freePort, launchRedis } from './redis.js';

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

export interface FrozenRedis {
  url: string;
  client: Redis;
  stop(): Promise<void>;
}

/** Starts one on a free port; `stop()` kills it and removes its files. */
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

