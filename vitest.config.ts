import { configDefaults, defineConfig } from 'vitest/config';

// Two projects, both run by `npm test`: the default tests, and load/soak tests (`*.load.test.ts`,
// `*.soak.test.ts`), which run long and bounded, on their own.
const LONG = ['test/**/*.load.test.ts', 'test/**/*.soak.test.ts'];

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
    projects: [
      { extends: true, test: { name: 'default', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...LONG] } },
      { extends: true, test: { name: 'soak', include: LONG, testTimeout: 180_000 } },
    ],
  },
});
