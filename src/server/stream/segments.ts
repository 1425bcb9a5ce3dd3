/**
 * What binary frames and plain JSON frames share on `/v1/stream`: a frame's checks read into a column segment
 * (src/server/stream/state.ts), the segment found or reused, the checks queued within the connection's bound,
 * and a run of them handed to the engine's batch path as one batch. Each side answers its own way
 * (`answerAt`, `decided`).
 */
import { OUTCOME_ALLOWED, OUTCOME_ERROR, type BatchOutcomes, type CheckBatch } from '../../engine/batch.js';
import { overloaded, shuttingDown } from '../../util/errors.js';
import type { Conn, Item, Segment } from './state.js';
import type { StreamConnections } from './conn.js';
import type { OutcomePool } from './outcomes.js';
import { CLOSE_POLICY_VIOLATION, type StreamBounds, type StreamEngine } from './options.js';

/** The segment side of one `/v1/stream` route's frames, for segments of type S. */
export abstract class SegmentFrames<S extends Segment> {
  /**
   * @param batch the engine's batch path (or a fallback through check() per check)
   * @param metrics where the checks are counted, per batch; null when the batch path's limiter counts them itself
   * @param outcomes the route's outcome arrays, reused
   */
  constructor(
    protected readonly o: StreamBounds,
    protected readonly out: StreamConnections,
    protected readonly batch: CheckBatch,
    protected readonly metrics: StreamEngine['metrics'] | null,
    protected readonly outcomes: OutcomePool,
  ) {}

  /** A new segment of `capacity` checks. */
  protected abstract newSeg(capacity: number): S;
  /** Whether a queue entry is a segment of this side's. */
  protected abstract isSeg(entry: Item | Segment): entry is S;
  /** The connection's spare segment of this side, kept for its next frame. */
  protected abstract spareOf(c: Conn): S | null;
  protected abstract setSpare(c: Conn, seg: S | null): void;
  /** Answers check i of `seg` with an error, with the id as this side writes it. */
  protected abstract answerAt(c: Conn, seg: S, i: number, e: Error): void;
  /** A batch's outcomes, answered (see decideRun). */
  protected abstract decided(c: Conn, seg: S, from: number, to: number, res: BatchOutcomes, started: number): void;

  /** Hands checks [from, to) of a segment to the engine as one batch. */
  decideRun(c: Conn, seg: S, from: number, to: number): void {
    const k = to - from;
    this.out.took(c, k);
    seg.inFlight += k;
    const res = this.outcomes.take(k);
    const started = this.metrics === null ? 0 : this.metrics.now();
    let p: Promise<void> | null;
    try {
      p = this.batch(seg, from, to, res);
    } catch (e) {
      for (let j = 0; j < k; j++) res.fail(j, e as Error);
      p = null;
    }
    if (p === null) this.decided(c, seg, from, to, res, started);
    else {
      p.then(() => this.decided(c, seg, from, to, res, started), (e: unknown) => {
        for (let j = 0; j < k; j++) res.fail(j, e as Error);
        this.decided(c, seg, from, to, res, started);
      });
    }
  }

  /** A segment with room for `count` more checks: the queue's last one, the connection's spare, or a new one. */
  protected segFor(c: Conn, count: number): S {
    const q = c.queue;
    const tail = q.length > c.head ? q[q.length - 1] : undefined;
    if (tail !== undefined && this.isSeg(tail) && tail.capacity - tail.n >= count) return tail;
    const spare = this.spareOf(c);
    if (spare !== null && spare.capacity >= count) {
      this.setSpare(c, null);
      spare.reset();
      return spare;
    }
    return this.newSeg(count <= 16 ? 16 : 2 ** (32 - Math.clz32(count - 1)));
  }

  /** Keeps a segment that holds nothing waiting or in flight for the connection's next frame. */
  protected spareIfIdle(c: Conn, seg: S): void {
    const spare = this.spareOf(c);
    if (!seg.inQueue && seg.inFlight === 0 && !c.closed && (spare === null || spare.capacity < seg.capacity)) {
      seg.reset();
      this.setSpare(c, seg);
    }
  }

  /** After a batch is answered: a segment fully handed out and answered becomes the connection's spare. */
  protected spareIfDone(c: Conn, seg: S): void {
    if (seg.inFlight === 0 && !seg.inQueue && seg.head === seg.n && !c.closed) this.setSpare(c, seg);
  }

  /**
   * Queues the `m` checks just read into `seg` at `at`, within the connection's bound, as queuing them one by
   * one would: past it, OVERLOADED answers for the excess, or, on a paused connection, a close with 1008.
   * While the server closes: CLOSED.
   */
  protected admit(c: Conn, seg: S, at: number, m: number): void {
    const out = this.out;
    const o = this.o;
    let keep = m;
    if (out.closing) {
      const shutdown = shuttingDown();
      for (let i = at; i < at + m; i++) this.answerAt(c, seg, i, shutdown);
      keep = 0;
    } else if (c.queued + m > o.maxQueued) {
      if (c.paused) {
        out.closedBackpressure++;
        out.end(c, CLOSE_POLICY_VIOLATION, `backpressure: more than ${o.maxQueued} checks queued, client not reading`);
        return;
      }
      keep = Math.max(0, o.maxQueued - c.queued);
      const over = overloaded(`more than ${o.maxQueued} checks queued on this connection`);
      for (let i = at + keep; i < at + m; i++) this.answerAt(c, seg, i, over);
    }
    seg.n = at + keep;
    if (keep === 0) return this.spareIfIdle(c, seg);
    c.queued += keep;
    if (!seg.inQueue) {
      seg.inQueue = true;
      c.queue.push(seg);
    }
  }

  // The batch being answered's counts, a run of one policy at a time (decided() is synchronous: one at a time).
  private run: string | null = null;
  private allowed = 0;
  private denied = 0;
  private never = 0;

  /**
   * Counts outcome j of `res` (check i of `seg`) in the metrics, per run of one policy (tallied when the policy
   * changes and by `countEnd`); an error outcome is counted as failed. No-op without metrics.
   */
  protected countOutcome(seg: S, i: number, res: BatchOutcomes, j: number, started: number, ended: number): void {
    const metrics = this.metrics;
    if (metrics === null) return;
    const policy = seg.policies[i];
    const code = res.code[j];
    if (code === OUTCOME_ERROR) return metrics.failed(policy, res.error[j]!, started, ended);
    if (policy !== this.run) {
      if (this.run !== null) metrics.tally(this.run, this.allowed, this.denied, this.never, started, ended);
      this.run = policy;
      this.allowed = this.denied = this.never = 0;
    }
    if (code === OUTCOME_ALLOWED) this.allowed++;
    else if (res.retryAfterMs[j] < 0) this.never++;
    else this.denied++;
    if (metrics.activity !== null) {
      // any rule's degraded decision counts as degraded, as the one-at-a-time path counts it (Decision.degraded)
      metrics.observe(policy, seg.key(i), code === OUTCOME_ALLOWED, res.degraded[j] !== 0, res.remaining[j], res.limit[j]);
    }
  }

  /** Tallies the batch's last run (see countOutcome). */
  protected countEnd(started: number, ended: number): void {
    if (this.run !== null) this.metrics!.tally(this.run, this.allowed, this.denied, this.never, started, ended);
    this.run = null;
  }
}
