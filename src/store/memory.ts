/**
 * The in-memory store: the store contract (src/store/contract.ts) held in this process, with the decisions
 * and merges of lua/check.lua and lua/sync.lua ported line for line (src/store/memory-algorithms.ts) on the
 * same stored bytes (lib.lua's 24-byte state, the sliding log's packed entries) and the same expiry (the
 * time until the state carries no information, from the decision's store time: the scripts' PXAT now + PX on
 * Redis's clock; with one clock for deciding and expiring, set() below gives the same instant). For tests of the engine's store-backed modes without a
 * redis-server, and for one process that wants `strict` semantics among limiters sharing it.
 *
 * Its clock is `clock` (Unix ms; default Date.now): the "store time" of decisions when `useStoreTime`, and
 * always the clock keys expire by. Calls never fail (no network): the failure rule is exercised against Redis.
 */
import { performance } from 'node:perf_hooks';
import { UNIQUE_KEY, type MergeOptions, type Store, type StoreChannel, type StoreFailures, type StoreStats, type StoredValues } from './contract.js';
import { MemoryPubSub } from './memory-pubsub.js';
import { LatencyHistogram } from './latency.js';
import { LEG_WIDE, widen } from './reply.js';
import { decodeState, encodeState } from './state.js';
import { ALLOW, evaluate, mergeState, UNREADABLE, type W0 } from './memory-algorithms.js';

export interface MemoryStoreOptions {
  /** Prefix of every key. Default `sluice:`. */
  prefix?: string;
  /** The store's clock, Unix ms. Default Date.now. */
  clock?: () => number;
  /** `store`: decisions use the store's clock (as Redis TIME); `limiter`: the caller's. Default `store`. */
  time?: 'store' | 'limiter';
  /** As RedisOptions.overLimitCache. Default true. */
  overLimitCache?: boolean;
  /** Channels are opened on this bus; by default one of the store's own. */
  pubsub?: MemoryPubSub;
}

/** 2^53 (lib.lua MAXN). */
const MAXN = 2 ** 53;
/** A sync merge marker's lifetime (lua/sync.lua), in ms. */
const MARKER_PX = 600_000;

export class MemoryStore implements Store {
  readonly prefix: string;
  readonly useRedisTime: boolean;
  readonly overLimitCache: boolean;
  /** One clock: the store's own ({@link MemoryStoreOptions.clock}). */
  readonly oneClock = true;
  readonly ready = true;
  readonly available = true;
  /** As RedisStore's, so that the engine batches checks the same way on either store. */
  readonly checksPerCall = 64;
  readonly pipelineCalls = 1;
  /** A call here costs no more than its checks: none is held. */
  readonly holdUnder = 0;
  readonly holdTurn = 0;
  readonly mergeDeadlineMs = (): number => 1000;
  private readonly now: () => number;
  private readonly bus: MemoryPubSub;
  /** Key → its value and the store time it expires at. */
  private readonly data = new Map<string, { v: Buffer; until: number }>();
  private readonly failures: StoreFailures = { timeouts: 0, scriptErrors: 0, unavailable: 0, connectionErrors: 0, breakerRejections: 0 };
  private errors = 0;
  private readonly latency = new LatencyHistogram();

  constructor(o: MemoryStoreOptions = {}) {
    this.prefix = o.prefix ?? 'sluice:';
    this.now = o.clock ?? Date.now;
    this.useRedisTime = (o.time ?? 'store') === 'store';
    this.overLimitCache = o.overLimitCache ?? true;
    this.bus = o.pubsub ?? new MemoryPubSub();
  }

  /** The value of `key`, or null when absent or expired (an expired key is dropped). */
  private get(key: string): Buffer | null {
    const e = this.data.get(key);
    if (e === undefined) return null;
    if (e.until <= this.now()) {
      this.data.delete(key);
      return null;
    }
    return e.v;
  }

  private set(key: string, v: Buffer, px: number): void {
    this.data.set(key, { v, until: this.now() + px });
  }

  async decide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const wide = await this.decideWide(keys, args, nowMs);
    const out = new Array<number>(keys.length * 4);
    for (let j = 0; j < keys.length; j++) for (let a = 0; a < 4; a++) out[j * 4 + a] = wide[j * LEG_WIDE + a];
    return out;
  }

  async decideWide(keys: string[], args: number[], nowMs: number): Promise<number[]> {
    const start = performance.now();
    const full = [this.useRedisTime ? 1 : 0, nowMs, keys.length, ...args];
    const rows = widen(this.check(keys, args, this.useRedisTime ? this.now() : nowMs), full, 3);
    // as RedisStore: unreadable rows become NaN (the failure rule), one script error per call that had any
    let bad = false;
    for (let r = 0; r < rows.length; r += LEG_WIDE) {
      if (rows[r] === UNREADABLE) {
        rows[r] = rows[r + 1] = rows[r + 2] = rows[r + 3] = NaN;
        bad = true;
      }
    }
    if (bad) {
      this.errors++;
      this.failures.scriptErrors++;
    }
    this.latency.observe(start);
    return rows;
  }

  /** lua/check.lua on `keys` and `legs` (6 numbers per leg) at `now`: its raw reply. */
  private check(keys: readonly string[], legs: readonly number[], now: number): number[] {
    const n = keys.length;
    const raw = keys.map((k) => this.get(k));
    const SLOT = new Map<string, number>();
    const S0: W0[] = [], S1: number[] = [], SL: number[] = [];
    const TTL: Array<number | undefined> = [];
    const dirty: number[] = [];
    const E0: number[] = [], E1: number[] = [], EL: number[] = [];
    const DENIED: boolean[] = [];
    const out: number[] = [];
    type Eval = [number, number, number, number, W0?, number?, number?, number?];
    // d: the most ms leg j may wait (onLimit: delay), 0 for none
    const evaluateLeg = (j: number, c: number, d: number): Eval => {
      // UNIQUE_KEY only spares the script its slot bookkeeping: decided the same here
      const alg = legs[6 * j] % UNIQUE_KEY, L = legs[6 * j + 1], P = legs[6 * j + 2], B = legs[6 * j + 3];
      if (L === 0 && alg <= 1) {
        E0[j] = 0;
        E1[j] = 0;
        EL[j] = -1;
        return c > 0 ? [2, 0, 0, -1] : [ALLOW, 0, 0, 0];
      }
      const key = keys[j];
      let s = SLOT.get(key);
      if (s === undefined) {
        s = j;
        SLOT.set(key, j);
        const v = raw[j];
        if (v !== null) {
          const st = alg === 5 ? decodeLog(v) : decodeState(v);
          if (st !== null) {
            S0[j] = st[0];
            S1[j] = st[1];
            SL[j] = st[2];
          } else SL[j] = -2;
        } else SL[j] = -1;
      }
      const last = SL[s];
      let t = now;
      let o;
      if (last >= 0) {
        if (last > t) t = last;
        o = evaluate(alg, L, P, B, true, S0[s], S1[s], last, c, t, d);
      } else if (last === -1) {
        o = evaluate(alg, L, P, B, false, 0, 0, 0, c, t, d);
      } else return [UNREADABLE, 0, 0, 0];
      const [code, rem, reset, retry, nw0, nw1] = o;
      if (code === ALLOW && c > 0) return [code, rem, reset, retry, nw0, nw1, t, s];
      let w0 = S0[s] ?? 0;
      if (typeof w0 !== 'number') w0 = 0; // a sliding log's entries: the reply carries numbers only
      E0[j] = w0;
      E1[j] = S1[s] ?? 0;
      EL[j] = last;
      return [code, rem, reset, retry];
    };
    const X: Eval[] = [];
    let i = 0;
    while (i < n) {
      let g = legs[6 * i + 5] % 65536; // maxDelayMs rides above it (lua/check.lua)
      if (g < 1) g = 1;
      if (i + g > n) g = n - i;
      let all = true;
      let unreadable = false;
      for (let j = i; j < i + g; j++) {
        const x = evaluateLeg(j, legs[6 * j + 4], Math.floor(legs[6 * j + 5] / 65536));
        out[4 * j] = x[0];
        out[4 * j + 1] = x[1];
        out[4 * j + 2] = x[2];
        out[4 * j + 3] = x[3];
        X[j] = x;
        if (x[0] !== ALLOW) {
          all = false;
          if (x[0] === UNREADABLE) unreadable = true;
        }
      }
      for (let j = i; j < i + g; j++) {
        const o = 4 * j;
        if (unreadable) {
          out[o] = UNREADABLE;
          out[o + 1] = out[o + 2] = out[o + 3] = 0;
        } else if (all) {
          const s = X[j][7];
          if (s !== undefined) {
            S0[s] = X[j][4]!;
            S1[s] = X[j][5]!;
            SL[s] = X[j][6]!;
            if (TTL[s] === undefined) dirty.push(s);
            TTL[s] = out[o + 2];
          }
        } else {
          DENIED[j] = true;
          if (out[o] === ALLOW) {
            // this leg alone would admit, but the check is denied: report its state untouched
            const x = evaluateLeg(j, 0, 0);
            out[o] = x[0];
            out[o + 1] = x[1];
            out[o + 2] = x[2];
            out[o + 3] = x[3];
          }
        }
      }
      i += g;
    }
    for (const s of dirty) {
      const w0 = S0[s];
      this.set(keys[s], typeof w0 === 'number' ? encodeState(w0, S1[s], SL[s]) : encodeLog(w0), TTL[s]!);
    }
    out.push(now);
    for (let j = 0; j < n; j++) if (DENIED[j]) out.push(E0[j], E1[j], EL[j]);
    return out;
  }

  async merge(keys: string[], args: number[], nowMs: number, batchId: string, o: MergeOptions = {}): Promise<number[]> {
    const start = performance.now();
    const now = this.useRedisTime ? this.now() : nowMs;
    const marker = `${this.prefix}merged:${batchId}`;
    const parents = (o.parents ?? []).map((id) => `${this.prefix}merged:${id}`);
    let fresh = !parents.some((m) => this.get(m)?.toString() === '1');
    if (fresh) {
      fresh = this.get(marker) === null;
      if (fresh) {
        this.set(marker, Buffer.from('1'), MARKER_PX);
        for (const m of parents) if (this.get(m) === null) this.set(m, Buffer.from('s'), MARKER_PX);
      }
    }
    const raw = keys.map((k) => this.get(k));
    const written = new Map<string, [number, number, number]>();
    const out: number[] = [];
    for (let j = 0; j < keys.length; j++) {
      const [alg, L, P, B] = [args[5 * j], args[5 * j + 1], args[5 * j + 2], args[5 * j + 3]];
      const d = fresh ? args[5 * j + 4] : 0;
      const key = keys[j];
      let exists = false, w0 = 0, w1 = 0, last = 0;
      const w = written.get(key);
      if (w !== undefined) {
        exists = true;
        [w0, w1, last] = w;
      } else if (raw[j] !== null) {
        const s = decodeState(raw[j]!);
        if (s !== null) {
          exists = true;
          [w0, w1, last] = s;
        }
      }
      let t = now;
      if (exists && last > t) t = last;
      const [n0, n1, ttl] = mergeState(alg, L, P, B, d, exists, w0, w1, last, t);
      if (ttl > 0 && fresh) {
        this.set(key, encodeState(n0, n1, t), ttl);
        written.set(key, [n0, n1, t]);
      }
      out.push(n0, n1, t);
    }
    this.latency.observe(start);
    return out;
  }

  /** Guard-slot placement is a Redis Cluster's: in memory a key has one name. */
  async read(keys: readonly string[], _guardKey: string | null = null): Promise<StoredValues> {
    return keys.map((k) => this.get(k));
  }

  async remove(keys: readonly string[], _guardKey: string | null = null): Promise<number> {
    let n = 0;
    for (const k of keys) {
      if (this.get(k) !== null) n++;
      this.data.delete(k);
    }
    return n;
  }

  async clock(): Promise<number> {
    return this.now();
  }

  channel(name: string, onMessage: (message: string) => void): StoreChannel {
    return this.bus.channel(name, onMessage);
  }

  onConnect(): void {
    // always connected: there is no reconnection to report
  }

  async connected(): Promise<boolean> {
    return true;
  }

  stats(): StoreStats {
    return {
      storeErrors: this.errors, ...this.failures, breaker: 'closed', connected: true, lateCalls: 0, lateSpentTokens: 0,
      latency: this.latency.snapshot(),
    };
  }

  async close(): Promise<void> {
    this.data.clear();
  }

}

/** lib.lua decodeLog: [entries, 0, newest ts] of a packed sliding log, or null when the value is not one. */
function decodeLog(raw: Buffer): [number[], number, number] | null {
  const n = raw.length;
  if (n === 0 || n % 16 !== 0 || n > 64 * 16) return null;
  const e: number[] = [];
  let last = 0;
  for (let off = 0; off < n; off += 16) {
    const ts = raw.readDoubleLE(off), count = raw.readDoubleLE(off + 8);
    if (!Number.isInteger(ts) || !Number.isInteger(count) || ts < last || ts > MAXN || count < 1 || count > MAXN) return null;
    e.push(ts, count);
    last = ts;
  }
  return [e, 0, last];
}

function encodeLog(e: readonly number[]): Buffer {
  const b = Buffer.allocUnsafe(e.length * 8);
  e.forEach((x, i) => b.writeDoubleLE(x, i * 8));
  return b;
}
