import { expect } from 'vitest';
import type { Limiter } from '../../src/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { isSluiceError, type SluiceError } from '../../src/util/errors.js';

/**
 * The key table capacity test limiters get unless a test asks for another, not the library's 1,000,000: a
 * table that size costs ~100 ms of CPU to allocate and clear per limiter (per shard with shards), and no test
 * that uses this holds more than a few thousand keys, so no key is evicted either way.
 */
export const TEST_MAX_KEYS = 16_384;

/** Sends `n` checks of `cost` for one key, one after the other; how many were admitted. */
export async function spend(l: Limiter, policy: string, key: string, n: number, cost = 1): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < n; i++) if ((await l.check({ policy, key, cost })).allowed) admitted++;
  return admitted;
}

/** The CONFIG error compilePolicies throws for `policies` (fails the test when it throws none, or another). */
export function configError(policies: Record<string, unknown>): SluiceError {
  try {
    compilePolicies(policies);
  } catch (e) {
    expect(isSluiceError(e) && e.code === 'CONFIG').toBe(true);
    return e as SluiceError;
  }
  throw new Error('expected a CONFIG error');
}
