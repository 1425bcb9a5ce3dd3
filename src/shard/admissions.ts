/**
 * A shard's log of what it admitted in the batches the front has not settled yet (sync mode only; issue #20,
 * item 3). A merged state is computed on the front from what the front has recorded; batches this worker
 * decided before the state arrives, but whose answers the front had not read when it sent it, admitted tokens
 * the state does not hold. The state message says which batches the front had settled (`after`), and the
 * worker spends, on each row, what it admitted for that leg in the later ones, so installing it gives nothing back.
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
   * batches after `after` admitted on its leg. `params` holds 3 numbers per row: algorithm code, L, P (ms).
   */
  debit(rows: Float64Array, n: number, params: Float64Array, after: number): void {
    this.trim(after);
    if (this.entries.length === 0) return;
    const spent = new Map<string, number>();
    for (const e of this.entries) {
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

  private trim(upTo: number): void {
    let k = 0;
    while (k < this.entries.length && this.entries[k].seq <= upTo) k++;
    if (k > 0) this.entries.splice(0, k);
  }
}
