/**
 * The strict decider: atomic script calls (lua/check.lua) decide every strict check of the turn, in
 * calls of at most the store's checksPerCall checks written as they fill (front.ts), split further while fewer
 * than Store.pipelineCalls are in flight ({@link callSize}), but for the checks the over-limit cache answers
 * (src/engine/strict/over-limit.ts). A call of fewer than Store.holdUnder checks made while another is in flight is
 * held ({@link StrictDecider.held}) and sent when a call answers or it has grown to that. One connection answers
 * in order, and a held call is sent before any call built after it, so each key's checks reach Redis in the
 * order they were made. When the call fails, or some of its legs come back unanswered (a Cluster slot
 * lost, an unreadable state), those checks take the failure rule (src/engine/failure.ts); under `local` the
 * kernel that decides them is first seeded with the key's state last learned from Redis.
 */
import { UNIQUE_KEY, type Store } from '../../store/contract.js';
import { LEG_WIDE } from '../../store/reply.js';
import { compose } from '../decision.js';
import { readClock } from '../clock.js';
import { scriptBurst, scriptPeriod } from '../calendar-args.js';
import { GUARD_KEY, writeLegHash, type PolicyRuntime } from '../runtime.js';
import type { DegradedCounts } from '../degraded.js';
import type { PolicyCounters } from '../shadow.js';
import type { StrictCache } from '../strict/cache.js';
import { oneVersion, type Known } from '../strict/table.js';
import { settle, type Decider, type Flight, type LocalFallback } from '../decider.js';
import { storeFailure } from '../failure.js';
import { emptyBatch, push, type Batch } from '../queue.js';
import { SCRIPT_DELAY_SHIFT } from '../delay.js';
import { StoreTimeoutError } from '../../store/deadline.js';

export interface StrictDeciderOptions {
  store: Store;
  cache: StrictCache;
  clock: () => number;
  counters: PolicyCounters;
  degraded: DegradedCounts;
  flight: Flight;
  /** Where checks go under `onStoreError: local`. */
  local: LocalFallback;
}

export class StrictDecider implements Decider {
  readonly mode = 'strict';
  /** Script calls sent and not answered yet. */
  private calls = 0;
  /** Script calls built so far: the id of the one being built (Known.callId, for the UNIQUE_KEY marking). */
  private built = 0;
  /**
   * Script calls sent so far: a call's {@link Call.sentNo} is stamped as it is sent, and a key decided
   * locally notes it (Known.seedCall), so that an answer tells a call in flight at that local decision from one
   * sent after it. (Not the build id: a held call is built before, and may take checks or go out after, a seed.)
   */
  private sentCalls = 0;
  /** What decide()'s first loop read (kept, so that the reads are not dropped as unused). */
  private warm = 0;
  /**
   * A call of fewer than Store.holdUnder checks built while another was in flight, in a turn of at least
   * Store.holdTurn strict checks, not sent yet: the next such turns add to it, and it goes out when a call
   * answers (its wait is bounded by that call's deadline), once it has holdUnder checks, or with a smaller turn.
   *
   * Nagle's rule for script calls: each call costs Redis and this thread a fixed price (a socket write and
   * read on each side, waking the other), which a few checks a call pay over and over where most checks are
   * answered without Redis (the over-limit cache): 90 % of checks over the limit, 64 in flight, ~6 checks a
   * call had a third of this thread's busy time in the socket write (bench/README.md). Only a busy turn holds:
   * with few checks at a time a held check is a large share of what is in flight, and its wait costs more than
   * the call (held on every turn, 4 in flight over the limit made 0.71-0.73x the decisions/s).
   *
   * When the call it waited behind timed out, the held checks take the failure rule once no call is in flight
   * (each was sent before them, so times out within their deadline too, or answers and sends them): the
   * connection has been silent for the whole deadline, and a key's checks reach the rule in the order made.
   * Its checks count in flight while held (the front's pending bound, close()); a reload and an admin reset
   * send it (one policy set a call; a check made before a reset reaches Redis before its delete). Not on a
   * Redis Cluster (holdUnder 0 there: its calls are split over masters, each with its own liveness, so the call
   * ahead says nothing of the held checks' masters).
   */
  private held: Call | null = null;

  /** The kernel rows of the check being seeded (see seed()): one, reused. */
  private readonly seedRows: SeedRows;

  constructor(private readonly o: StrictDeciderOptions) {
    this.seedRows = new SeedRows(o.cache);
  }

  setRuntimes(): void {
    this.o.cache.clearDenials();
    // A call holds checks of one policy set: one made after the reload may name a key a held check of the old
    // set names with another number of legs (a guard added or removed keeps the policy's version, so its keys),
    // which the UNIQUE_KEY marking cannot tell (lua/check.lua then read the key as before the call, and a spend
    // was lost). The held call goes out now, ahead of any call built after it.
    this.sendHeld();
  }

  sendHeld(): void {
    const h = this.held;
    if (h !== null) {
      this.held = null;
      this.send(h, h.heldAt, h.heldLead);
    }
  }

  decide(b: Batch, now: number): void {
    const { store, cache } = this.o;
    cache.at(now);
    // a turn split over calls in flight, else one call (of at most checksPerCall, with what was held)
    const split = callSize(b.n, store.pipelineCalls - this.calls);
    const size = split < b.n ? split : store.checksPerCall;
    let call = this.held ?? new Call(++this.built);
    this.held = null;
    // The batch's entries looked up first, in a loop of their own, only to bring them into the cache: each
    // lookup is a few cache misses (the Map's table, the entry), which lookups with nothing between them
    // overlap, where one per iteration of the loop below waited for each in turn (client CPU per strict
    // decision 0.90x at 256 in flight: bench/tools/strict-cpu-ab.mjs). The loop below looks each up again (and
    // makes, or evicts, as before: an entry fetched here is not pinned, so nothing is held across the two).
    if (b.n > 1) {
      let warm = 0;
      for (let i = 0; i < b.n; i++) warm += cache.peek(store.prefix, b.rts[i], b.keys[i]);
      this.warm = warm;
    }
    for (let i = 0; i < b.n; i++) {
      const rt = b.rts[i];
      const e = cache.entry(store.prefix, rt, b.keys[i]);
      const shared = this.sharedKeys(rt, e);
      const d = cache.overLimit(e, b.costs[i], now, shared === null ? 0 : cache.epochOf(shared));
      if (d !== null) {
        settle(this.o.counters, d, b, i, now);
        continue;
      }
      if (shared !== null) {
        for (const k of shared) cache.touch(k);
        e.sentEpoch = cache.epochOf(shared);
      }
      e.inflight++;
      call.known.push(e);
      call.wire.push(e.wire);
      push(call.sent, b, i);
      const { keys, args } = call;
      // A check of one leg whose key no other check of the call names goes marked UNIQUE_KEY (lua/check.lua
      // decides it without slot bookkeeping). One entry per key, and a key shared with other checks (a guard's)
      // is never marked, so a second check of the same entry in the call is the only way its key comes again:
      // it unmarks the first. (Marked here rather than by the store comparing keys: a Map lookup per leg
      // there was ~6 % of the client's busy time.)
      let mark = 0;
      if (rt.legCount === 1 && shared === null) {
        if (e.callId !== call.id) {
          e.callId = call.id;
          e.markAt = args.length;
          mark = UNIQUE_KEY;
        } else if (e.markAt >= 0) {
          args[e.markAt] -= UNIQUE_KEY;
          e.markAt = -1;
        }
      }
      keys.push(e.key0);
      for (let j = 0; j < rt.legCount; j++) {
        if (j > 0) keys.push(e.keys[j]);
        const l = rt.legLimits[j];
        // onLimit: delay: the leg's maxDelayMs rides above the group length (lua/check.lua)
        const delay = rt.legDelayMs === null ? 0 : rt.legDelayMs[j] * SCRIPT_DELAY_SHIFT;
        args.push(l.algorithmCode + mark, l.limit, scriptPeriod(l, now), scriptBurst(l, now), b.costs[i], (j === 0 ? rt.legCount : 0) + delay);
      }
      if (call.sent.n >= size) {
        this.send(call, now, cache.lead);
        call = new Call(++this.built);
      }
    }
    if (call.sent.n === 0) return;
    if (call.sent.n < store.holdUnder && this.calls > 0 && b.n >= store.holdTurn) {
      this.held = call;
      call.heldAt = now;
      call.heldLead = cache.lead;
      // its deadline counts from here (Store.decideWide heldSince): sent later (a smaller turn, or once full) to
      // a connection already silent, its first checks had waited that silence twice, the hold's and the call's
      call.heldSince ??= performance.now();
      // counted in flight while held, as sent checks are: the front's pending bound and close() see them
      call.count(this.o.flight);
    } else this.send(call, now, cache.lead);
  }

  /**
   * Sends one script call and settles its checks when it answers; `now` is the turn's that built it last, when
   * the wall clock led the monotonic one by `lead` (StrictCache.lead then): the answer's bounds are read from it.
   */
  private send(call: Call, now: number, lead: number): void {
    const { store, cache } = this.o;
    const { sent, known } = call;
    const flight = this.o.flight;
    call.count(flight);
    call.sentNo = ++this.sentCalls;
    this.calls++;
    let timedOut = false;
    store.decideWide(call.keys, call.args, now, call.wire, call.heldSince).then(
      (rows) => {
        for (const e of known) e.inflight--;
        const answered = readClock(this.o.clock);
        if (rows.length > 0) cache.sample(rows[4], now, answered, lead);
        const out = narrow(rows);
        // NaN rows: legs whose Redis Cluster slot call failed while others answered; they take the failure rule
        let failed: Batch | null = null;
        let failedKnown: Known[] | null = null;
        let base = 0;
        for (let i = 0; i < sent.n; i++) {
          if (Number.isNaN(rows[LEG_WIDE * base])) {
            failed ??= emptyBatch();
            failedKnown ??= [];
            push(failed, sent, i);
            failedKnown.push(known[i]);
          } else {
            cache.learn(known[i], rows, base, sent.costs[i], now, answered, sent.rts[i], call.sentNo, lead);
            settle(this.o.counters, compose(out, base, sent.rts[i]), sent, i, now);
          }
          base += sent.rts[i].legCount;
        }
        if (failed !== null) this.storeFailed(failed, failedKnown!, now, lead);
      },
      (e: unknown) => {
        for (const k of known) k.inflight--;
        this.storeFailed(sent, known, now, lead);
        timedOut = e instanceof StoreTimeoutError;
      },
    ).finally(() => {
      this.calls--;
      const h = this.held;
      if (h !== null) {
        // sent before this call's checks land (it is counted in flight already)
        if (!timedOut) this.sendHeld();
        else if (this.calls === 0) {
          // the connection was silent for the whole deadline: the held checks take their rule now, after the
          // checks of every call made before them (a call still in flight was: its timeout, or its answer,
          // decides the held call's fate, so that a key's checks go to the local rule in the order made)
          this.held = null;
          for (const k of h.known) k.inflight--;
          this.storeFailed(h.sent, h.known, h.heldAt, h.heldLead);
          flight.landed(h.sent.n);
        }
      }
      flight.landed(sent.n);
    });
  }

  /**
   * The store keys of a check's legs that other checks share (a guard's, through a guarded policy or a
   * check on the guard itself), or null when it has none.
   */
  private sharedKeys(rt: PolicyRuntime, e: Known): readonly string[] | null {
    if (rt.guardStoreKeys !== null) return rt.guardStoreKeys;
    return e.key === GUARD_KEY ? e.keys : null;
  }

  /**
   * The failure rule of each check of `b` (`known`: their cache entries, in order), sent at `now` when the wall
   * clock led the monotonic one by `lead` (StrictCache.lead at that send): the kernel decides them at `now`.
   */
  private storeFailed(b: Batch, known: Known[], now: number, lead: number): void {
    const local = emptyBatch(true);
    for (let i = 0; i < b.n; i++) {
      const d = storeFailure(b.rts[i], this.o.degraded, b.costs[i]);
      if (d === null) {
        this.seed(b, i, known[i], now, lead);
        push(local, b, i);
      } else settle(this.o.counters, d, b, i, now);
    }
    if (local.n > 0) this.o.local.decide(local, now);
  }

  /**
   * Seeds the kernel that will decide check i of `b` locally with the key's state last learned from Redis,
   * once per stall (a later Redis answer makes it due again). The kernel receives the state before the check.
   * The legs on keys other checks share (a guard's) are seeded from the state last learned for that key by
   * any check, once per stall for all of them (StrictCache.sharedState): the kernel holds one state for it,
   * which the stall's earlier local decisions have already spent from. Once per stall and per kernel: a shard
   * whose worker was lost meanwhile decides from an empty table, and is seeded again (each such loss can
   * hand back what the stall's local decisions spent on the lost one, at most the state learned).
   */
  private seed(b: Batch, i: number, e: Known, now: number, lead: number): void {
    const rt = b.rts[i];
    // (an entry is a key's under one policy version: after a reload its legs are the new runtime's)
    if (!oneVersion(e.rt, rt)) return;
    const cache = this.o.cache;
    const from = cache.sharedFrom(e);
    const kernel = this.o.local.kernelOf(b, i);
    const own = !e.seeded || e.seededOn !== kernel;
    e.seeded = true;
    e.seededOn = kernel;
    // the calls sent so far are in flight (or answered) at this local decision: their answers predate it, so they
    // do not make the key due for seeding again (StrictCache.learn). A call held now is not among them: it is
    // sent after this decision (with any check added to it meanwhile), and its answer ends the stall for the key.
    e.seedCall = this.sentCalls;
    const rows = this.seedRows.start(rt, b.hashes[2 * i], b.hashes[2 * i + 1], now, lead);
    const states = cache.statesOf(e);
    for (let j = 0; j < rt.legCount; j++) {
      if (j < from) {
        // none kept (a sliding log's entries, which no answer carries): the leg starts fresh locally
        if (own && cache.seedable(rt, j, states, 3 * j)) rows.leg(j, states, 3 * j, e);
        continue;
      }
      const k = cache.sharedState(e.keys[j]);
      if (k === undefined) continue;
      k.seedCall = this.sentCalls;
      if (k.seeded && k.seededOn === kernel) continue;
      k.seeded = true;
      k.seededOn = kernel;
      if (cache.seedable(rt, j, k.state, 0)) rows.leg(j, k.state, 0, k);
    }
    if (rows.rows.length > 0) this.o.local.seed(b, i, rows.rows, now);
  }
}

/** Where a state was learned: the clock bounds of the answer it came from (Known's, SharedState's). */
type Learned = Pick<Known, 'lo' | 'loLead'>;

/**
 * The kernel state rows one check's seed is built into (StrictDecider.seed): {@link start} sets the check (its
 * runtime and key hash) and the times it is decided at, then {@link leg} adds each leg that has a state. The
 * decider keeps one and reuses it, rows and all (LocalFallback.seed copies them), so a seed passes no long
 * list of arguments per leg and allocates nothing for them.
 */
class SeedRows {
  /** STATE_ROW numbers per leg added: hashLo, hashHi, limitId, w0, w1, lastSeen (LocalFallback.seed). */
  readonly rows: number[] = [];
  private rt: PolicyRuntime | null = null;
  private hashLo = 0;
  private hashHi = 0;
  private now = 0;
  private lead = 0;
  /** A leg's hash (writeLegHash's output). */
  private readonly legHash = new Float64Array(2);

  constructor(private readonly cache: StrictCache) {}

  /**
   * Starts the rows of a check on `rt` whose key hashed to (hashLo, hashHi), decided locally at `now` (this
   * instance's clock), when the wall clock led the monotonic one by `lead` (StrictCache.lead at its send).
   */
  start(rt: PolicyRuntime, hashLo: number, hashHi: number, now: number, lead: number): this {
    this.rows.length = 0;
    this.rt = rt;
    this.hashLo = hashLo;
    this.hashHi = hashHi;
    this.now = now;
    this.lead = lead;
    return this;
  }

  /**
   * Adds leg j's row: the state w0, w1, lastSeen (Redis time) at s[at], learned from an answer whose lower bound
   * of Redis − this instance's clock, and wall − monotonic clock then, `from` holds (StrictCache.toLocal reads
   * lastSeen on this instance's clock with them).
   */
  leg(j: number, s: Float64Array, at: number, from: Learned): void {
    const rt = this.rt!;
    const h = this.legHash;
    const last = s[at + 2];
    const local = this.cache.toLocal(last, this.now, from.lo, from.loLead, this.lead);
    writeLegHash(rt, this.hashLo, this.hashHi, j, h, 0);
    // a GCRA state's w0 is a time (the TAT): it moves with the clock
    const w0 = rt.legLimits[j].algorithmCode === 1 ? s[at] - (last - local) : s[at];
    this.rows.push(h[0], h[1], rt.limitIds[j], w0, s[at + 1], local);
  }
}

/** The checks, keys and arguments of one script call. */
class Call {
  constructor(readonly id: number) {}
  readonly sent = emptyBatch();
  /** Its number among the calls sent (StrictDecider.sentCalls), stamped when it is sent; 0 until then. */
  sentNo = 0;
  /** Its checks counted in flight so far (Flight.add): a held call's are counted as it holds them. */
  private counted = 0;
  /**
   * Held (StrictDecider.held): the `now` of the turn that last added to it (the time it is sent at, as far as
   * its checks know), and StrictCache.lead at that turn.
   */
  heldAt = 0;
  heldLead = 0;
  /** performance.now() when it was first held (undefined: never held): Store.decideWide's `heldSince`. */
  heldSince: number | undefined = undefined;

  /** Counts in `flight` its checks not counted yet (those added since it was held, or all). */
  count(flight: Flight): void {
    flight.add(this.sent.n - this.counted);
    this.counted = this.sent.n;
  }
  readonly known: Known[] = [];
  readonly keys: string[] = [];
  /** Each check's keys as RESP bytes (Known.wire), for the request. */
  readonly wire: Buffer[] = [];
  readonly args: number[] = [];
}

/**
 * Checks per script call for a turn of `n` checks while `room` more calls may go out (Store.pipelineCalls
 * less those in flight): split into at most that many calls of at least {@link MIN_CALL} checks each, so Redis
 * runs one while this thread builds the next and reads the answers of the one before; with the pipeline full,
 * or a turn too small for two such calls, one call. Smaller calls cost Redis more per decision (its fixed cost
 * per call), hence the floor: the last call of a split (what the others leave) is never below it either (a turn
 * of 17 was sent as 16 + 1).
 */
function callSize(n: number, room: number): number {
  let parts = Math.min(room, Math.floor(n / MIN_CALL));
  // the calls are cut every `size` checks: fewer parts while the last would fall under the floor
  while (parts > 1 && n - (parts - 1) * Math.ceil(n / parts) < MIN_CALL) parts--;
  return parts <= 1 ? n : Math.ceil(n / parts);
}

const MIN_CALL = 16;

/** The 4 outputs of each leg of a widened store reply (src/store/reply.ts), as compose() reads them. */
function narrow(rows: readonly number[]): Float64Array {
  const n = rows.length / LEG_WIDE;
  const out = new Float64Array(n * 4);
  for (let j = 0; j < n; j++) {
    out[4 * j] = rows[LEG_WIDE * j];
    out[4 * j + 1] = rows[LEG_WIDE * j + 1];
    out[4 * j + 2] = rows[LEG_WIDE * j + 2];
    out[4 * j + 3] = rows[LEG_WIDE * j + 3];
  }
  return out;
}
