/** Concurrency leases (an `algorithm: concurrency` policy): acquire and release, and their answers. */

/**
 * One acquire (or release) under an `algorithm: concurrency` policy: `key`, or `descriptors` for a policy that
 * declares them, as in a check.
 */
export interface AcquireRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8, well-formed; compared byte for byte. */
  key?: string;
  /** Descriptor values by name; joined (escaped) into the key in the policy's declared order. */
  descriptors?: Record<string, string>;
}

/** Gives back a lease {@link Limiter.acquire} handed out. */
export interface ReleaseRequest extends AcquireRequest {
  /** The lease id the acquire returned: 12 lowercase hex digits. */
  leaseId: string;
}

/**
 * The answer to "may this key start one more now?" under a concurrency policy (at most `limit` leases held at
 * once per key, each released by {@link Limiter.release} or `leaseTtlMs` after it was acquired).
 */
export interface LeaseDecision {
  /** Whether a lease was taken. */
  allowed: boolean;
  /** The lease to release when done (12 hex digits); null when denied, or admitted without a lease (`degradedBy: 'open'`). */
  leaseId: string | null;
  /** N: leases a key may hold at once. */
  limit: number;
  /** Leases the key may still take after this answer (limit − held), never negative. */
  remaining: number;
  /**
   * 0 when allowed; when denied, ms until the earliest lease expires that makes room (sooner if a holder
   * releases); `null` when it never can (limit 0).
   */
  retryAfterMs: number | null;
  /** How long the lease lasts unless released, in ms (the policy's `leaseTtl`). */
  leaseTtlMs: number;
  /** The policy's name. */
  policy: string;
  /** `'limit is 0'` with `retryAfterMs: null`. */
  reason?: string;
  /** Present (true) when Redis failed and the policy's onStoreError (open or closed) answered instead. */
  degraded?: boolean;
  degradedBy?: 'open' | 'closed';
}

/** What a release did: the lease is no longer held. */
export interface ReleaseResult {
  released: true;
  /** Leases the key may take now (limit − held), never negative. */
  remaining: number;
  policy: string;
}
