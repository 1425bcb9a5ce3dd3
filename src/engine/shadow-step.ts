/**
 * The shadow step of the front: a check of a live policy with candidates (`shadowOf`) queues one internal check
 * per candidate, in the same turn's batch. Each is a check of its own, decided apart from the live one (no
 * all-or-nothing with its legs), and its decision is only counted (shadow.ts's PolicyCounters): it never
 * reaches the caller.
 */
import type { Hasher } from '../keys/hasher.js';
import { MAX_GROUP } from '../shard/protocol.js';
import { readClock } from './clock.js';
import { listed } from './lists.js';
import type { TurnQueue } from './queue.js';
import type { PolicyRuntime } from './runtime.js';
import { allowlisted, denylisted, type PolicyCounters } from './shadow.js';

/** The resolve and reject of a candidate's internal check: its outcome is only counted. */
const IGNORE = (): void => {};

export interface ShadowStepOptions {
  /** The front's turn queue the candidates' checks join. */
  queue: TurnQueue;
  /** The turn's hasher: when it is full the batch goes out before a candidate is queued. */
  hasher: Hasher;
  /** The kernel's batch size, in legs. */
  maxBatch: number;
  counters: PolicyCounters;
  /** The limiter's clock (Unix ms): read only for a candidate answered by its own lists. */
  clock: () => number;
  /** Decides the queued batch now (the front's flush). */
  flush: () => void;
}

export class ShadowStep {
  constructor(private readonly o: ShadowStepOptions) {}

  /**
   * Queues one internal check per candidate shadowing `live` (`shadowOf`), on the key derived from the live
   * check's and the same cost. A candidate whose own allow or deny list matches is counted at once (a
   * would-deny for a deny list) and queues nothing.
   */
  add(live: PolicyRuntime, key: string, cost: number): void {
    const { queue: q, hasher, maxBatch, counters } = this.o;
    for (const link of live.shadows!) {
      let k = key;
      if (link.pick !== null) {
        const parts = key.split(':');
        // a key given directly that is not a tuple of the live policy's descriptors: nothing to derive from
        if (parts.length !== link.parts) continue;
        k = parts[link.pick[0]];
        for (let j = 1; j < link.pick.length; j++) k += ':' + parts[link.pick[j]];
        if (k.length === 0) continue;
      }
      const rt = link.rt;
      if (rt.lists !== null) {
        const list = listed(rt.lists, k);
        if (list !== null) {
          counters.listed(rt.policy.name, list);
          counters.shadowed(rt, list === 'allow' ? allowlisted(rt) : denylisted(rt), readClock(this.o.clock));
          continue;
        }
      }
      if (hasher.full || q.legs + MAX_GROUP > maxBatch) this.o.flush();
      q.add(rt, k, cost);
      q.resolves.push(IGNORE);
      q.rejects.push(IGNORE);
    }
  }
}
