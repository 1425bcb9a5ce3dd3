import { describe, expect, it } from 'vitest';
import { decisionProblem } from '../../../src/wire/decision-shape.js';

const ok = { allowed: false, limit: 10, remaining: 0, resetAfterMs: 6000, retryAfterMs: 600, policy: 'p' };

describe('decisionProblem', () => {
  it('accepts what the server writes: a decision, a never-denial (null wait, reason), a delayed admission', () => {
    expect(decisionProblem(ok)).toBe(null);
    expect(decisionProblem({ ...ok, retryAfterMs: null, reason: 'limit is 0' })).toBe(null);
    expect(decisionProblem({ ...ok, allowed: true, retryAfterMs: 0, delayMs: 250, degraded: true, degradedBy: 'local' })).toBe(null);
  });

  it('names the first field that is wrong, with what it got', () => {
    expect([null, [], 'x', {}, { ...ok, allowed: 'false' }, { ...ok, allowed: 1 }, { ...ok, limit: '10' }, { ...ok, remaining: -1 },
      { ...ok, resetAfterMs: 1.5 }, { ...ok, retryAfterMs: undefined }, { ...ok, retryAfterMs: Number.NaN }, { ...ok, policy: 3 },
      { ...ok, delayMs: 0 }, { ...ok, reason: false }].map(decisionProblem)).toStrictEqual([
      'must be an object (got null)', 'must be an object (got an array)', 'must be an object (got "x")',
      'allowed: must be true or false (got nothing)', 'allowed: must be true or false (got "false")',
      'allowed: must be true or false (got 1)', 'limit: must be a non-negative safe integer (got "10")',
      'remaining: must be a non-negative safe integer (got -1)', 'resetAfterMs: must be a non-negative safe integer (got 1.5)',
      'retryAfterMs: must be a non-negative safe integer or null (got nothing)',
      'retryAfterMs: must be a non-negative safe integer or null (got NaN)', 'policy: must be a string (got 3)',
      'delayMs: must be a positive safe integer (got 0)', 'reason: must be a string (got boolean)',
    ]);
  });
});
