/**
 * A check and its answer: what a caller asks ({@link CheckRequest}, with {@link CheckOptions} for a delayed
 * admission) and what the limiter decides ({@link Decision}, with a shadow policy's own verdict).
 */

/**
 * The answer to "may this key spend `cost` now?".
 * All times are whole milliseconds; `remaining` and `limit` are tokens (requests, when cost is 1).
 */
export interface Decision {
  /** Whether the check was admitted (and its cost consumed). */
  allowed: boolean;
  /** The binding limit's L: tokens per period. */
  limit: number;
  /** Tokens left after this check (floor), never negative. */
  remaining: number;
  /** Ms until the binding limit is back to full (bucket refilled, window over). */
  resetAfterMs: number;
  /**
   * 0 when admitted; ms until the same check would be admitted (on a policy with `onLimit: delay`: admitted
   * with a delay of maxDelayMs); `null` when it never can (cost > capacity).
   */
  retryAfterMs: number | null;
  /**
   * onLimit: delay only, present when admitted later: ms (> 0, at most the policy's maxDelayMs) the caller
   * waits before it proceeds. The cost is already spent (the bucket is in debt until then). Absent when the
   * check proceeds at once.
   */
  delayMs?: number;
  /** Name of the binding limit (the policy's, a `limits[]` entry's, or its guard's). */
  policy: string;
  /**
   * Why: a check denied for good (`retryAfterMs: null`): `'limit is 0'`, `'cost exceeds the limit\'s capacity'`,
   * or `'denylist'` (the key is on the policy's deny list); or an admitted check that skipped the limit:
   * `'allowlist'` (the key is on the policy's allow list: `remaining` is the limit, nothing was spent).
   */
  reason?: string;
  /**
   * Present (true) when Redis did not make a strict decision: the store failed (down, frozen, circuit open)
   * and the policy's onStoreError decided instead; `degradedBy` says which rule.
   */
  degraded?: boolean;
  /**
   * With `degraded`: how the decision was made. `open`: admitted, nothing counted; `closed`: denied;
   * `local`: this instance's own kernel, from the key's state last learned from Redis.
   */
  degradedBy?: 'open' | 'closed' | 'local';
  /** Sync mode: ms since this instance last merged with Redis (how old its view of the others' spending is). */
  stalenessMs?: number;
  /**
   * Present on every decision of a shadow policy (`shadow: true`), which never denies: the decision then says
   * `allowed: true` and `retryAfterMs: 0`, with `limit`, `remaining`, `resetAfterMs` and `policy` from the
   * evaluation, and this field is the evaluation's own verdict. `allowed: false` is a would-deny (counted in
   * `sluice_shadow_decisions_total{result="would_deny"}`); its state was left untouched, as for any denial.
   */
  shadow?: ShadowEvaluation;
}

/** What a shadow policy really decided (see {@link Decision.shadow}). Times in whole ms, counts in tokens. */
export interface ShadowEvaluation {
  /** Whether the policy admitted the check (and spent its cost from the shadow policy's own state). */
  allowed: boolean;
  /** Tokens left in the binding limit after the evaluation (floor), never negative. */
  remaining: number;
  /** 0 when admitted; the wait in ms the policy would have asked for; `null` when it could never pass. */
  retryAfterMs: number | null;
  /** As {@link Decision.reason}: why it could never pass, or `'allowlist'` / `'denylist'`. */
  reason?: string;
}

/** How {@link Limiter.check} answers a check that is admitted with a delay (onLimit: delay). */
export interface CheckOptions {
  /**
   * true: resolve once the decision's `delayMs` has passed (real time: a timer), holding its wait place until
   * then. Default false: resolve at once; the caller waits `delayMs` itself (its place is held on the
   * limiter's clock until then).
   */
  wait?: boolean;
  /** With `wait`: aborting it frees the wait place (not the tokens, already spent) and rejects with its reason. */
  signal?: AbortSignal;
}

/** One check. Give `key`, or `descriptors` for a policy that declares them. */
export interface CheckRequest {
  policy: string;
  /** 1 to 1,024 bytes of UTF-8, well-formed; compared byte for byte (no normalisation). */
  key?: string;
  /** Descriptor values by name; joined (escaped) into the key in the policy's declared order. */
  descriptors?: Record<string, string>;
  /** Tokens to spend: a non-negative safe integer; 0 is a peek. */
  cost: number;
}
