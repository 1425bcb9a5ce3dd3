import type { CompiledLimit, CompiledPolicy } from '../config/policies.js';
import type { KernelLimit } from '../shard/protocol.js';
import { SluiceError, policiesError } from '../util/errors.js';

/** What a policy set needs from the limit table: each policy's limit ids, and the ids it adds. */
export interface LimitPlan {
  /** Kernel limit id of each of a policy's limits, in order. */
  ids: Map<string, number[]>;
  /** Limits with numbers no earlier set used: new ids to set on every kernel before the set goes live. */
  added: Array<{ id: number; limit: KernelLimit }>;
}

/**
 * The kernel's limit ids, one per distinct set of numbers (algorithm, limit, period, burst, carryOver). An id
 * never changes meaning: a kernel slot records the id its state was made under, so after a reload that
 * changes a policy's numbers, its keys' old state is recognised as such (fresh, or carried over) instead of
 * read under the new numbers. Ids are never reused; a long-running instance that reloads thousands of
 * distinct numbers runs out of room ({@link LimitTable.capacity}) and must restart.
 */
export class LimitTable {
  private readonly byNumbers = new Map<string, number>();
  private readonly table: Array<KernelLimit | null> = [];

  constructor(readonly capacity: number) {}

  /** Limits by id, for a kernel or worker that starts now. */
  get limits(): Array<KernelLimit | null> {
    return this.table.slice();
  }

  /**
   * The ids `policies` would use, without taking them.
   * @throws SluiceError CONFIG when the new numbers do not fit in the room left.
   */
  plan(policies: ReadonlyMap<string, CompiledPolicy>): LimitPlan {
    const ids = new Map<string, number[]>();
    const added: LimitPlan['added'] = [];
    const fresh = new Map<string, number>();
    for (const [name, p] of policies) {
      ids.set(name, p.limits.map((l) => {
        const limit = kernelLimit(l, p.carryOver);
        const key = numbersKey(limit);
        let id = this.byNumbers.get(key) ?? fresh.get(key);
        if (id === undefined) {
          id = this.table.length + added.length;
          if (id >= this.capacity) {
            throw policiesError(`no room for more distinct limits (${this.capacity} ids, never reused while running): restart sluice to apply this set`);
          }
          fresh.set(key, id);
          added.push({ id, limit });
        }
        return id;
      }));
    }
    return { ids, added };
  }

  /** Takes the ids a plan added (call once its limits are set on every kernel). */
  commit(plan: LimitPlan): void {
    for (const { id, limit } of plan.added) {
      if (id !== this.table.length) throw new Error(`limit table: plan is stale (id ${id}, next ${this.table.length})`);
      this.table.push(limit);
      this.byNumbers.set(numbersKey(limit), id);
    }
  }
}

function kernelLimit(l: CompiledLimit, carryOver: boolean): KernelLimit {
  return {
    algorithmCode: l.algorithmCode, limit: l.limit, periodMs: l.periodMs, burst: l.burst,
    carryOver: carryOver && l.algorithm === 'token_bucket', calendar: l.calendar ?? null,
  };
}

function numbersKey(l: KernelLimit): string {
  const cal = l.calendar ? `:${l.calendar.unit}:${l.calendar.timeZone}` : '';
  return `${l.algorithmCode}:${l.limit}:${l.periodMs}:${l.burst}:${l.carryOver ? 1 : 0}${cal}`;
}
