/** One key's state, as {@link KeyRequest} names it for inspect and reset: {@link KeyState}, one {@link LimitState} per limit. */

/** Which key {@link Limiter.inspect} and {@link Limiter.reset} act on: `key`, or `descriptors`, as in a check. */
export interface KeyRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8; a descriptor policy takes the joined form (values escaped, joined by `:`). */
  key?: string;
  /** Descriptor values by name (instead of `key`). */
  descriptors?: Record<string, string>;
}

/** One limit's state for one key, now (see {@link Limiter.inspect}). Times are ms; counts are tokens. */
export interface LimitState {
  /** The limit's name, as decisions report it. */
  name: string;
  algorithm: 'token_bucket' | 'gcra' | 'fixed_window' | 'sliding_window' | 'sliding_log';
  /** L: tokens per period. */
  limit: number;
  /** B: capacity in tokens (equals `limit` for windows). */
  burst: number;
  /** P, in ms. */
  periodMs: number;
  /** Whether state is held for the key under this limit's current numbers (false: it reads as fresh). */
  held: boolean;
  /** Unix ms of the last check that changed the state (an admitted check costing > 0, or a sync merge); null when not held. */
  lastUpdateMs: number | null;
  /** token_bucket, gcra: whole tokens available now (floor), as a cost-0 check sees them. */
  tokens?: number;
  /** fixed_window, sliding_window: tokens counted in the current window; sliding_log: in the trailing period. */
  count?: number;
  /** sliding_window: tokens counted in the previous window (weighted by the part of it still in the sliding period). */
  previousCount?: number;
  /** What a cost-0 check reports now: tokens left (floor, never negative). */
  remaining: number;
  /** What a cost-0 check reports now: ms until this limit is back to full. */
  resetAfterMs: number;
  /** Lease policies: the key's leases in Redis and what this instance holds of them. */
  lease?: LeaseLimitState;
}

/** One limit of a lease policy's key (inspect): src/engine/lease/. Counts in tokens, times Unix ms. */
export interface LeaseLimitState {
  /** Tokens granted by live leases and not yet reported used or returned, over every instance. */
  outstanding: number;
  /** Each instance's lease of the key: its id, outstanding tokens, and when it expires (unless renewed). */
  leases: Array<{ id: string; count: number; expiresAt: number }>;
  /** This instance's lease id, the tokens it may still spend, and those spent and not yet reported; null: none. */
  here: { leaseId: string; held: number; unreported: number } | null;
}

/** One key's state under every limit of its policy (not its guard's), read at one instant. */
export interface KeyState {
  policy: string;
  /** The key as stored (descriptors joined). */
  key: string;
  /** The policy's version: part of every key's identity. */
  version: string;
  /** Where the state was read: this instance's kernel (`local`, `sync`), or Redis (`strict`, `lease`). */
  source: 'local' | 'redis';
  /** Sync policies: ms since this instance last merged with Redis (how old its view of the others' spending is). */
  stalenessMs?: number;
  limits: LimitState[];
}
