import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

/** Load and soak tests (`*.load.test.ts`, `*.soak.test.ts`): their own projects, run after the others. */
const LOAD = ['test/**/*.load.test.ts', 'test/**/*.soak.test.ts'];
/**
 * The load tests whose result depends on the machine's spare CPU: the exactness herds (issues #13, #14: a
 * check that waits too long on a starved Redis is degraded, and they require none), the overload test (it
 * offers twice what the server serves) and the soak (its drain deadline). They run last, one at a time. The
 * others assert exact counts, bounded memory or bounds read off Redis's clock, and run two at a time.
 */
const LOAD_ALONE = ['test/fault/strict-exact.load.test.ts', 'test/fault/lease-exact.load.test.ts', 'test/fault/overload.load.test.ts', 'test/fault/redis.soak.test.ts'];

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Most files wait on sockets, child processes and Redis as much as they compute: two workers even on
    // two cores (vitest's default there is one).
    maxWorkers: Math.max(2, availableParallelism()),
    projects: [
      {
        extends: true,
        test: {
          name: 'default',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...LOAD],
          // one redis-server for the run, a database per file that asks (test/helpers/redis.ts sharedRedis)
          globalSetup: ['test/helpers/redis-global.ts'],
        },
      },
      {
        extends: true,
        // after the default project, two files at a time (they are CPU-bound on one core each)
        test: { name: 'load', include: LOAD, exclude: [...configDefaults.exclude, ...LOAD_ALONE], sequence: { groupOrder: 1 } },
      },
      {
        extends: true,
        // last, one at a time: these measure the machine, and others' work is noise
        test: { name: 'load-alone', include: LOAD_ALONE, fileParallelism: false, sequence: { groupOrder: 2 } },
      },
    ],
  },
});
