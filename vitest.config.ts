import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

/** Load and soak tests (`*.load.test.ts`, `*.soak.test.ts`): their own project, run after the others, one at a time. */
const LOAD = ['test/**/*.load.test.ts', 'test/**/*.soak.test.ts'];

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
        // alone, after the default project: a load test measures the machine, and others' work is noise
        test: { name: 'load', include: LOAD, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
