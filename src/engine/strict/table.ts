/**
 * The strict cache's table (src/engine/strict/cache.ts): one {@link Known} entry per strict key, looked up by
 * the check's own key; the last-known states of the keys checks share (a guard's legs, {@link SharedState}),
 * once per Redis key, and their epochs; and what drops an entry or its denial (an admin reset here or
 * elsewhere, a sync merge, a reload).
 *
 * Bounded: at most `maxKeys` entries; past it the oldest entry with no call in flight is dropped (the key then
 * goes to Redis and, in a stall, starts full). An entry with a call in flight is what keeps its key's checks in
 * order, so it is never dropped: with every entry in flight the table holds `maxKeys` plus those, which the
 * engine's bounded queues bound. An entry costs about 200 bytes.
 */
import { keyWire } from '../../store/key-wire.js';
import { storeKey } from '../../keys/store-key.js';
import { GUARD_KEY, type PolicyRuntime } from '../runtime.js';
import { legKey } from '../legs.js';
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
   * An admission's numbers not yet rebuilt into `states` (a check of one leg: StrictCache.learn):
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
   * clock): RedisClock.toLocal reads how far the wall clock went ahead of the monotonic one since.
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
   * decision, cannot count it, and does not make the key due for seeding again (StrictCache.learn). A
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

/**
 * The entries of a strict cache, and the shared keys' states and epochs: StrictCache
 * (src/engine/strict/cache.ts) is one, with learning from Redis's answers added.
 */
export class KnownTable {
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

  /** Epochs of shared keys (a guard's legs), bumped by every check this instance sends through them. */
  private readonly epochs = new Map<string, number>();

  /** The shared keys' last-known states, by Redis key (oldest first: past MAX_SHARED it goes). */
  private readonly shared = new Map<string, SharedState>();

  /** @param maxKeys most entries held */
  constructor(private readonly maxKeys: number) {}

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

  /** `e`'s last-known states (per leg: w0, w1, lastSeen), an admission's waiting numbers rebuilt first. */
  statesOf(e: Known): Float64Array {
    if (e.pending) {
      e.pending = false;
      rebuild(e.rt, 0, e.pendingR, e.pendingZ, e.pendingT, e.states, 0);
    }
    return e.states;
  }

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

  /**
   * Keeps the states of `e`'s legs on shared keys (learned from an answer to a call sent `callId`-th, see
   * StrictCache.learn), once per key for every tenant: that answer is the latest Redis gave for them.
   */
  keepShared(e: Known, callId: number): void {
    const s = e.states;
    for (let j = this.sharedFrom(e); j < e.rt.legCount; j++) {
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
