/**
 * The list step of the front: a check on a policy with an allow or deny list (lists.ts matches them) is
 * answered here, before any kernel or store work and before the queue bound (a listed check costs nothing).
 * Deny wins. A match is counted; the live policy's shadow candidates are still evaluated (shadow-step.ts),
 * and on a shadow policy a deny-list match is only a would-deny.
 */
import type { Decision } from '../types/decision.js';
import { readClock } from './clock.js';
import { listed } from './lists.js';
import type { PolicyRuntime } from './runtime.js';
import { allowlisted, denylisted, type PolicyCounters } from './shadow.js';
import type { ShadowStep } from './shadow-step.js';

export interface ListStepOptions {
  counters: PolicyCounters;
  /** The limiter's clock (Unix ms): read only for a shadow policy's listed check. */
  clock: () => number;
  /** Where a listed check's shadow candidates go. */
  shadows: ShadowStep;
  /** Flushes the front's batch when it is full, else makes sure a flush is scheduled (after candidates are queued). */
  schedule: () => void;
}

export class ListStep {
  constructor(private readonly o: ListStepOptions) {}

  /**
   * The decision of a check on `rt`'s allow or deny list (deny wins), counted; null when on neither.
   * `rt.lists` must not be null.
   */
  answer(rt: PolicyRuntime, key: string, cost: number): Decision | null {
    const list = listed(rt.lists!, key);
    if (list === null) return null;
    const { counters } = this.o;
    counters.listed(rt.policy.name, list);
    const d = list === 'allow' ? allowlisted(rt) : denylisted(rt);
    if (rt.shadows !== null) {
      this.o.shadows.add(rt, key, cost);
      this.o.schedule();
    }
    return rt.shadow ? counters.shadowed(rt, d, readClock(this.o.clock)) : d;
  }
}
