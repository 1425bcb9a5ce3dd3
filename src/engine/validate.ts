/**
 * Validation of a check's fields, in one place: `check()`, `checkNow()`, the binary batch path
 * (`checkBatch`) and the key admin (inspect, reset) all read a request through these, so they refuse the same
 * input with the same error naming the field.
 */
import type { CheckRequest } from '../types/decision.js';
import { isLeasePolicy, type PolicyRuntime } from './runtime.js';
import { describe } from '../keys/derive.js';
import { invalidArgument, unknownPolicy } from '../util/errors.js';

/**
 * The runtime of the policy named `name`.
 * @throws SluiceError INVALID_ARGUMENT (field `policy`) when not a string or a concurrency policy, UNKNOWN_POLICY
 *   when no such policy.
 */
export function runtimeNamed(runtimes: ReadonlyMap<string, PolicyRuntime>, name: unknown): PolicyRuntime {
  if (typeof name !== 'string') throw invalidArgument('policy', `must be a string (got ${describe(name)})`);
  const rt = runtimes.get(name);
  if (rt === undefined) {
    if (isLeasePolicy(runtimes, name)) {
      throw invalidArgument('policy', `"${name}" is a concurrency policy: acquire and release its leases (limiter.acquire, POST /v1/acquire); it is never checked`);
    }
    throw unknownPolicy(name);
  }
  return rt;
}

/**
 * The runtime of a request's policy, after checking the request is an object.
 * @param what the request's field name in errors (`check` for a check, `request` for inspect and reset)
 * @throws SluiceError INVALID_ARGUMENT naming `what` or `policy`, UNKNOWN_POLICY.
 */
export function policyOf(runtimes: ReadonlyMap<string, PolicyRuntime>, req: CheckRequest | object, what: string): PolicyRuntime {
  if (typeof req !== 'object' || req === null) throw invalidArgument(what, 'must be an object');
  return runtimeNamed(runtimes, (req as { policy?: unknown }).policy);
}

/**
 * A check's cost (tokens), read once by the caller: a getter must not hand the kernel a value other than
 * the one validated.
 * @throws SluiceError INVALID_ARGUMENT (field `cost`) unless a non-negative safe integer.
 */
export function checkCost(cost: unknown): number {
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0) {
    throw invalidArgument('cost', `must be a non-negative safe integer (got ${describe(cost)})`);
  }
  return cost;
}
