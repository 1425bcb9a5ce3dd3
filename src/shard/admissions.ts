/**
 * A shard's log of what it admitted in the batches the front has not settled yet (sync mode only; issue #20,
 * item 3). A merged state is computed on the front from what the front has recorded; batches this worker
 * decided before the state arrives, but whose answers the front had not read when it sent it, admitted tokens
 * the state does not hold. The state message says which batches the front had settled (`after`, and those
 * above it in `settled`), and the worker spends, on each row, what it admitted for that leg in the others, so
 * installing it gives nothing back.
 *
 * Batches and synchronous channel calls (src/shard/channel.ts) share one numbering per shard, and a call can
 * be answered, and settled, while batches numbered before it are still on their way: the front settles
 * numbers in any order ({@link ShardSeqs}), so the shard's log is not kept in number order either.
 */
import { debitState } from '../util/debit.js';
import { CODE_ALLOW, GROUP_SHIFT, GROUP_SPAN, LEG_IN, LEG_OUT, MAX_GROUP } from './protocol.js';
import { STATE_ROW } from './kernel.js';

interface Entry {
  seq: number;
  /** 4 numbers per admitted leg with a cost: hashLo, hashHi, limitId, cost. */
  legs: number[];
}

export class AdmissionLog {
  private entries: Entry[] = [];

  /**
   * Logs batch `seq`'s admitted legs (a single leg admitted, or a group whose legs all admitted: what the
   * kernel committed), and forgets batches up to `ack`, which the front has settled.
   * @param legs the batch's input rows (LEG_IN f64s each); @param out its output rows (LEG_OUT each)
   */
  record(seq: number, ack: number, n: number, legs: Float64Array, out: Float64Array): void {
    this.trim(ack);
    const kept: number[] = [];
    for (let i = 0; i < n;) {
      let g = Math.floor(legs[i * LEG_IN + 2] / GROUP_SHIFT) % GROUP_SPAN;
      if (g < 1) g = 1;
      if (g > MAX_GROUP) g = MAX_GROUP;
      if (g > n - i) g = n - i;
      let all = true;
      for (let j = i; j < i + g; j++) if (out[j * LEG_OUT] !== CODE_ALLOW) all = false;
      if (all) {
        for (let j = i; j < i + g; j++) {
          const r = j * LEG_IN;
          if (legs[r + 3] > 0) kept.push(legs[r], legs[r + 1], legs[r + 2] % GROUP_SHIFT, legs[r + 3]);
        }
      }
      i += g;
    }
    if (kept.length > 0) this.entries.push({ seq, legs: kept });
  }

  /**
   * Spends, on each of `n` state rows (STATE_ROW f64s: hashLo, hashHi, limitId, w0, w1, lastSeen), what the
   * batches the front had not settled admitted on its leg: those after `after` but the ones in `settled`.
   * `params` holds 3 numbers per row: algorithm code, L, P (ms).
   */
  debit(rows: Float64Array, n: number, params: Float64Array, after: number, settled: readonly number[] = []): void {
    this.trim(after);
    if (this.entries.length === 0) return;
    const spent = new Map<string, number>();
    for (const e of this.entries) {
      if (settled.includes(e.seq)) continue;
      for (let k = 0; k < e.legs.length; k += 4) {
        const id = `${e.legs[k]}:${e.legs[k + 1]}:${e.legs[k + 2]}`;
        spent.set(id, (spent.get(id) ?? 0) + e.legs[k + 3]);
      }
    }
    const state: number[] = [0, 0, 0];
    for (let i = 0; i < n; i++) {
      const r = i * STATE_ROW;
      const d = spent.get(`${rows[r]}:${rows[r + 1]}:${rows[r + 2]}`);
      if (d === undefined) continue;
      debitState(params[3 * i], params[3 * i + 1], params[3 * i + 2], rows[r + 3], rows[r + 4], rows[r + 5], d, state, 0);
      rows[r + 3] = state[0];
      rows[r + 4] = state[1];
      rows[r + 5] = state[2];
    }
  }

  /** Forgets the batches numbered up to `upTo` (the log is not in number order: see the file's comment). */
  private trim(upTo: number): void {
    let kept = 0;
    for (const e of this.entries) if (e.seq > upTo) this.entries[kept++] = e;
    this.entries.length = kept;
  }
}

/**
 * The front's side of one shard's numbering (sync mode): numbers its batches and synchronous calls, and knows
 * which it has settled (read the answers of and recorded the admissions of), in any order. A synchronous call
 * is settled the moment it returns, possibly before batches numbered earlier (still queued for the shard):
 * those numbers are held in {@link ahead} until the ones below them settle.
 */
export class ShardSeqs {
  private sent = 0;
  /** Every number up to this one is settled. */
  private upTo = 0;
  /** Numbers above {@link upTo} already settled (few: the batches in flight bound them). */
  private readonly above: number[] = [];
  /** {@link upTo} as each install sent to the shard and not applied yet was told it (in the order sent). */
  private readonly installs: number[] = [];

  /** The number of the next batch or call. */
  next(): number {
    return ++this.sent;
  }

  /** Batch or call `seq` is settled here. */
  settle(seq: number): void {
    if (seq <= this.upTo || this.above.includes(seq)) return;
    if (seq !== this.upTo + 1) {
      this.above.push(seq);
      return;
    }
    this.upTo = seq;
    for (let k = this.above.indexOf(this.upTo + 1); k >= 0; k = this.above.indexOf(this.upTo + 1)) {
      this.above.splice(k, 1);
      this.upTo++;
    }
  }

  /** Every number up to this one is settled: a state message's `after`. */
  get after(): number {
    return this.upTo;
  }

  /** The numbers above {@link after} settled too: a state message's `settled` (a copy). */
  ahead(): number[] {
    return this.above.slice();
  }

  /**
   * What a batch or call tells the shard it may forget (ShardTask.ack): numbers settled here that every
   * install not applied yet counts as settled too. A call overtakes the shard's queue (channel.ts), so it can
   * reach the shard before an install sent earlier, whose `after` may be lower: forgetting past that `after`
   * would leave that install's rows without a debit for what it does not hold.
   */
  get ack(): number {
    return this.installs.length === 0 ? this.upTo : Math.min(this.upTo, this.installs[0]);
  }

  /** An install told `after` is on its way to the shard; returns the function to call once it is applied (or failed). */
  installing(after: number): () => void {
    this.installs.push(after);
    return () => {
      const k = this.installs.indexOf(after);
      if (k >= 0) this.installs.splice(k, 1);
    };
  }
}
