/**
 * The local decider: checks of `local` and `sync` policies (and store-backed checks that fall back under
 * `onStoreError: local`) decided by the kernels: this thread's with no shard pool, else one batch per shard,
 * each sent to the shard that owns its keys (a guarded policy's keys live on its guard's shard).
 */
import type { Kernel } from '../../shard/kernel.js';
import { STATE_ROW } from '../../shard/kernel.js';
import type { ShardPool } from '../../shard/pool.js';
import { shardOf } from '../../shard/router.js';
import type { ShardTask } from '../../shard/protocol.js';
import { LEG_IN } from '../../shard/protocol.js';
import { compose } from '../decision.js';
import { markLocal, type DegradedCounts } from '../degraded.js';
import type { PolicyCounters } from '../shadow.js';
import type { AdmissionLog, Decider, Flight, LocalFallback, StateInstaller } from '../decider.js';
import { emptyBatch, push, type Batch } from '../queue.js';
import { writeLegs } from '../legs.js';
import { ShardSeqs } from '../../shard/admissions.js';

export interface LocalDeciderOptions {
  /** The calling thread's kernel: with no pool, it decides. */
  kernel: Kernel;
  pool: ShardPool | null;
  counters: PolicyCounters;
  flight: Flight;
  /**
   * Where a store-backed check's `local` decision is counted (`sluice_degraded_decisions_total`), once its
   * kernel has made it: a fallback check the kernel then fails (a shard down) is an error, not a decision.
   */
  degraded: DegradedCounts;
}

export class LocalDecider implements Decider, LocalFallback, StateInstaller {
  readonly mode = 'local';
  /** The write-behind of `sync` policies, once a policy set has one (src/engine/deciders/write-behind.ts). */
  writeBehind: AdmissionLog | null = null;
  /** Each shard's numbering of its batches and calls, and which are settled here (sync mode), for {@link install}. */
  private readonly seqs: ShardSeqs[] = [];

  constructor(private readonly o: LocalDeciderOptions) {}

  decide(b: Batch, now: number): void {
    const pool = this.o.pool;
    if (pool === null) this.decideHere(b, now);
    // a store-backed check's local decision (a fallback) always goes on the shard's queue, where its seed is: see seed()
    else if (this.now && b.fallback !== true) this.dispatchNow(pool, b, now);
    else this.dispatch(pool, b, now);
  }

  /**
   * Set by the front while checkNow() flushes: with shards, the batch goes through their synchronous channels
   * (but a fallback batch: see {@link seed}).
   */
  now = false;

  /**
   * {@link dispatch}, but each shard's part of the batch is decided through the shard's synchronous channel
   * (ShardPool.callNow: shared memory, this thread sleeps until the shard answers; src/shard/channel.ts) and
   * settled before this returns, so the HTTP front answers inside uWS's callback with shards too. The legs
   * are written straight into the channel: nothing is allocated. With sync policies, a shard's call is
   * numbered like its batches and settled at once, even with batches numbered before it still in flight
   * (ShardSeqs settles numbers in any order), so sync policies' checks are decided this way too.
   */
  private dispatchNow(pool: ShardPool, b: Batch, now: number): void {
    const shards = pool.size;
    const room = pool.maxCallLegs;
    for (let s = 0; s < shards; s++) {
      const legs = pool.legsFor(s);
      let used = 0;
      let from = 0;
      for (let i = 0; i < b.n; i++) {
        if (routeOf(b, i, shards) !== s) continue;
        if (used + b.rts[i].legCount > room) {
          this.callNow(pool, s, used, from, i, b, now);
          used = 0;
          from = i;
        }
        writeLegs(legs, used, b, i);
        used += b.rts[i].legCount;
      }
      if (used > 0) this.callNow(pool, s, used, from, b.n, b, now);
    }
  }

  /** One call of {@link dispatchNow}: shard `s`'s checks among [from, to) of `b`, `used` legs written. */
  private callNow(pool: ShardPool, s: number, used: number, from: number, to: number, b: Batch, now: number): void {
    const shards = pool.size;
    const seqs = this.writeBehind === null ? null : this.seqsOf(s);
    const seq = seqs === null ? 0 : seqs.next();
    let out: Float64Array;
    try {
      out = pool.callNow(s, used, now, seq, seqs === null ? 0 : seqs.ack);
    } catch (e) {
      for (let i = from; i < to; i++) if (routeOf(b, i, shards) === s) b.rejects[i](e as Error);
      seqs?.settle(seq);
      return;
    }
    let base = 0;
    for (let i = from; i < to; i++) {
      if (routeOf(b, i, shards) !== s) continue;
      this.settleLocal(out, base, b, i, s, now);
      base += b.rts[i].legCount;
    }
    seqs?.settle(seq);
  }

  /** Seeds waiting for the next decide(), by shard: STATE_ROW numbers per state. */
  private readonly seeds = new Map<number, number[]>();

  /**
   * The states `rows` holds (STATE_ROW numbers each: the key states `onStoreError: local` starts check i of `b`
   * from), for the kernel that owns the check: this thread's at once; or the owning shard's, kept until the next
   * decide() (the fallback batch holding the check), whose batch for that shard carries them (ShardTask.states):
   * the worker sets them just before it decides that batch. Nothing waits for the shard.
   *
   * Why that keeps a key's local decisions in order after its seed: a store-backed key's kernel state is decided
   * only by fallback batches (no other policy shares its keys: a guard keeps its guarded policies' consistency,
   * src/config/links.ts), which only this thread sends (a front thread has no store), and always on the shard
   * worker's queue (decide() does not send them through the synchronous channel even while checkNow flushes;
   * they never come from a checkNow anyway, a store-backed check's fallback being decided after its store call
   * failed). One worker takes a shard's queue in order, a batch at a time. So the check's own decision comes
   * right after the seed, in the same task, and every later local decision of the key after that. (A seed sent
   * through the synchronous channel instead, as it was, slept until the worker took it, which it does only
   * between tasks: a shard stalled in a batch held this thread, and every transport on it, for up to 1 s, then
   * the seed was given up and the key decided from a full limit: test/fault/shard-seed-stall.test.ts.)
   *
   * When the shard cannot take the batch (down, its queue full, its worker lost or its kernel failing), its
   * checks fail as every check then (SHARD_FAILED or OVERLOADED), and the pool counts the kernel as another
   * one (ShardPool.kernelGeneration), so the next decision of those keys is seeded again. Else the states are
   * not sent again in this stall (the caller marked them seeded): sent after local decisions of a key, they
   * would hand back what those spent. Once per key per stall: not on the hot path.
   */
  seed(b: Batch, i: number, rows: number[], now: number): void {
    const pool = this.o.pool;
    if (pool === null) {
      this.o.kernel.legIn.set(rows);
      this.o.kernel.setState(rows.length / STATE_ROW, now);
      return;
    }
    const shard = routeOf(b, i, pool.size);
    const waiting = this.seeds.get(shard);
    if (waiting === undefined) this.seeds.set(shard, rows.slice());
    else for (const x of rows) waiting.push(x);
  }

  kernelOf(b: Batch, i: number): number {
    const pool = this.o.pool;
    if (pool === null) return 0;
    const s = routeOf(b, i, pool.size);
    return s + pool.size * pool.kernelGeneration(s);
  }

  /**
   * Installs merged states into the kernels that own them: this thread's, or each shard's in order, after the
   * batches that shard has settled here (src/shard/admissions.ts). `rows`: 6 numbers per state per shard
   * (hashLo, hashHi, limitId, w0, w1, lastSeen), `params` 3 per state (algorithm, L, P).
   *
   * A shard's states go as a task on its worker's queue, which synchronous channel calls
   * (dispatchNow) overtake: a call sent after the install may be decided before it. That is safe, unlike
   * a seed's: the install does not assume any order. Every batch or call the front had not settled when it
   * computed the rows (those after `after`, but the ones in `settled`; a later call has a higher number, so it is
   * not among them) is logged on the shard with what it admitted, and kept there while the install is on its
   * way (ShardSeqs.ack holds the shard's log back to the install's `after`): if it is decided before the install
   * is applied, the worker spends what it admitted on the installed rows (AdmissionLog.debit); if after, it spends
   * from the installed state itself. Either way the kernel ends at the merged state less what was admitted since,
   * nothing given back and nothing spent twice; a call that overtakes the install was only decided on the view
   * from before the merge, as any check decided in the moments between Redis's read and the install is.
   */
  async install(byShard: Map<number, number[]>, paramsOf: Map<number, number[]>, now: number): Promise<void> {
    const pool = this.o.pool;
    const sent: Promise<void>[] = [];
    for (const [shard, rows] of byShard) {
      if (shard < 0 || pool === null) {
        const k = this.o.kernel;
        const perCall = Math.floor(k.legIn.length / STATE_ROW) * STATE_ROW;
        for (let off = 0; off < rows.length; off += perCall) {
          const chunk = rows.slice(off, off + perCall);
          k.legIn.set(chunk);
          k.setState(chunk.length / STATE_ROW, now);
        }
      } else {
        const seqs = this.seqsOf(shard);
        const applied = seqs.installing(seqs.after);
        sent.push(pool.setState(shard, {
          kind: 'setState', now, n: rows.length / STATE_ROW, rows: Float64Array.from(rows),
          params: Float64Array.from(paramsOf.get(shard)!), after: seqs.after, settled: seqs.ahead(),
        }).finally(applied));
      }
    }
    await Promise.allSettled(sent);
  }

  /**
   * Settles check i of `b` from its legs' output rows at `base`; a sync policy's admitted cost is recorded
   * for the next merge, and its decision says how stale the view behind it is.
   */
  private settleLocal(out: Float64Array, base: number, b: Batch, i: number, shard: number, now: number): void {
    const rt = b.rts[i];
    const sync = rt.synced ? this.writeBehind : null;
    const d = compose(out, base, rt, sync === null ? -1 : sync.staleness(now));
    if (d instanceof Error) return b.rejects[i](d);
    if (b.fallback === true) {
      markLocal(d);
      this.o.degraded.count(rt.policy.name, 'local');
    }
    if (sync !== null && d.allowed && b.costs[i] > 0) sync.record(b, i, shard);
    b.resolves[i](rt.shadow ? this.o.counters.shadowed(rt, d, now) : d);
  }

  private decideHere(b: Batch, now: number): void {
    const k = this.o.kernel;
    let base = 0;
    for (let i = 0; i < b.n; i++) {
      writeLegs(k.legIn, base, b, i);
      base += b.rts[i].legCount;
    }
    k.decide(base, now);
    base = 0;
    for (let i = 0; i < b.n; i++) {
      this.settleLocal(k.legOut, base, b, i, -1, now);
      base += b.rts[i].legCount;
    }
  }

  private dispatch(pool: ShardPool, b: Batch, now: number): void {
    const shards = pool.size;
    const route = new Int32Array(b.n);
    const legCount = new Int32Array(shards);
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const hi = rt.guardHashes === null ? b.hashes[2 * i + 1] : rt.guardHashes[1];
      const s = shardOf(hi, shards);
      route[i] = s;
      legCount[s] += rt.legCount;
    }
    // Each shard's checks are copied out: the turn's queues are reused before the replies arrive.
    const batches: Array<{ legs: Float64Array; used: number; bases: number[]; checks: Batch } | null> = [];
    for (let s = 0; s < shards; s++) {
      batches.push(legCount[s] === 0 ? null
        : { legs: new Float64Array(legCount[s] * LEG_IN), used: 0, bases: [], checks: emptyBatch(b.fallback) });
    }
    for (let i = 0; i < b.n; i++) {
      const sb = batches[route[i]]!;
      writeLegs(sb.legs, sb.used, b, i);
      sb.bases.push(sb.used);
      push(sb.checks, b, i);
      sb.used += b.rts[i].legCount;
    }
    const flight = this.o.flight;
    for (let s = 0; s < shards; s++) {
      const sb = batches[s];
      if (sb === null) continue;
      const { checks, bases } = sb;
      flight.add(checks.n);
      // with sync policies, batches are numbered per shard so a merged state spends what the shard admitted
      // in the batches not settled here yet (src/shard/admissions.ts)
      const seqs = this.writeBehind === null ? null : this.seqsOf(s);
      const seq = seqs === null ? 0 : seqs.next();
      const task: ShardTask = seqs === null ? { kind: 'batch', now, n: sb.used, legs: sb.legs }
        : { kind: 'batch', now, n: sb.used, legs: sb.legs, seq, ack: seqs.ack };
      // the states its checks start from (seed()): set by the worker before it decides them
      const states = this.seeds.get(s);
      if (states !== undefined) task.states = Float64Array.from(states);
      pool.run(s, task).then(
        (out) => {
          for (let i = 0; i < checks.n; i++) this.settleLocal(out, bases[i], checks, i, s, now);
          seqs?.settle(seq);
        },
        (e: Error) => {
          for (const r of checks.rejects) r(e);
          seqs?.settle(seq);
        },
      ).finally(() => flight.landed(checks.n));
    }
    // (every seed is of a check of this batch: seed() is called for checks decide() is given right after)
    this.seeds.clear();
  }

  private seqsOf(s: number): ShardSeqs {
    while (this.seqs.length <= s) this.seqs.push(new ShardSeqs());
    return this.seqs[s];
  }
}

/** The shard that owns check i of `b`: its key's, or for a guarded policy its guard's (the shared leg). */
function routeOf(b: Batch, i: number, shards: number): number {
  const rt = b.rts[i];
  return shardOf(rt.guardHashes === null ? b.hashes[2 * i + 1] : rt.guardHashes[1], shards);
}
