/**
 * Inspect and reset one key (the admin API's `GET` and `DELETE /v1/keys/{policy}/{key}`, and the library's
 * `limiter.inspect` / `limiter.reset`).
 *
 * A key is found exactly as a check finds it: hashed with its policy runtime's seed, each limit's leg salted,
 * and sent to the shard the front would send a check to (a guarded policy's keys live on its guard's shard).
 * Inspect reads two things at one instant of the owning kernel (or Redis, for `strict` policies): the raw
 * state (held or not, last update, counts), and what a cost-0 check of the key's whole group (its limits and
 * its guard's) reports per limit now (remaining, resetAfterMs), which changes nothing.
 */
import type { Front } from './front.js';
import type { LeaseDecider } from './lease/decider.js';
import { writeLegHash, type PolicyRuntime } from './runtime.js';
import type { Hasher } from '../keys/hasher.js';
import type { Kernel } from '../shard/kernel.js';
import type { ShardPool } from '../shard/pool.js';
import type { Store } from '../store/contract.js';
import type { KeyRequest, KeyState, LimitState } from '../types/keys.js';
import {
  GROUP_SHIFT, IN_COST, IN_LIMIT, LEG_IN, LEG_OUT, OUT_REMAINING, OUT_RESET_AFTER, PEEK_FOUND, PEEK_LAST_SEEN, PEEK_W0, PEEK_W1,
} from '../shard/abi.js';
import { shardOf } from '../shard/router.js';
import { keyOf } from '../keys/derive.js';
import { policyOf } from './validate.js';
import { storeKey } from '../keys/store-key.js';
import { readClock } from './clock.js';
import { decodeState } from '../store/state.js';
import { fixedWindowCount, slidingWindowCounts } from './window.js';
import { SluiceError, isSluiceError, closed, storeFailed as redisFailed } from '../util/errors.js';
import { scriptBurst, scriptPeriod } from './calendar-args.js';
import type { HeardReset } from './reset-channel.js';

/** What inspect and reset need from a limiter. */
export interface KeyAdminDeps {
  front: Front;
  hasher: Hasher;
  /** The calling thread's kernel: hashes keys, and with no pool holds every key. */
  kernel: Kernel;
  pool: ShardPool | null;
  store: Store | null;
  clock: () => number;
  /** True once the limiter is closing. */
  closed: () => boolean;
  /** Lease policies' decider (their leases are read and dropped through it); null without one. */
  lease?: LeaseDecider | null;
  /**
   * Tells other instances of a reset of a store-backed policy's key (src/engine/reset-channel.ts: policy,
   * version, key); absent: resets stay on this instance.
   */
  announce?: (policy: string, version: string, key: string) => void;
}

/** One key of one policy, located: its runtime, key, hash and owner. */
interface Located {
  rt: PolicyRuntime;
  key: string;
  /** The key's hash under the policy's seed (each leg's hash comes from it: writeLegHash). */
  lo: number;
  hi: number;
  /** The shard that owns the key's legs (-1: this thread). */
  shard: number;
}

export class KeyAdmin {
  constructor(private readonly d: KeyAdminDeps) {}

  /**
   * The state of one key under every limit of its policy, now.
   * @throws SluiceError INVALID_ARGUMENT / UNKNOWN_POLICY naming the field, SHARD_FAILED if the owning shard is
   *   down, STORE_FAILED if Redis does not answer (strict policies), CLOSED, CLOCK.
   */
  async inspect(req: KeyRequest): Promise<KeyState> {
    const at = this.locate(req);
    const { rt } = at;
    const now = readClock(this.d.clock);
    const own = rt.saltLo.length;
    if (rt.leased) {
      try {
        return await this.d.lease!.inspect(rt, at.key, now);
      } catch (e) {
        throw storeFailed(e);
      }
    }
    const out: KeyState = { policy: rt.policy.name, key: at.key, version: rt.policy.version, source: 'local', limits: [] };
    let rows: ArrayLike<number>;
    let raw: Array<[held: boolean, w0: number, w1: number, last: number]>;
    let t = now;
    if (rt.stored) {
      out.source = 'redis';
      // checks made before the inspect and held back to go with later ones reach Redis before its reads (on the
      // same connection, answered in order), as they would have if sent at once: else it shows the key without them
      this.d.front.sendHeld();
      ({ rows, raw, t } = await this.readRedis(at, now));
    } else {
      const legs = this.legs(at, true);
      const peekLegs = this.legs(at, false).subarray(0, own * LEG_IN);
      let peeked: ArrayLike<number>;
      if (at.shard < 0) {
        const k = this.d.kernel;
        k.legIn.set(legs);
        k.decide(rt.legCount, now);
        rows = k.legOut.slice(0, rt.legCount * LEG_OUT);
        k.legIn.set(peekLegs);
        k.peek(own);
        peeked = k.legOut.slice(0, own * LEG_OUT);
      } else {
        // Sent back to back: the shard reads both with no batch between them.
        const pool = this.d.pool!;
        [rows, peeked] = await Promise.all([
          pool.run(at.shard, { kind: 'batch', now, n: rt.legCount, legs }),
          pool.keys(at.shard, { kind: 'peek', n: own, legs: Float64Array.from(peekLegs) }) as Promise<Float64Array>,
        ]);
      }
      raw = [];
      for (let j = 0; j < own; j++) {
        const r = j * LEG_OUT;
        raw.push([peeked[r + PEEK_FOUND] === 1, peeked[r + PEEK_W0], peeked[r + PEEK_W1], peeked[r + PEEK_LAST_SEEN]]);
      }
      const sync = rt.synced ? this.d.front.syncWriter : null;
      if (sync !== null) out.stalenessMs = sync.staleness(now);
    }
    for (let j = 0; j < own; j++) {
      const l = rt.policy.limits[j];
      const [held, w0, w1, last] = raw[j];
      const r = j * LEG_OUT;
      const s: LimitState = {
        // a concurrency policy has no runtime, so it is never inspected here
        name: l.name, algorithm: l.algorithm as LimitState['algorithm'], limit: l.limit, burst: l.burst, periodMs: l.periodMs,
        held, lastUpdateMs: held ? last : null,
        remaining: rows[r + OUT_REMAINING], resetAfterMs: rows[r + OUT_RESET_AFTER],
      };
      if (l.algorithm === 'token_bucket' || l.algorithm === 'gcra') {
        s.tokens = rows[r + OUT_REMAINING];
      } else if (l.algorithm === 'sliding_log') {
        s.count = l.limit - rows[r + OUT_REMAINING]; // a cost-0 check's remaining is L − the cost logged in the trailing period
      } else {
        // Counts as of t' = max(t, last), the time the kernel decides at; windows aligned to the epoch.
        const tt = held ? Math.max(t, last) : t;
        if (l.calendar !== undefined) {
          s.count = held && tt < w1 ? w0 : 0; // w1: the end of the calendar window the count belongs to
        } else if (l.algorithm === 'fixed_window') {
          s.count = fixedWindowCount(l.periodMs, held, w0, last, tt);
        } else {
          const c = slidingWindowCounts(l.periodMs, held, w0, w1, last, tt);
          s.count = c.current;
          s.previousCount = c.previous;
        }
      }
      out.limits.push(s);
    }
    return out;
  }

  /**
   * Forgets one key under its policy's own limits (not its guard's): in the kernel that owns it, in Redis for
   * `strict` and `sync` policies, and, for `sync`, its deltas not yet merged (a merge in flight is waited for),
   * so a later merge does not bring it back. For a store-backed policy, other instances are then told
   * (`announce`), and drop what they learned of the key from Redis ({@link heard}). Resolves to the number of
   * states forgotten: each limit's state counts once per place it was held (the kernel, Redis).
   * @throws SluiceError INVALID_ARGUMENT / UNKNOWN_POLICY naming the field, SHARD_FAILED if the owning shard is
   *   down, STORE_FAILED if Redis does not answer, CLOSED.
   */
  async reset(req: KeyRequest): Promise<{ removed: number }> {
    const at = this.locate(req);
    const { rt } = at;
    const own = rt.saltLo.length;
    const store = this.d.store;
    let removed = 0;
    try {
      if (rt.leased && store !== null) {
        // the key's lease states (every instance's leases of it go with them) and what this instance holds
        const keys = this.d.lease!.forget(rt, at.key);
        try {
          removed += await store.remove(keys, null);
        } catch (e) {
          throw storeFailed(e);
        }
      }
      if ((rt.stored || rt.synced) && !rt.leased && store !== null) {
        const keys = ownStoreKeys(store.prefix, rt, at.key);
        const sync = this.d.front.syncWriter;
        if (sync !== null) await sync.forget(keys);
        // what this instance learned of the key from Redis (an over-limit denial) no longer holds
        this.d.front.strict?.forget(keys);
        // checks made before the reset and held back to go with later ones reach Redis before the delete
        this.d.front.sendHeld();
        try {
          removed += await store.remove(keys, guardKeyOf(rt));
        } catch (e) {
          throw storeFailed(e);
        }
      }
    } finally {
      // after the delete (tried): an instance that hears it asks Redis next, which no longer holds the key.
      // Told even when the delete failed (it may have run late): dropping what was learned is always safe
      if ((rt.stored || rt.synced || rt.leased) && store !== null) this.d.announce?.(rt.policy.name, rt.policy.version, at.key);
    }
    const legs = this.legs(at, false).subarray(0, own * LEG_IN);
    if (at.shard < 0) {
      this.d.kernel.legIn.set(legs);
      removed += this.d.kernel.remove(own);
    } else {
      removed += (await this.d.pool!.keys(at.shard, { kind: 'remove', n: own, legs: Float64Array.from(legs) })) as number;
    }
    return { removed };
  }

  /**
   * Another instance reset `key` of `policy` (at `version`; src/engine/reset-channel.ts): drops what this
   * instance learned of it from Redis, so its next check asks Redis. Strict: the over-limit denial (and, for
   * a guard's key `*`, those its guarded policies learned through it; the last-known state that seeds the
   * `local` rule while Redis is down stays until Redis answers again: StrictCache.resetElsewhere); sync: the
   * next merge reads the key from Redis and replaces this instance's view (its own deltas still merge);
   * lease: this instance's leases of the key (its next check takes a new lease; Redis counts an abandoned
   * lease as all used when it expires). Nothing whose loss could admit more is dropped (deltas not merged, the
   * local kernel's own state, the strict last-known state stay; a dropped lease counts as all used), so a
   * forged message costs Redis calls and admits nothing.
   * @returns false when the policy is not in force here under that version, or not store-backed (nothing done).
   */
  heard(r: HeardReset): boolean {
    const store = this.d.store;
    const rt = this.d.front.policyRuntimes.get(r.policy);
    if (this.d.closed() || store === null || rt === undefined || rt.policy.version !== r.version) return false;
    if (rt.leased) {
      this.d.lease?.forget(rt, r.key);
      return true;
    }
    if (!rt.stored && !rt.synced) return false;
    this.d.front.strict?.resetElsewhere(store.prefix, rt, r.key, ownStoreKeys(store.prefix, rt, r.key));
    if (rt.synced) {
      const at = this.locate({ policy: r.policy, key: r.key });
      this.d.front.refreshSync(rt, at.key, at.lo, at.hi, at.shard);
    }
    return true;
  }

  /** Validates the request, hashes its key with the policy's seed and finds the owning shard. */
  private locate(req: KeyRequest): Located {
    if (this.d.closed()) throw closed();
    const rt = policyOf(this.d.front.policyRuntimes, req, 'request');
    const key = keyOf(rt.policy, req.key, req.descriptors);
    // Checks queued this turn go out first (under the hasher they share); then the hasher is free.
    this.d.front.flush();
    const [lo, hi] = this.d.hasher.hashOne(key, rt.seedLo, rt.seedHi);
    const pool = this.d.pool;
    const shard = pool === null ? -1 : shardOf(rt.guardHashes === null ? hi : rt.guardHashes[1], pool.size);
    return { rt, key, lo, hi, shard };
  }

  /**
   * Leg input rows for every leg of the key's group: with `group`, a cost-0 check (the first leg carries the
   * group length); without, plain [hashLo, hashHi, limitId, 0] rows for peek and remove.
   */
  private legs(at: Located, group: boolean): Float64Array {
    const { rt } = at;
    const legs = new Float64Array(rt.legCount * LEG_IN);
    for (let j = 0; j < rt.legCount; j++) {
      writeLegHash(rt, at.lo, at.hi, j, legs, j * LEG_IN);
      legs[j * LEG_IN + IN_LIMIT] = rt.limitIds[j] + (group && j === 0 ? rt.legCount * GROUP_SHIFT : 0);
      legs[j * LEG_IN + IN_COST] = 0;
    }
    return legs;
  }

  /**
   * Strict: a cost-0 check of the group in Redis, the raw states, and Redis's clock (for window counts) in one
   * pipeline; the clock is Redis TIME unless the store runs on the limiter's clock.
   */
  private async readRedis(at: Located, now: number): Promise<{
    rows: number[]; raw: Array<[boolean, number, number, number]>; t: number;
  }> {
    const store = this.d.store!;
    const { rt } = at;
    const own = rt.saltLo.length;
    const keys: string[] = [];
    const args: number[] = [];
    for (let j = 0; j < rt.legCount; j++) {
      keys.push(j < own ? storeKey(store.prefix, rt.policy.name, rt.policy.version, at.key, j) : rt.guardStoreKeys![j - own]);
      const l = rt.legLimits[j];
      args.push(l.algorithmCode, l.limit, scriptPeriod(l, now), scriptBurst(l, now), 0, j === 0 ? rt.legCount : 0);
    }
    try {
      // one pipeline, in this order: the decision, the clock, the values
      const [rows, time, values] = await Promise.all([
        store.decide(keys, args, now),
        store.useRedisTime ? store.clock() : Promise.resolve(null),
        store.read(keys.slice(0, own), guardKeyOf(rt)),
      ]);
      if (rows.some((v) => Number.isNaN(v))) throw new Error('the key\'s state could not be read (its slot did not answer, or it holds another type or a malformed value: DELETE resets it)');
      const t = time === null ? now : time;
      const raw = values.map((v, j): [boolean, number, number, number] => {
        // a sliding log's value is its packed entries [ts, count]... (lua/sliding_log.lua): held, last = the newest ts
        if (v !== null && rt.policy.limits[j].algorithm === 'sliding_log' && v.length >= 16 && v.length % 16 === 0) return [true, 0, 0, v.readDoubleLE(v.length - 16)];
        const s = v === null ? null : decodeState(v);
        return s === null ? [false, 0, 0, 0] : [true, s[0], s[1], s[2]];
      });
      return { rows, raw, t };
    } catch (e) {
      throw storeFailed(e);
    }
  }

}

/** The store keys of `key`'s own legs under `rt` (not its guard's), leg 0 first. */
function ownStoreKeys(prefix: string, rt: PolicyRuntime, key: string): string[] {
  return Array.from({ length: rt.saltLo.length }, (_, j) => storeKey(prefix, rt.policy.name, rt.policy.version, key, j));
}

/** The key of a guarded policy's guard leg (the last of its group), where a Redis Cluster keeps its keys; else null. */
function guardKeyOf(rt: PolicyRuntime): string | null {
  return rt.guardStoreKeys === null ? null : rt.guardStoreKeys[rt.guardStoreKeys.length - 1];
}

function storeFailed(e: unknown): SluiceError {
  if (isSluiceError(e)) return e;
  return redisFailed(e);
}
