/**
 * `algorithm: concurrency`: acquire and release leases (limiter.acquire, limiter.release). A local policy's
 * leases are held in this thread's {@link LeaseTable} (not in the shards: a lease is not a check, and its
 * release must find the same table); a strict policy's in Redis, one sorted set per key, changed by one
 * atomic script (lua/concurrency.lua) per call. Both follow the same rules, exactly (integer ms):
 *
 * - a lease acquired at t is held over [t, t + leaseTtl); an acquire is allowed iff the key holds fewer than
 *   `limit` live leases; `remaining` = limit − held after; a denied acquire's `retryAfterMs` = the time until
 *   the earliest expiry that makes room (a holder may release sooner);
 * - a release of a lease the key holds frees its place; of one it does not hold (never acquired, released
 *   before, or expired) it is UNKNOWN_LEASE naming `leaseId`, and changes nothing.
 */
import { randomInt } from 'node:crypto';
import { isConcurrency, type CompiledPolicy } from '../config/policy-spec.js';
import { describe, keyOf } from '../keys/derive.js';
import { escapeTagPart } from '../keys/store-key.js';
import type { AcquireRequest, LeaseDecision, ReleaseRequest, ReleaseResult } from '../types/leases.js';
import { closed, invalidArgument, isSluiceError, overloaded, storeFailed, unknownLease, unknownPolicy } from '../util/errors.js';
import { readClock } from './clock.js';
import { CLOSED_RETRY_MS, type DegradedCounts } from './degraded.js';
import { LeaseTable } from './lease-table.js';
import { CONCURRENCY_ACQUIRE, CONCURRENCY_RELEASE, type Store } from '../store/contract.js';

/** What the leases need of the store (src/store/contract.ts Store.concurrency). */
export type LeaseStore = Pick<Store, 'prefix' | 'concurrency'>;

export interface LeasesOptions {
  /** The policy set in force (read at each call: reloads apply to the next one). */
  policies: () => ReadonlyMap<string, CompiledPolicy>;
  store: LeaseStore | null;
  clock: () => number;
  /** Most keys holding leases in the local table. */
  maxKeys: number;
  /** Where strict acquires not decided by Redis are counted (the degraded decisions metric). */
  degraded: DegradedCounts | null;
  /** True once the limiter is closing. */
  closed: () => boolean;
}

/** A lease id: 48 random bits as 12 lowercase hex digits (unique among a key's live leases in practice). */
const LEASE_ID = /^[0-9a-f]{12}$/;

export class Leases {
  private readonly table: LeaseTable;

  constructor(private readonly o: LeasesOptions) {
    this.table = new LeaseTable(o.maxKeys);
  }

  /** Keys holding live leases in the local table (as last seen). */
  get localKeys(): number {
    return this.table.size;
  }

  async acquire(req: AcquireRequest): Promise<LeaseDecision> {
    const { policy, key } = this.target(req);
    const l = policy.limits[0];
    const now = readClock(this.o.clock);
    const id = randomInt(2 ** 48 - 1);
    const base: Base = { limit: l.limit, leaseTtlMs: l.periodMs, policy: policy.name };
    if (policy.consistency === 'strict') {
      let r: number[];
      try {
        r = await this.call(this.storeKey(policy.name, key), [CONCURRENCY_ACQUIRE, hex(id), l.limit, l.periodMs], now);
      } catch {
        const rule = policy.onStoreError === 'open' ? 'open' : 'closed';
        this.o.degraded?.count(policy.name, rule);
        return rule === 'open'
          ? { allowed: true, leaseId: null, limit: l.limit, remaining: 0, retryAfterMs: 0, leaseTtlMs: l.periodMs, policy: policy.name, degraded: true, degradedBy: 'open' }
          : { allowed: false, leaseId: null, limit: l.limit, remaining: 0, retryAfterMs: CLOSED_RETRY_MS, leaseTtlMs: l.periodMs, policy: policy.name, degraded: true, degradedBy: 'closed' };
      }
      return decision(r[0] === 0, r[1], r[0] === 2 ? -1 : r[2], id, base);
    }
    const a = this.table.acquire(policy.name, key, l.limit, l.periodMs, now, id);
    if (a === null) throw overloaded(`lease table full: ${this.o.maxKeys} keys hold live leases (maxKeys)`);
    return decision(a.allowed, a.remaining, a.retryAfterMs, id, base);
  }

  async release(req: ReleaseRequest): Promise<ReleaseResult> {
    const { policy, key } = this.target(req);
    const raw = (req as { leaseId?: unknown }).leaseId;
    if (typeof raw !== 'string' || !LEASE_ID.test(raw)) {
      throw invalidArgument('leaseId', `must be the leaseId acquire returned: 12 lowercase hex digits (got ${describe(raw)})`);
    }
    const l = policy.limits[0];
    const now = readClock(this.o.clock);
    if (policy.consistency === 'strict') {
      let r: number[];
      try {
        r = await this.call(this.storeKey(policy.name, key), [CONCURRENCY_RELEASE, raw, l.limit, l.periodMs], now);
      } catch (e) {
        throw isSluiceError(e) ? e : storeFailed(e);
      }
      if (r[0] !== 1) throw unknownLease(raw);
      return { released: true, remaining: r[1], policy: policy.name };
    }
    const held = this.table.release(policy.name, key, parseInt(raw, 16), now);
    if (held < 0) throw unknownLease(raw);
    return { released: true, remaining: Math.max(0, l.limit - held), policy: policy.name };
  }

  /** The concurrency policy and key a request names. */
  private target(req: AcquireRequest): { policy: CompiledPolicy; key: string } {
    if (this.o.closed()) throw closed();
    if (typeof req !== 'object' || req === null) throw invalidArgument('request', 'must be an object {policy, key | descriptors}');
    const name = (req as { policy?: unknown }).policy;
    if (typeof name !== 'string') throw invalidArgument('policy', `must be a string (got ${describe(name)})`);
    const policy = this.o.policies().get(name);
    if (policy === undefined) throw unknownPolicy(name);
    if (!isConcurrency(policy)) {
      throw invalidArgument('policy', `"${name}" is a ${policy.limits[0].algorithm} policy: acquire and release take an algorithm: concurrency policy (check this one)`);
    }
    return { policy, key: keyOf(policy, req.key, req.descriptors) };
  }

  /** lua/concurrency.lua through the store; a store without it fails the call (the failure rule applies). */
  private call(key: string, args: Array<string | number>, now: number): Promise<number[]> {
    // a strict policy on a limiter without a store is refused at load (limiter.ts checkTransition)
    const s = this.o.store!;
    if (s.concurrency === undefined) return Promise.reject(storeFailed('this store does not keep concurrency leases (use Redis)'));
    return s.concurrency(key, args, now);
  }

  /** `<prefix>{<policy>:<key>}:lease`: one hash tag (one Cluster slot), never a check's key (those tag 3 parts). */
  private storeKey(policy: string, key: string): string {
    return `${this.o.store!.prefix}{${escapeTagPart(policy)}:${escapeTagPart(key)}}:lease`;
  }
}

/** Two lowercase hex digits per byte value. */
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/**
 * A 48-bit lease id as 12 lowercase hex digits, a byte at a time: Number#toString(16) takes V8's generic
 * double-to-radix path, a third of an acquire's time here.
 */
export function hex(id: number): string {
  const hi = Math.floor(id / 2 ** 32);
  const lo = id >>> 0;
  return HEX[(hi >>> 8) & 255] + HEX[hi & 255] + HEX[lo >>> 24] + HEX[(lo >>> 16) & 255] + HEX[(lo >>> 8) & 255] + HEX[lo & 255];
}

function decision(allowed: boolean, remaining: number, retry: number, id: number, b: Base): LeaseDecision {
  if (allowed) return { allowed, leaseId: hex(id), limit: b.limit, remaining, retryAfterMs: 0, leaseTtlMs: b.leaseTtlMs, policy: b.policy };
  if (retry < 0) return { allowed, leaseId: null, limit: b.limit, remaining: 0, retryAfterMs: null, leaseTtlMs: b.leaseTtlMs, policy: b.policy, reason: 'limit is 0' };
  return { allowed, leaseId: null, limit: b.limit, remaining, retryAfterMs: retry, leaseTtlMs: b.leaseTtlMs, policy: b.policy };
}

interface Base {
  limit: number;
  leaseTtlMs: number;
  policy: string;
}
