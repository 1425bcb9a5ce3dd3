/**
 * The wire form of concurrency leases, shared by HTTP (`POST /v1/acquire`, `POST /v1/release`) and the
 * WebSocket's JSON frames (`{"acquire": ...}`, `{"release": ...}`): the request objects, checked for unknown
 * fields, and the answers as JSON. Values are validated by the limiter (src/engine/leases.ts), which names
 * the field at fault.
 */
import type { AcquireRequest, ReleaseRequest } from '../types/leases.js';
import { invalidArgument } from '../util/errors.js';

const ACQUIRE_FIELDS = new Set(['policy', 'key', 'descriptors']);
const RELEASE_FIELDS = new Set(['policy', 'key', 'descriptors', 'leaseId']);

/**
 * An acquire request from parsed JSON: an object of `policy`, and `key` or `descriptors`.
 * @throws SluiceError INVALID_ARGUMENT naming the field (`<at>.<field>` when `at` is given).
 */
export function acquireFromJson(v: unknown, at?: string): AcquireRequest {
  return fields(v, at, ACQUIRE_FIELDS, 'an acquire (policy, key, descriptors)') as unknown as AcquireRequest;
}

/** A release request from parsed JSON: {@link acquireFromJson}'s fields and `leaseId` (required). */
export function releaseFromJson(v: unknown, at?: string): ReleaseRequest {
  const o = fields(v, at, RELEASE_FIELDS, 'a release (policy, key, descriptors, leaseId)');
  if (!('leaseId' in o)) throw invalidArgument(prefixed(at, 'leaseId'), 'is required: the leaseId acquire returned');
  return o as unknown as ReleaseRequest;
}

function fields(v: unknown, at: string | undefined, allowed: ReadonlySet<string>, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidArgument(at ?? 'body', 'must be a JSON object');
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!allowed.has(k)) throw invalidArgument(prefixed(at, k), `is not a field of ${what}`);
  if (!('policy' in o)) throw invalidArgument(prefixed(at, 'policy'), 'is required');
  return o;
}

function prefixed(at: string | undefined, field: string): string {
  return at === undefined ? field : `${at}.${field}`;
}
