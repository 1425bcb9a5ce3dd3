/**
 * onLimit: delay on the wire: whether a transport holds a delayed answer until its delay has passed (the
 * default) or answers at once with `delayMs` (`wait=0`).
 *
 * - JSON (POST /v1/check, `/v1/stream` JSON frames): a `wait` field, 0 / 1 or false / true.
 * - A query (GET /v1/check, /v1/auth?policy=...): a `wait` parameter, `0` or `1`, read as the flag only for a
 *   policy with onLimit: delay (the loader refuses a descriptor named `wait` there); on other policies the
 *   name stays what it always was, a descriptor's.
 */
import type { CheckRequest } from '../types/decision.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import { invalidArgument } from '../util/errors.js';
import { describe } from '../keys/derive.js';

/** The name of the flag, in a query and in a JSON check. */
export const WAIT_FIELD = 'wait';

/**
 * Takes the wait flag out of `req` (a JSON check's field, or for a delay policy its `wait` query parameter,
 * parsed as a descriptor) and returns it: true (hold the answer) unless it says 0 / false.
 * @throws SluiceError INVALID_ARGUMENT naming `wait` for any other value.
 */
export function takeWait(req: CheckRequest, policies: ReadonlyMap<string, CompiledPolicy>): boolean {
  const r = req as CheckRequest & { wait?: unknown };
  if (Object.hasOwn(r, WAIT_FIELD)) {
    const v = r.wait;
    delete r.wait;
    if (v === 0 || v === false) return false;
    if (v === 1 || v === true) return true;
    throw invalidArgument(WAIT_FIELD, `must be 0 (answer at once with delayMs) or 1 (hold the answer until the delay has passed) (got ${describe(v)})`);
  }
  const d = req.descriptors as unknown;
  // not an object (null, a string...): the check's validation refuses it, naming `descriptors`
  if (typeof d !== 'object' || d === null || Array.isArray(d) || !Object.hasOwn(d, WAIT_FIELD) || policies.get(req.policy)?.onLimit !== 'delay') return true;
  const values = d as Record<string, string>;
  const v = values[WAIT_FIELD];
  delete values[WAIT_FIELD];
  if (Object.keys(values).length === 0) delete req.descriptors;
  if (v === '0') return false;
  if (v === '1') return true;
  throw invalidArgument(WAIT_FIELD, `must be 0 (answer at once with delayMs) or 1 (hold the answer until the delay has passed) (got ${describe(v)})`);
}
