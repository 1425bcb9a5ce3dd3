/**
 * What one instance knows of its strict keys from Redis's answers: the exact over-limit cache, and the
 * last-known state the `local` failure rule starts a key from.
 *
 * Over-limit: when Redis denies a check of cost c on a key, its reply carries the state of every leg the check
 * was decided on, at Redis time t (lua/check.lua). Every other caller, on every instance, only spends from
 * those states (refill is a function of time alone), so until the state has refilled enough, no check of cost
 * ≥ c on that key can be admitted by anyone. This instance then answers such checks itself: it evaluates the
 * kept states at the current Redis time with the very arithmetic of the script (src/store/lua-algorithms.ts),
 * and answers the denial that gives, with its remaining wait; once that evaluation would admit, the check goes
 * to Redis and the entry is dropped. A calendar window's leg is evaluated with the window ends a call sent now
 * would carry (src/engine/calendar-args.ts), so a denial learned in a window that has ended since is not
 * answered (the count no longer holds, as in the script). A sliding log's leg is never answered: the reply
 * carries numbers only, not the log, so a later remaining cannot be computed. A check of a smaller cost (which
 * Redis may admit, changing the state), a policy reload, an admin reset on any instance (src/engine/reset-channel.ts)
 * and a sync merge into the key drop the entry too; a call in flight when the entry is dropped is not learned
 * from (its answer may predate the drop); and every denial is forgotten when the Redis connection or the reset
 * channel (re)opens (Redis may have restarted without its data, or failed over; a reset may have been missed;
 * on a Redis Cluster, whenever a master's connection is lost: Store.onConnect).
 * With one cost per key (the usual case) the answer equals Redis's, field for field; with a smaller cost spent
 * elsewhere meanwhile, Redis's remaining could be lower and its wait longer, the denial stands either way. So
 * with a guard: every tenant on every instance spends its key, so the guard's state an entry holds is as of its
 * last answer, and Redis may then name the guard as the binding limit, with a longer wait.
 *
 * Clock: Redis decides on its TIME. Each answered call bounds Redis − local (src/engine/redis-offset.ts: Redis's
 * time t, seen between this instance's readings s0 before the call and s1 after it, puts the offset within
 * [t − s1 − 1, t + 1 − s0]), and each entry keeps the bounds its own answer gave. A denial is evaluated at now + the upper
 * bound its own answer gave (the clock of the server holding the key: on a Redis Cluster, masters' clocks may
 * differ), plus any step back this instance's wall clock made since (read against a monotonic clock, when the
 * limiter runs on the wall clock: a clock of the caller's is taken as it is); and on a store of one clock (not a
 * Cluster), at now + the smallest upper bound seen lately (on the wall clock or the monotonic one, the larger)
 * when that is larger (Redis's clock stepped ahead): so at a time no earlier than Redis's, and a denial it
 * gives, Redis gives too; the wait it reports is at most that call's round trip short of Redis's, 1 ms more for
 * the monotonic reading, and after the wall clock stepped ahead, the step more (a step ahead cannot be told
 * from the monotonic clock stopping in a suspend, which must not make the cache deny what Redis admits). The smallest bounds are renewed
 * every 10 s, so a clock that drifts or steps is followed, and start over on every new connection (a failover
 * may reach a server whose clock differs). On a Cluster they are not used: one master's samples would move
 * every key's evaluation (a master 4 s ahead, sampled first after a renewal, shortened the waits of keys on the
 * others by 4 s), so there a master's clock stepping ahead is not followed while its denials are held. With
 * `clock: 'limiter'` the script uses the caller's time: no offset.
 *
 * Last known state: every answer (admitted or denied) updates the key's entry. A denial's states are exact;
 * after an admission the state is rebuilt from the answer's remaining and resetAfterMs, rounded toward fewer
 * tokens (see {@link rebuild}). When Redis fails and the policy's rule is `local`, the instance's kernel is
 * seeded with that state (once per stall: a later Redis answer makes the entry fresh again), so a key Redis
 * had exhausted stays exhausted, instead of starting from a full bucket. A leg on a key that checks share (a
 * guard's) is one kernel key for every tenant: its state is kept once per Redis key ({@link SharedState}),
 * from whichever check's answer came last, and seeded once per stall. Seeding it from each tenant's own,
 * older copy would hand back tokens the guard had spent since, or start it full for a tenant not seen yet.
 *
 * Bounded: at most `maxKeys` entries; past it the oldest entry with no call in flight is dropped (the key then
 * goes to Redis and, in a stall, starts full). An entry with a call in flight is what keeps its key's checks in
 * order, so it is never dropped: with every entry in flight the table holds `maxKeys` plus those, which the
 * engine's bounded queues bound. An entry costs about 200 bytes.
 */
import type { Decision } from '../types/decision.js';
import { compose } from './decision.js';
import { evaluateLeg } from '../store/lua-algorithms.js';
import { LEG_WIDE } from '../store/reply.js';
import { keyWire } from '../store/key-wire.js';
import { MAX_GROUP, LEG_OUT } from '../shard/protocol.js';
import { storeKey } from '../keys/store-key.js';
import { GUARD_KEY, type PolicyRuntime } from './runtime.js';
import { legKey } from './legs.js';
import { scriptBurst, scriptPeriod } from './calendar-args.js';
import { ALGORITHM_CODES, CALENDAR_WINDOW_CODE } from '../config/policy-spec.js';
import { RedisOffset } from './redis-offset.js';
import { rebuild } from './state-rebuild.js';

/** One strict key (a check's leg-0 Redis key) as this instance last learned it. */
export interface Known {
  rt: PolicyRuntime;
  /** The check's key, and the Redis keys of its legs (built once: a check sent to Redis builds no string). */
  readonly key: string;
  keys: string[];
  /**
   * keys[0], held on the entry itself: a call names every check's leg-0 key, and reading it through `keys` was
   * a cache miss per check (~9 % of the client's samples at 64 in flight, `--cpu-prof`).
   */
  key0: string;
  /** {@link keys} as the bytes of a RESP request (src/store/key-wire.ts), for the check script's call. */
  wire: Buffer;
  /** Calls for this key sent to Redis and not answered yet (the cache answers only when 0: key order). */
  inflight: number;
  /** The cost of the denial the states prove, or −1: none. */
  deniedCost: number;
  /** Per leg: w0, w1, lastSeen in Redis time (lastSeen −1: no state). */
  states: Float64Array;
  /**
   * An admission's numbers not yet rebuilt into `states` (a check of one leg: {@link StrictCache.learn}):
   * remaining, resetAfterMs and the Redis time of the answer; `states` is stale while `pending`.
   */
  pending: boolean;
  pendingR: number;
  pendingZ: number;
  pendingT: number;
  /**
   * An upper bound of Redis − this instance's clock (ms) given by the answer its states came from (Redis's time
   * t of a call sent at s0: t + 1 − s0), from the server that holds the key: on a Redis Cluster masters' clocks
   * may differ, and one bound for all would let a key on a master ahead be evaluated early.
   */
  hi: number;
  /** The lower bound of Redis − this instance's clock (ms) the same answer gave (t − s1 − 1): for seeding. */
  lo: number;
  /**
   * This instance's wall clock − its monotonic clock (ms) when that answer was taken (0 without a monotonic
   * clock): {@link StrictCache.toLocal} reads how far the wall clock went ahead of the monotonic one since.
   */
  loLead: number;
  /**
   * This instance's wall clock − its monotonic clock (ms) when the answer's call was sent (StrictCache.lead at
   * the batch that sent it: `hi` is read from that send's wall clock; 0 without a monotonic clock): a later
   * difference says how far the wall clock stepped since. (The answer's own lead was taken before: a step
   * while the call was in flight then moved the bound by the step, and a step back let the cache deny what
   * Redis admits.)
   */
  wallLead: number;
  /** Whether the local kernel was seeded from `states` since Redis last answered for the key. */
  seeded: boolean;
  /** The kernel it was seeded on (LocalFallback.kernelOf): another one (a shard's worker replaced) is seeded again. */
  seededOn: number;
  /**
   * The number of script calls sent when the key was last decided locally (seeded, or already seeded:
   * StrictDecider numbers its calls as it sends them): an answer to a call up to it was in flight at that local
   * decision, cannot count it, and does not make the key due for seeding again ({@link StrictCache.learn}). A
   * call held then (built, not sent) is numbered when it goes out, after the decision.
   */
  seedCall: number;
  /**
   * Answers still to come that may predate a drop of the key (a reset, a sync merge): the checks in flight
   * when it was dropped. None of them is learned (states and denial stay as the drop left them). (One whose
   * call failed is not learned anyway: a later answer is then skipped in its place, which only costs a Redis
   * call.)
   */
  stale: number;
  /**
   * The sum of the epochs of the shared keys among its legs (a guard's), when its last call was sent, and
   * when its states were learned: a check of another policy or key that this instance sent through one of
   * them since makes the states stale (0 for a check with no shared leg).
   */
  sentEpoch: number;
  epoch: number;
  /**
   * The strict decider's bookkeeping of the script call being built (src/engine/deciders/strict.ts): the last
   * call this check was put in, and where in that call's arguments its leg's algorithm code went while marked
   * UNIQUE_KEY (−1: not marked, the key being named again).
   */
  callId: number;
  markAt: number;
}

/**
 * A shared key's (a guard leg's) last state learned from Redis, whichever check's answer carried it: the one
 * state the local kernel starts that key from in a stall.
 */
export interface SharedState {
  /** w0, w1, lastSeen (Redis time) of the key, as {@link Known.states} holds one leg's. */
  readonly state: Float64Array;
  /** Whether the kernel was seeded from it since Redis last answered for the key. */
  seeded: boolean;
  /** The kernel it was seeded on (Known.seededOn). */
  seededOn: number;
  /** The calls sent when a check through it was last decided locally (Known.seedCall). */
  seedCall: number;
  /** The lower bound of Redis − this instance's clock given by the answer the state came from (Known.lo). */
  lo: number;
  /** The wall − monotonic clock when that answer was taken (Known.loLead). */
  loLead: number;
}

/**
 * Whether checks decided under `a` and under `b` are of one policy version: the same runtime, or a runtime and
 * its delayed twin (onLimit: delay; src/engine/delay.ts), which a check is decided under while a wait place is
 * free and not when every place is taken. A reload builds new runtimes, twins and all.
 */
export function oneVersion(a: PolicyRuntime, b: PolicyRuntime): boolean {
  return a === b || a.delayed === b || b.delayed === a;
}

/** Most shared keys' states kept (one per guard leg and version: a few per guard policy). */
const MAX_SHARED = 4096;

const SLIDING_LOG_CODE = ALGORITHM_CODES.sliding_log;

export class StrictCache {
  /**
   * The entries, by the head of their leg-0 Redis key (`<prefix>{<policy>:<version>:`, one per policy
   * version) then by the check's key: a check is looked up by the key it came with, no Redis key is built.
   */
  private readonly map = new Map<string, Map<string, Known>>();
  private count = 0;
  /** The last runtime looked up, its head and its entries (a batch is mostly one policy). */
  private lastRt: PolicyRuntime | null = null;
  private lastPrefix = '';
  private lastHead: Map<string, Known> | null = null;
  /**
   * Each runtime's entries (and the prefix they were found under), once looked up: where checks of several
   * policies interleave (free and paid tenants, a hot policy among others), building the head's string anew at
   * each change of policy was ~6 % of the client's samples (`--cpu-prof`, 90 % of checks over limit on one
   * policy, 10 % admitted on another).
   */
  private readonly heads = new WeakMap<PolicyRuntime, { prefix: string; m: Map<string, Known> }>();
  /** Over-limit answers given (the metric `sluice_store_over_limit_answers_total`). */
  answers = 0;
  /** Bounds of Redis time − this instance's clock (used only when Redis decides on its own TIME). */
  private readonly offset = new RedisOffset();
  /**
   * The same bounds of Redis time − this instance's monotonic clock (each sample read at its send's lead; the
   * limiter's clock as it is without one), whose upper bound {@link overLimit} reads on a store of one clock:
   * the wall clock's, taken before a step ahead, had shortened every wait by the step until the next answer.
   */
  private readonly monoOffset = new RedisOffset();
  private readonly scratch = new Float64Array(MAX_GROUP * LEG_OUT);

  /** Wall − monotonic clock (ms) at the batch being decided ({@link at}). */
  private batchLead = 0;
  /** Wall − monotonic clock (ms) when the last answer was taken ({@link sample}; 0 without a monotonic clock). */
  private answerLead = 0;

  /**
   * @param maxKeys most entries held
   * @param redisTime whether Redis decides on its own TIME (else on the time the caller sends: no offset)
   * @param answer whether to answer over-limit checks (false: only learn, for the `local` rule)
   * @param oneClock whether every key is decided on one server's clock (Store.oneClock; false: a Redis Cluster),
   *   which the bounds measured on every call then follow
   * @param mono a monotonic clock (ms) to tell the wall clock's steps by, when the limiter's clock is the wall
   *   clock; null (a clock of the caller's, as tests give) takes the limiter's clock as it is
   */
  constructor(private readonly maxKeys: number, private readonly redisTime: boolean, private readonly answer = true,
    private readonly oneClock = true, private readonly mono: (() => number) | null = null) {}

  /**
   * The limiter's time of the batch about to be decided (its clock, Unix ms): the monotonic clock is read once
   * for it, to tell a step of the wall clock since each denial was learned ({@link overLimit}).
   */
  at(now: number): void {
    if (this.mono !== null) this.batchLead = now - this.mono();
  }

  /**
   * Wall − monotonic clock (ms) at the batch being decided ({@link at}; 0 without a monotonic clock): what a
   * call it sends gives back to {@link sample} and {@link learn} with its answer.
   */
  get lead(): number {
    return this.batchLead;
  }

  get size(): number {
    return this.count;
  }

  /** The entries under the head of `rt`'s leg-0 Redis keys (made if need be). */
  private headOf(prefix: string, rt: PolicyRuntime): Map<string, Known> {
    if (rt === this.lastRt && prefix === this.lastPrefix) return this.lastHead!;
    const known = this.heads.get(rt);
    let m: Map<string, Known> | undefined;
    if (known !== undefined && known.prefix === prefix) m = known.m;
    else {
      const head = keyHead(prefix, rt);
      m = this.map.get(head);
      if (m === undefined) this.map.set(head, (m = new Map()));
      this.heads.set(rt, { prefix, m });
    }
    this.lastRt = rt;
    this.lastPrefix = prefix;
    this.lastHead = m;
    return m;
  }

  /**
   * Reads the entry of a check of `rt` on `key`, if there is one, and gives its calls in flight (0 when none):
   * a look-up only, to bring the entry into the CPU's cache ahead of {@link entry} (the strict decider's first
   * loop over a batch). Makes, moves and evicts no entry (the policy version's map of entries is made as
   * {@link entry} would make it).
   */
  peek(prefix: string, rt: PolicyRuntime, key: string): number {
    const e = this.headOf(prefix, rt).get(key);
    return e === undefined ? 0 : e.inflight;
  }

  /** The entry of a check of `rt` on `key` about to be decided (Redis keys under `prefix`), made if need be. */
  entry(prefix: string, rt: PolicyRuntime, key: string): Known {
    const m = this.headOf(prefix, rt);
    let e = m.get(key);
    if (e === undefined) {
      if (this.count >= this.maxKeys) this.evictOne();
      const keys = legKeys(prefix, rt, key);
      e = {
        rt, key, keys, key0: keys[0], wire: keyWire(keys), inflight: 0, deniedCost: -1, states: new Float64Array(rt.legCount * 3).fill(-1),
        pending: false, pendingR: 0, pendingZ: 0, pendingT: 0, hi: Number.POSITIVE_INFINITY, lo: Number.NEGATIVE_INFINITY, loLead: 0, wallLead: 0, seeded: false, seededOn: 0, seedCall: 0, stale: 0, sentEpoch: 0, epoch: 0, callId: 0, markAt: -1,
      };
      m.set(key, e);
      this.count++;
    } else if (!oneVersion(e.rt, rt)) {
      // a reload (a runtime is rebuilt on every one, for every policy): a denial proves nothing under numbers
      // that may differ (a version given in the config stays when they change), but a leg's last-known state
      // is what Redis holds under its key, whatever the numbers: it stays for each leg whose key stays, so a
      // stall right after a reload starts the key where Redis left it, not full. An admission's numbers are
      // rebuilt first, by the runtime that sent them.
      this.statesOf(e);
      const was = e.keys, old = e.states, before = e.rt;
      e.rt = rt;
      e.keys = legKeys(prefix, rt, key);
      e.key0 = e.keys[0];
      e.wire = keyWire(e.keys);
      e.deniedCost = -1;
      e.states = new Float64Array(rt.legCount * 3).fill(-1);
      for (let j = 0; j < rt.legCount; j++) {
        const i = was.indexOf(e.keys[j]);
        // (a state is read by its algorithm: one that changed under a version given in the config starts over)
        if (i >= 0 && before.legLimits[i].algorithmCode === rt.legLimits[j].algorithmCode) e.states.set(old.subarray(3 * i, 3 * i + 3), 3 * j);
      }
    }
    return e;
  }

  /** Epochs of shared keys (a guard's legs), bumped by every check this instance sends through them. */
  private readonly epochs = new Map<string, number>();

  /** The shared keys' last-known states, by Redis key (oldest first: past MAX_SHARED it goes). */
  private readonly shared = new Map<string, SharedState>();

  /** The first of `e`'s legs on a key other checks share (its guard's, or all of a check on GUARD_KEY). */
  sharedFrom(e: Known): number {
    const g = e.rt.guardStoreKeys;
    if (g !== null) return e.rt.legCount - g.length;
    return e.key === GUARD_KEY ? 0 : e.rt.legCount;
  }

  /** The last-known state of the shared key `key` (leg j of a check), or undefined when none was learned. */
  sharedState(key: string): SharedState | undefined {
    return this.shared.get(key);
  }

  /** Counts a check sent through the shared key `key` (a guard leg's Redis key). */
  touch(key: string): void {
    this.epochs.set(key, (this.epochs.get(key) ?? 0) + 1);
  }

  /** The sum of the epochs of `keys` (the shared keys of one check). */
  epochOf(keys: readonly string[]): number {
    let sum = 0;
    for (const k of keys) sum += this.epochs.get(k) ?? 0;
    return sum;
  }

  private evictOne(): void {
    for (const m of this.map.values()) {
      for (const [k, e] of m) {
        if (e.inflight > 0) continue;
        m.delete(k);
        this.count--;
        return;
      }
    }
  }

  /**
   * The decision Redis would give a check of `cost` on `e` now (this instance's clock, Unix ms), when the
   * entry proves a denial; else null (the check goes to Redis). Drops the entry's denial when `cost` is
   * smaller than the one denied or when the states would admit now.
   */
  overLimit(e: Known, cost: number, now: number, epoch: number): Decision | null {
    if (e.deniedCost < 0 || !this.answer) return null;
    if (cost < e.deniedCost || e.inflight > 0 || epoch !== e.epoch || (this.redisTime && e.hi === Number.POSITIVE_INFINITY)) {
      if (cost < e.deniedCost) e.deniedCost = -1;
      return null;
    }
    // at a time no earlier than Redis's for the key: its own answer's bound, moved later by a step back the wall
    // clock made since (the bound is that much larger now), rounded up (the monotonic clock reads fractions of
    // a ms); on one clock, the bound renewed from every answer since when that is larger (Redis's clock stepped
    // ahead meanwhile; none seen since a reconnection: the own bound alone), read on the wall clock and on the
    // monotonic one, the larger. Never moved earlier: a wall clock ahead of the monotonic one since is a step
    // ahead (the bound is smaller now) or the monotonic clock stopped in a suspend (it is not), which cannot be
    // told apart; taken for a step, a suspend of D had kept denying for D after Redis refilled. So after a
    // step ahead a denial is evaluated that much late, and its wait reported that much short: the check goes
    // to Redis, which decides it.
    let t = now;
    if (this.redisTime) {
      const back = Math.ceil(e.wallLead - this.batchLead);
      t = now + e.hi + (back > 0 ? back : 0);
      const u = this.oneClock ? this.offset.upper() : Number.POSITIVE_INFINITY;
      if (u !== Number.POSITIVE_INFINITY) {
        // (the two take the same samples: both are finite here; a guard all the same, as +Infinity would hold
        // the denial for good)
        const um = Math.ceil(this.monoOffset.upper() - this.batchLead);
        const a = um > u && um !== Number.POSITIVE_INFINITY ? um : u;
        if (now + a > t) t = now + a;
      }
    }
    const rt = e.rt;
    const out = this.scratch;
    const s = e.states;
    for (let j = 0; j < rt.legCount; j++) {
      const l = rt.legLimits[j];
      if (l.algorithmCode === CALENDAR_WINDOW_CODE) {
        // the windows move: the ends a call sent now would carry (at this instance's `now`, as decide() sends
        // them), so a denial learned in a window that has ended since is evaluated in the current one
        evaluateLeg(CALENDAR_WINDOW_CODE, l.limit, scriptPeriod(l, now), scriptBurst(l, now), s[3 * j], s[3 * j + 1], s[3 * j + 2], cost, t, out, j * LEG_OUT);
      } else {
        evaluateLeg(l.algorithmCode, l.limit, l.periodMs, l.burst, s[3 * j], s[3 * j + 1], s[3 * j + 2], cost, t, out, j * LEG_OUT);
      }
    }
    const d = compose(out, 0, rt);
    if (d instanceof Error || d.allowed) {
      e.deniedCost = -1;
      return null;
    }
    this.answers++;
    return d;
  }

  /**
   * Learns from Redis's answer to a check of `cost` on `e`, sent under the runtime `sentRt` (the entry's own
   * unless a reload replaced it since) in the script call sent `callId`-th (StrictDecider's numbering; Infinity:
   * sent after any seed): `wide` holds its legs at row `base` ({@link LEG_WIDE} numbers each: outputs, Redis
   * time, and for a denied check the states).
   *
   * The states learned make the key (and its shared legs) due for seeding again in a later stall, unless the
   * call was already in flight when the key was last seeded (callId ≤ seedCall): such an answer predates the
   * local decisions made since that seed and cannot count them, so seeding the kernel from it again in the same
   * stall would hand back what they spent (measured: a stall that had admitted 3 of 4 locally admitted 3 more
   * after a call in flight was answered; test/unit/engine/strict-seed-inflight.test.ts). The kernel goes on
   * from its own state then; the answer's states are kept for the next stall. A call held at the seed
   * (StrictDecider.held) was not in flight: it is numbered as it is sent, after the seed, and its answer ends
   * the stall for the key like any later call's (numbered when built, a check added to it after the seed left
   * the next stall on the older seed's state: test/unit/engine/strict-seed-held.test.ts).
   */
  learn(e: Known, wide: ArrayLike<number>, base: number, cost: number, sentAt = Number.NEGATIVE_INFINITY, answeredAt = Number.POSITIVE_INFINITY,
    sentRt: PolicyRuntime = e.rt, callId = Number.POSITIVE_INFINITY, sentLead = this.batchLead): void {
    const rt = e.rt;
    const s = e.states;
    if (e.stale > 0) {
      // sent before the key was dropped: the answer may predate the drop (a reset's DEL, a merge)
      e.stale--;
      e.deniedCost = -1;
      return;
    }
    if (!oneVersion(sentRt, rt)) {
      // sent before a reload that a later check of the key has brought to the entry (entry()): its rows are
      // the old runtime's legs, which need not be the entry's now (a version given in the config keeps the
      // keys when limits are added or removed), so reading them by the new runtime took another check's row
      // for a leg's state, and a denial could stand on it. Not learned: a later answer is, and a denial under
      // numbers that have changed proves nothing anyway.
      e.deniedCost = -1;
      return;
    }
    const denied = !Number.isNaN(wide[base * LEG_WIDE + 5]);
    // One leg on a key of its own (the common check), admitted: the answer's numbers wait on the entry itself,
    // and its state is rebuilt only when something reads it (statesOf: a stall's seed). Rebuilding it here, into
    // the entry's own Float64Array, cost a cache miss per admitted check (~5 % of the client's samples,
    // --cpu-prof). Such a check has no shared leg, so the shared states below are not touched either.
    e.pending = !denied && rt.legCount === 1 && e.key !== GUARD_KEY;
    if (e.pending) {
      e.pendingR = wide[base * LEG_WIDE + 1];
      e.pendingZ = wide[base * LEG_WIDE + 2];
      e.pendingT = wide[base * LEG_WIDE + 4];
    } else {
      for (let j = 0; j < rt.legCount; j++) {
        const r = (base + j) * LEG_WIDE;
        if (denied) {
          s[3 * j] = wide[r + 5];
          s[3 * j + 1] = wide[r + 6];
          s[3 * j + 2] = wide[r + 7];
        } else {
          rebuild(rt, j, wide[r + 1], wide[r + 2], wide[r + 4], s, 3 * j);
        }
      }
    }
    e.hi = wide[base * LEG_WIDE + 4] + 1 - sentAt;
    e.wallLead = sentLead;
    e.lo = wide[base * LEG_WIDE + 4] - answeredAt - 1;
    e.loLead = this.answerLead;
    e.deniedCost = denied && cost > 0 ? cost : -1;
    // a sliding log (code 5) keeps its entries in Redis and the reply carries numbers only: no TS twin can
    // follow it as entries leave (lua-algorithms.ts), so a check with such a leg is never answered here
    for (let j = 0; j < rt.legCount; j++) if (rt.legLimits[j].algorithmCode === SLIDING_LOG_CODE) e.deniedCost = -1;
    // onLimit: delay: a denied check may be admitted with a delay by the next call (the TS twin has no delay)
    if (rt.delayed !== null || rt.legDelayMs !== null) e.deniedCost = -1;
    if (callId > e.seedCall) e.seeded = false;
    e.epoch = e.sentEpoch;
    // the shared legs' states, once per key for every tenant: this answer is the latest Redis gave for them
    for (let j = this.sharedFrom(e); j < rt.legCount; j++) {
      const key = e.keys[j];
      let k = this.shared.get(key);
      if (k === undefined) {
        if (this.shared.size >= MAX_SHARED) this.shared.delete(this.shared.keys().next().value as string);
        this.shared.set(key, (k = { state: new Float64Array(3), seeded: false, seededOn: 0, seedCall: 0, lo: Number.NEGATIVE_INFINITY, loLead: 0 }));
      }
      k.state[0] = s[3 * j];
      k.state[1] = s[3 * j + 1];
      k.state[2] = s[3 * j + 2];
      if (callId > k.seedCall) k.seeded = false;
      k.lo = e.lo;
      k.loLead = e.loLead;
    }
  }

  /** `e`'s last-known states (per leg: w0, w1, lastSeen), an admission's waiting numbers rebuilt first. */
  statesOf(e: Known): Float64Array {
    if (e.pending) {
      e.pending = false;
      rebuild(e.rt, 0, e.pendingR, e.pendingZ, e.pendingT, e.states, 0);
    }
    return e.states;
  }

  /**
   * Whether leg j of a check on `rt` has a state to seed the local kernel with, the one at s[at] (w0, w1,
   * lastSeen): one was learned, and it is not a sliding log's (whose entries stay in Redis; see {@link rebuild}).
   */
  seedable(rt: PolicyRuntime, j: number, s: Float64Array, at: number): boolean {
    return s[at + 2] >= 0 && rt.legLimits[j].algorithmCode !== SLIDING_LOG_CODE;
  }

  /**
   * A clock sample: Redis's time `t` of a call issued at `s0` and answered at `s1` (this instance's clock), sent
   * by a batch whose {@link lead} was `sentLead`.
   */
  sample(t: number, s0: number, s1: number, sentLead = this.batchLead): void {
    if (!this.redisTime) return;
    this.offset.sample(t, s0, s1);
    const m1 = this.mono === null ? s1 : this.mono();
    this.monoOffset.sample(t, s0 - sentLead, m1);
    this.answerLead = s1 - m1;
  }

  /**
   * A Redis time as this instance's clock reads it, for seeding the kernel: converted with a lower bound of the
   * offset (so the local time is no earlier than the true one: less refill, never more), `lo` the one the
   * state's own answer gave (Known.lo, SharedState.lo) when known, taken when the wall clock led the monotonic
   * one by `loLead`, else the largest seen lately (on the wall clock or the monotonic one, the later time);
   * never past `now`. A wall clock that went ahead of the monotonic one since moves the time as late: a step
   * ahead (Redis's time did not move with it; taken as it is, the kernel refilled the step's worth more than
   * Redis) or a suspend (it did: the kernel refills the suspend's worth less, the safe side). `nowLead` is the
   * wall − monotonic clock at which `now` was read (a failed call's checks are decided at their send's `now`,
   * on that send's lead: a batch decided since, after a step back, has a smaller one).
   */
  toLocal(t: number, now: number, lo = Number.NEGATIVE_INFINITY, loLead = 0, nowLead = this.batchLead): number {
    if (!this.redisTime) return Math.min(t, now);
    let local: number;
    if (lo !== Number.NEGATIVE_INFINITY) {
      // the answer's own bound (the key's server: a Cluster's masters may disagree)
      const ahead = Math.ceil(nowLead - loLead);
      local = t - lo + (ahead > 0 ? ahead : 0);
    } else {
      // else, on one clock, the largest seen lately
      const l = this.oneClock ? this.offset.lower() : Number.NEGATIVE_INFINITY;
      if (l === Number.NEGATIVE_INFINITY) return now;
      local = t - l;
      const m = Math.ceil(t - this.monoOffset.lower() + nowLead);
      if (m > local && m !== Number.POSITIVE_INFINITY) local = m;
    }
    return Math.min(now, local);
  }

  /**
   * Drops what is known of `key0`, a check's leg-0 Redis key (an admin reset, a sync merge into it). An entry
   * with calls in flight stays, emptied, and learns nothing from their answers ({@link Known.stale}).
   */
  drop(key0: string): void {
    if (!key0.endsWith(LEG0_END)) return;
    for (const [head, m] of this.map) {
      if (!key0.startsWith(head)) continue;
      // every `%` in the key's part comes from its escape (src/keys/store-key.ts), so this inverts it
      const key = key0.slice(head.length, key0.length - LEG0_END.length).replace(/%(25|7B|7D|3A)/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
      const e = m.get(key);
      if (e === undefined) continue;
      if (e.inflight > 0) {
        e.deniedCost = -1;
        clearStates(e);
        e.stale = e.inflight;
      } else {
        m.delete(key);
        this.count--;
      }
    }
  }

  /**
   * Forgets a key this instance reset: `keys` are its own legs' Redis keys, leg 0 first. Its entry goes
   * ({@link drop}); and when they are keys other checks share (a guard's, reset through the guard policy's
   * key `*`), every denial learned through them goes too (as after a check sent through them: {@link touch}).
   */
  forget(keys: readonly string[]): void {
    if (keys.length > 0) this.drop(keys[0]);
    this.touchShared(keys);
    // reset in Redis by this instance: a stall starts them full, as Redis now holds them
    for (const k of keys) this.shared.delete(k);
  }

  /**
   * Another instance reset `key` of `rt` (heard on the reset channel; Redis keys under `prefix`, `keys` its
   * own legs'): its denial goes, answers of calls in flight now are not learned (they may predate the
   * reset), and denials learned through it as a shared key go ({@link forget}). Its last-known states stay:
   * they only seed the kernel while Redis is down (`local`), the next Redis answer replaces them, and a
   * message anyone can publish must not make a stall start the key fresh.
   */
  resetElsewhere(prefix: string, rt: PolicyRuntime, key: string, keys: readonly string[]): void {
    const e = this.map.get(keyHead(prefix, rt))?.get(key);
    if (e !== undefined) {
      e.deniedCost = -1;
      e.stale = e.inflight;
    }
    this.touchShared(keys);
  }

  /** Bumps the epochs of those of `keys` that checks share (a guard's): denials learned through them go. */
  private touchShared(keys: readonly string[]): void {
    for (const k of keys) if (this.epochs.has(k)) this.touch(k);
  }

  /**
   * A new connection to the store (Redis may have restarted without its data, or failed over to a server
   * whose clock differs): every denial goes, and the clock bounds start over.
   */
  reconnected(): void {
    this.clearDenials();
    this.offset.clear();
    this.monoOffset.clear();
  }

  /** Forgets every denial (a policy reload); the last-known states stay (their runtimes are checked). */
  clearDenials(): void {
    for (const m of this.map.values()) for (const e of m.values()) e.deniedCost = -1;
  }
}

/** Forgets what `e` learned of its keys' states (a reload, a drop): none known, none waiting. */
function clearStates(e: Known): void {
  e.states.fill(-1);
  e.pending = false;
}

/** How a leg-0 Redis key ends after its key part (src/keys/store-key.ts). */
const LEG0_END = '}:0';

/** `<prefix>{<policy>:<version>:`: what every leg-0 Redis key of `rt`'s checks begins with. */
function keyHead(prefix: string, rt: PolicyRuntime): string {
  const k0 = storeKey(prefix, rt.policy.name, rt.policy.version, '', 0);
  return k0.slice(0, k0.length - LEG0_END.length);
}

/** The Redis keys of a check's legs. */
function legKeys(prefix: string, rt: PolicyRuntime, key: string): string[] {
  const out = new Array<string>(rt.legCount);
  for (let j = 0; j < rt.legCount; j++) out[j] = legKey(prefix, rt, key, j);
  return out;
}
