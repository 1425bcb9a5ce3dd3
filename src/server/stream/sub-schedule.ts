/**
 * The instance-wide side of `/v1/stream` subscriptions (issue #20, item 5): a bound on the subscriptions armed
 * over all connections, and a bound on the peeks one timer tick starts. Per connection the bound is
 * `maxSubscriptions`; without an instance bound, 600 connections of 1,024 each (614 k) took 749 MiB and, coming
 * due together, stalled the event loop for 2.5 s. So past `maxInstanceSubscriptions` a check asking to
 * subscribe is answered (its decision as always) with `subscribed: false`, and a tick starts at most
 * `maxFiresPerTick` peeks: a herd due at once is spread over the next ticks, oldest due first, each push still
 * confirmed by its peek (late by at most ⌈herd / maxFiresPerTick⌉ ticks, never early).
 */
export interface SubscriptionBounds {
  /** Most subscriptions armed over every connection of the server. Default 65,536. */
  maxInstanceSubscriptions?: number;
  /** Most due subscriptions one timer tick peeks; the rest wait for the next ticks. Default 2,048. */
  maxFiresPerTick?: number;
}

export const SUBSCRIPTION_DEFAULTS = { maxInstanceSubscriptions: 65_536, maxFiresPerTick: 2048 } as const;

/** Counts armed subscriptions against the instance bound, and each tick's peeks against its budget. */
export class SubscriptionScheduler {
  readonly maxArmed: number;
  readonly maxFiresPerTick: number;
  /** Subscriptions armed now, over every connection. */
  armed = 0;
  /** Checks refused a subscription because the instance bound was reached, since start. */
  refused = 0;
  /** Ticks that left due subscriptions for later (a herd being spread), since start. */
  deferredTicks = 0;
  private budget = 0;

  constructor(o: SubscriptionBounds = {}) {
    this.maxArmed = o.maxInstanceSubscriptions ?? SUBSCRIPTION_DEFAULTS.maxInstanceSubscriptions;
    this.maxFiresPerTick = o.maxFiresPerTick ?? SUBSCRIPTION_DEFAULTS.maxFiresPerTick;
  }

  /** True (and counted) when another subscription may be armed; false, counted as refused, past the bound. */
  admit(): boolean {
    if (this.armed >= this.maxArmed) {
      this.refused++;
      return false;
    }
    this.armed++;
    return true;
  }

  /** A subscription fired, was cancelled or dropped with its connection. */
  release(): void {
    this.armed--;
  }

  /** Starts a tick's budget of peeks. */
  startTick(): void {
    this.budget = this.maxFiresPerTick;
  }

  /** True while this tick may start another peek; the first refusal of a tick counts it as deferred. */
  takeFire(): boolean {
    if (this.budget > 0) {
      this.budget--;
      return true;
    }
    if (this.budget === 0) {
      this.deferredTicks++;
      this.budget = -1;
    }
    return false;
  }
}
