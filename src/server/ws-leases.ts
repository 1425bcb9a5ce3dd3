/**
 * Concurrency leases over `/v1/stream`'s JSON frames (src/server/ws.ts hands these items here):
 * `{id, op: "acquire", policy, key | descriptors}` is answered `{id, allowed, leaseId, limit, remaining,
 * retryAfterMs, leaseTtlMs, policy}`, and `{id, op: "release", policy, key | descriptors, leaseId}`
 * `{id, released: true, remaining, policy}`; an error `{id, error: {code, detail, field, status}}` (UNKNOWN_LEASE,
 * status 409, field `leaseId` for a lease the key does not hold). Leases have no binary record: the binary
 * answer carries a check's numbers, not a lease id; a binary client sends these as text frames on the same
 * connection.
 */
import type { Limiter } from '../types.js';
import { acquireFromJson, releaseFromJson } from '../wire/leases.js';

/** The ops of a JSON item that are leases. */
export function isLeaseOp(op: unknown): op is 'acquire' | 'release' {
  return op === 'acquire' || op === 'release';
}

/**
 * Runs one lease item (its `id` and `op` already read): resolves to the answer's JSON without the id (an
 * object's text), rejects (or throws, for bad input) with the SluiceError to answer.
 */
export function leaseOp(limiter: Limiter, item: Record<string, unknown>): Promise<string> {
  // a null-prototype copy without id and op (a `__proto__` field must stay a field, as for checks)
  const rest = Object.create(null) as Record<string, unknown>;
  for (const k of Object.keys(item)) if (k !== 'id' && k !== 'op') rest[k] = item[k];
  const run = item.op === 'acquire' ? limiter.acquire(acquireFromJson(rest)) : limiter.release(releaseFromJson(rest));
  return run.then((r) => JSON.stringify(r));
}
