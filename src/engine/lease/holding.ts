import { capacityOf, type CompiledLimit, type LeaseSettings } from '../../config/policy-spec.js';
import type { PolicyRuntime } from '../runtime.js';
import { cdiv } from '../../store/memory-algorithms.js';

/** A check waiting for a lease call (its tokens were not held here). */
export interface Waiter {
  rt: PolicyRuntime;
  key: string;
  cost: number;
  legs: Holding[];
  resolve: (d: import('../../types/decision.js').Decision) => void;
  reject: (e: Error) => void;
  /** The key's hash under the policy's seed (for the kernel, if Redis fails and onStoreError is `local`). */
  hashLo: number;
  hashHi: number;
}

/**
 * What this instance holds of one leg's key (one limit of one key, or of a guard): a lease's tokens, spent
 * locally. The lease in Redis has `held + unreported` outstanding tokens (+ what a call in flight reports):
 * `unreported` were spent here since the last call, `held` can still be. Times are the limiter's clock (ms).
 */
export class Holding {
  /** Tokens this instance may still spend, until {@link deadline}. */
  held = 0;
  /** Tokens spent since the last lease call was sent (reported by the next). */
  unreported = 0;
  /**
   * Tokens spent under {@link leaseId} since this holding was made, never decreasing: what each lease call
   * reports (LeaseCall.spentTotal), so a call that timed out but ran in Redis is not settled again by the next.
   */
  spentTotal = 0;
  /** Local time after which {@link held} is void: the lease's end, measured from when the call was sent. */
  deadline = 0;
  /** A lease call in flight. */
  inFlight = false;
  /** Checks waiting for tokens of this leg, in arrival order. */
  readonly waiters: Waiter[] = [];
  /** Redis had nothing to grant: checks that need more than {@link held} are denied until this local time. */
  deniedUntil = 0;
  /** The tokens the call that set {@link deniedUntil} asked for (its retryAfterMs is for that many). */
  deniedNeed = 0;
  /** Tokens Redis had left at the last call, and the local time the key was to be full again. */
  remote = 0;
  resetAt = 0;
  /**
   * A bucket's: what it lacked at the last call with every outstanding token counted as spent (tokens·P,
   * lua/lease.lua), the local time of that answer, and its refill rate L (tokens·P per ms). 0 rate: a window.
   */
  deficit = 0;
  deficitAt = 0;
  rate = 0;
  /** Local time of the last check that touched this leg. */
  lastUse = 0;
  /** Adaptive size: tokens spent since {@link sizedAt}, the spend rate (tokens per ms, smoothed), the last target. */
  spent = 0;
  sizedAt = -1;
  spendRate = 0;
  size = 0;

  /** Forgotten by the decider (idle, nothing held): a check's legs holding it are looked up again. */
  gone = false;

  constructor(
    /** The policy whose limit this leg is (a guard leg: the guard's), for counts. */
    readonly policy: string,
    /** The leg's lease state key in Redis (src/engine/lease/keys.ts). */
    readonly stateKey: string,
    readonly limit: CompiledLimit,
    readonly settings: LeaseSettings,
    /** Unique per instance and holding: an id no other instance uses. */
    readonly leaseId: string,
  ) {}

  /** The most tokens one lease of this leg may hold (maxShare of the capacity, at least 1). */
  get maxLease(): number {
    return Math.max(1, Math.floor(capacityOf(this.limit) * this.settings.maxShare));
  }

  /**
   * A decision's resetAfterMs at `now` (ms until the key's limit would be whole again if nothing more were
   * spent). A window's is its end as Redis reported it (a grant counts in its window from the start). A
   * bucket's is its deficit at this instance's last lease call, refilled since, plus what was spent here
   * since, less the tokens still held here: with one instance whose spends reach Redis before time moves,
   * exactly strict's figure (a spend reported later refills later in Redis: a later reset, never an earlier
   * one). With several instances it is Redis's state as of this instance's last call: other instances'
   * outstanding tokens count as spent, and what they did since is not seen (as `remaining`).
   */
  resetAfterMs(now: number): number {
    if (this.rate === 0) return Math.max(0, this.resetAt - now);
    const P = this.limit.periodMs;
    // held tokens past the lease's end count as spent (Redis counts an expired lease as all used)
    const held = this.spendable(now);
    // the bucket refills only up to B·P less what is outstanding, and this instance's own part of that is known
    const deficit = Math.max(this.deficit - Math.max(0, now - this.deficitAt) * this.rate, (held + this.unreported) * P);
    const lacking = deficit - held * P;
    return lacking <= 0 ? 0 : cdiv(lacking, this.rate);
  }

  /** Tokens spendable at `now`: none past the deadline (the lease may have expired in Redis). */
  spendable(now: number): number {
    return now < this.deadline ? this.held : 0;
  }

  /**
   * The tokens to ask for at `now` when `need` more are needed (0: a renewal): what this key spends here in
   * half a lease's life at its recent rate, less what is held, at least `need`, at most {@link maxLease}.
   * A key's first call asks for `need` only (cold keys strand little).
   */
  want(now: number, need: number): number {
    // spends within the same ms count as over 1 ms (a rate is never measured as infinite)
    if (this.sizedAt >= 0 && (now > this.sizedAt || this.spent > 0)) {
      const inst = this.spent / Math.max(1, now - this.sizedAt);
      this.spendRate = this.spendRate === 0 ? inst : (this.spendRate + inst) / 2;
    }
    this.spent = 0;
    this.sizedAt = now;
    const target = Math.ceil(this.spendRate * this.settings.ttlMs / 2);
    this.size = Math.min(this.maxLease, Math.max(need, target));
    return Math.max(need, Math.min(this.maxLease, target) - this.spendable(now));
  }
}
