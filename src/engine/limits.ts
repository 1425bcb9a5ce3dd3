import { isConcurrency, type CompiledLimit, type CompiledPolicy } from '../config/policy-spec.js';
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
 * The kernel's limit ids, one per distinct set of numbers (algorithm, limit, period, burst, carryOver). A
 * kernel slot records the id its state was made under, so after a reload that changes a policy's numbers,
 * its keys' old state is recognised as such (fresh, or carried over) instead of read under the new numbers.
 * An id therefore keeps its meaning while any state may refer to it: an id no policy uses is **retired**,
 * and only {@link release}d (free for other numbers) once every kernel holds no informative state under it
 * (Kernel.purgeLimit removed its idle keys). So reloads cannot exhaust the {@link capacity}: only the ids of
 * the set in force and of retired limits whose keys still carry state (a bucket refilling, a window not
 * over) are taken.
 */
export class LimitTable {
  private readonly byNumbers = new Map<string, number>();
  private readonly table: Array<KernelLimit | null> = [];
  /** Released ids, reused lowest first. */
  private readonly free: number[] = [];

  constructor(readonly capacity: number) {}

  /** Limits by id, for a kernel or worker that starts now. */
  get limits(): Array<KernelLimit | null> {
    return this.table.slice();
  }

  /** Ids taken (in use or retired, not released). */
  get taken(): number {
    return this.table.length - this.free.length;
  }

  /**
   * The ids `policies` would use, without taking them.
   * @throws SluiceError CONFIG when the new numbers do not fit in the room left.
   */
  plan(policies: ReadonlyMap<string, CompiledPolicy>): LimitPlan {
    const ids = new Map<string, number[]>();
    const added: LimitPlan['added'] = [];
    const fresh = new Map<string, number>();
    let reused = 0;
    let next = this.table.length;
    for (const [name, p] of policies) {
      // a concurrency policy's leases live in src/engine/leases.ts, not in the kernel
      if (isConcurrency(p)) continue;
      ids.set(name, p.limits.map((l) => {
        const limit = kernelLimit(l, p.carryOver);
        const key = numbersKey(limit);
        let id = this.byNumbers.get(key) ?? fresh.get(key);
        if (id === undefined) {
          id = reused < this.free.length ? this.free[reused++] : next++;
          if (id >= this.capacity) {
            throw policiesError(`no room for more distinct limits (${this.capacity} ids, taken by the set in force and by earlier limits whose keys still hold state): retry once those keys are idle, or restart sluice`);
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
      // a plan takes released ids (lowest first), then the next ones in order
      const at = id < this.table.length ? this.free.indexOf(id) : -1;
      if (id < this.table.length ? at < 0 || this.table[id] !== null : id !== this.table.length) {
        throw new Error(`limit table: plan is stale (id ${id}, next ${this.table.length}, free ${this.free.length})`);
      }
      if (at >= 0) {
        this.free.splice(at, 1);
        this.table[id] = limit;
      } else {
        this.table.push(limit);
      }
      this.byNumbers.set(numbersKey(limit), id);
    }
  }

  /** The ids taken that no policy of `inUse` (a plan's ids) uses: candidates to {@link release}. */
  retired(inUse: ReadonlyMap<string, readonly number[]>): number[] {
    const used = new Set<number>();
    for (const ids of inUse.values()) for (const id of ids) used.add(id);
    const out: number[] = [];
    this.table.forEach((l, id) => {
      if (l !== null && !used.has(id)) out.push(id);
    });
    return out;
  }

  /** Frees retired `id` for other numbers: call only once no kernel holds state under it. */
  release(id: number): void {
    const l = this.table[id];
    if (l === null || l === undefined) return;
    this.byNumbers.delete(numbersKey(l));
    this.table[id] = null;
    this.free.push(id);
    this.free.sort((a, b) => a - b);
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
