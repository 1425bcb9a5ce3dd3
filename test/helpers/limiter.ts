import { expect } from 'vitest';
import type { Limiter } from '../../src/index.js';
import { compilePolicies } from '../../src/config/policies.js';
import { isSluiceError, type SluiceError } from '../../src/util/errors.js';

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
