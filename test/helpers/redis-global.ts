/**
 * vitest globalSetup: one redis-server per run, shared by the test files that need a Redis but do nothing to
 * it (no pause, kill, restart, SCRIPT FLUSH or CONFIG SET). Each such file takes a database of its own
 * ({@link sharedRedis} in ./redis.ts), so their keys and FLUSHDBs never meet. Files that break or reconfigure
 * Redis keep starting their own (startRedis).
 *
 * When redis-server is missing, the run goes on (unit tests need no Redis) and sharedRedis() says so.
 */
import type { ChildProcess } from 'node:child_process';
import type { TestProject } from 'vitest/node';
import { SHARED_DATABASES, exited, freePort, launchRedis } from './redis.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Port of the run's shared redis-server, or 0 when it could not start. */
    sharedRedisPort: number;
    /** Why it could not start ('' when it did). */
    sharedRedisError: string;
  }
}

let child: ChildProcess | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  try {
    const port = await freePort();
    child = await launchRedis(port, ['--databases', String(SHARED_DATABASES)]);
    project.provide('sharedRedisPort', port);
    project.provide('sharedRedisError', '');
  } catch (e) {
    project.provide('sharedRedisPort', 0);
    project.provide('sharedRedisError', (e as NodeJS.ErrnoException).code === 'ENOENT'
      ? 'redis-server is not installed (apt-get install redis-server; .ci/run installs it)'
      : `the shared redis-server did not start: ${(e as Error).message}`);
  }
  return async () => {
    if (child === undefined) return;
    child.kill('SIGKILL');
    await exited(child);
  };
}
