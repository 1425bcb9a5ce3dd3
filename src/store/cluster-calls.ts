/**
 * Script calls on a Redis Cluster: a batch split by hash slot, one call per slot, the replies put back in
 * order, each master with its own liveness (src/store/deadline.ts). Used by src/store/redis.ts.
 */
import { createHash } from 'node:crypto';
import type { Cluster } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { checkLibrary, checkScript, scriptMissing, syncScript } from './scripts.js';
import { LibraryWay, resendInTurn, SETTLED, type Resend, type ResendTurn, type SentCall } from './library-way.js';
import { followed, redirectOf, sendRedirected, splitByMigration, type Redirect } from './cluster-redirect.js';
import { keyInSlot, splitChecks, splitKeys } from './slots.js';
import { deadline, deadlineOrDrop, Liveness } from './deadline.js';
import { CallGate } from './call-gate.js';
import { LEG_WIDE, unpackReply, widen } from './reply.js';
import { hostPorts } from './sentinel.js';
import { packLegs } from './leg-runs.js';
import { createBreaker, probeWrite, type BreakerOptions, type BreakerState } from './breaker.js';

/**
 * A check call: `args` holds 6 numbers per leg (from 0), `flag` 1 for Redis's clock, `now` the caller's;
 * `wire` optionally the keys as RESP bytes (Store.decideWide; a Cluster's calls, split by slot, ignore it).
 */
export type CheckCall = (keys: string[], args: number[], flag: number, now: number, wire?: readonly Uint8Array[], heldSince?: number) => Promise<number[]>;

/**
 * One hash slot's check calls, whichever master serves it: those written and not answered yet, first sends and
 * resends; from a failure that asks for a resend until each call written before it is answered or resent, the
 * gate new calls of that slot wait behind, in the order made (src/store/call-gate.ts says why: a key's later
 * check went out ahead of the resend of an earlier one that had found no library, FUNCTION FLUSH on every
 * master: test/fault/redis-cluster-flush-order.test.ts); and the order of its resends (its {@link ResendTurn}).
 * A key's calls all go to its slot, so that is where their order is kept: kept per master, a slot that moved to
 * another master while its gate was closed (resharding, failover) sent the key's next check to the new master
 * at once, ahead of the resend of the earlier one (test/fault/redis-cluster-moved-reload.test.ts); and the slots
 * of a master do not wait for each other. The gate also closes when the slot map names a new master while calls
 * written to the old one are unsettled (`pending`): they are on their way there by MOVED
 * (test/fault/redis-cluster-redirect.test.ts).
 */
interface Lane extends ResendTurn {
  slot: number;
  unanswered: Set<Promise<unknown>>;
  /** Its checks' calls not settled yet, each settled by its answer (resends included) or its deadline. */
  pending: Set<Promise<unknown>>;
  gate: CallGate;
  /** The loads of the master its calls went to last (the slot's master then). */
  at: MasterLoads;
}

/**
 * One master's library loads (by `host:port`, as c.slots names it). A call's {@link SentCall.sentAt} is `count`
 * when it was written; `loaded`, the last load, settles once answered, to the error that refused it for now
 * (loadFailure `retry`), else undefined.
 */
interface MasterLoads {
  node: string;
  count: number;
  loaded: Promise<unknown>;
  /** `loaded` not answered yet. */
  pending: boolean;
}

/** A check call as sent to the Cluster: its slot's lane, and the loads of the master it was written to. */
interface LaneCall extends SentCall {
  lane: Lane;
  at: MasterLoads;
  /** The redirection it was sent by (src/store/cluster-redirect.ts), or null: by the slot map. */
  to: Redirect | null;
}

/** A script as EVALSHA needs it. */
interface Script {
  lua: string;
  sha: string;
}

function script(lua: string): Script {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** Host and port of each `host:port` seed; throws a CONFIG error naming `redis.cluster`. */
export function clusterNodes(nodes: readonly string[]): Array<{ host: string; port: number }> {
  return hostPorts(nodes, 'redis.cluster');
}

/** A reply sending a command to another master (MOVED, ASK): it says nothing of the health of the one asked. */
function redirected(e: unknown): boolean {
  return redirectOf(e) !== null;
}

/**
 * The most redirections a check call follows itself (src/store/cluster-redirect.ts), beyond ioredis's own: a
 * slot moved on again while its call was redirected, say. One more fails the call by its rule.
 */
const MAX_HOPS = 3;

/** The Cluster's own state keeps a call from being made (not ready, a master unknown): a connection fault. */
function clusterError(what: string): Error {
  return new Error(`redis cluster: ${what}`);
}

/**
 * Script calls on a Redis Cluster. A script may touch keys of one slot only, so a batch goes out as one call
 * per slot it touches (lua/check.lua for each part: the groups of one check always stay in one part), and
 * the replies are put back in the batch's order. The check calls are FCALL of the check library (EVALSHA
 * where the Cluster refuses FUNCTION LOAD; the merges are EVALSHA), issued through ioredis's own methods:
 * its auto-pipelining groups them per master by their first key, which it cannot find in a defineCommand
 * script's arguments. A "Function not found" (a new Cluster, a restart, FUNCTION FLUSH) loads the library on
 * that call's master and resends the call (or fails it with that master's refusal of the load, when that says
 * Redis is unwell: OOM, READONLY...); an FCALL refused as a command (unknown, NOPERM) goes by EVALSHA for good; a NOSCRIPT (restart, failover, SCRIPT FLUSH) is answered by resending
 * that call as EVAL, which also caches the script on that master again. A MOVED or ASK that ioredis's
 * auto-pipelining left unfollowed is followed here, to the master it names (src/store/cluster-redirect.ts), in
 * the slot's resend order. Each master has its own {@link Liveness}: a frozen
 * master fails its slots' calls while the others keep answering.
 */
export function clusterCalls(c: Cluster, prefix: string, timeoutMs: number, partFailed: (e: unknown) => void,
  lateSpend: (raw: number[], args: readonly number[], from: number) => void,
  breaking: { options?: BreakerOptions; healthy: (e: unknown) => boolean }): {
  check: CheckCall;
  merge: (keys: string[], args: number[], capMs: number) => Promise<number[]>;
  /** The masters' circuit breakers together: open when every one is, half-open when some are not closed. */
  state: () => BreakerState;
  /** `p`, a command on `key` (not a check: an admin read or delete), under the deadline of its slot's master. */
  bounded: <T>(p: Promise<T>, key: string) => Promise<T>;
  /** Shuts the masters' breakers down (their heartbeats stop): the store is closing. */
  shutdown: () => void;
} {
  const checkLua = script(checkScript());
  const syncLua = script(syncScript());
  /** The master (`host:port`, as c.slots names it) serving `slot` now, or '?' before the slot map has it. */
  const masterOf = (slot: number): string => (c.slots[slot] as string[] | undefined)?.[0] ?? '?';
  /** A master client's name as c.slots gives it. */
  const nameOf = (node: { options: { host?: string; port?: number } }): string => `${node.options.host}:${node.options.port}`;
  /** The client of the master named `node` (nameOf), if the Cluster has one. */
  const clientOf = (node: string): ReturnType<Cluster['nodes']>[number] | undefined => c.nodes('master').find((n) => nameOf(n) === node);
  const lives = new Map<string, Liveness>();
  const liveOf = (slot: number): Liveness => {
    const node = masterOf(slot);
    let l = lives.get(node);
    if (l === undefined) lives.set(node, (l = new Liveness()));
    return l;
  };
  // a merge: EVALSHA, EVAL after a NOSCRIPT (on the master it went to); a redirection ioredis did not follow is
  // followed, up to MAX_HOPS times (src/store/cluster-redirect.ts)
  const run = (s: Script, keys: string[], args: Array<number | Buffer>): Promise<number[]> => followed(c, async (to) => {
    try {
      return (await to.evalsha(s.sha, keys.length, ...keys, ...args)) as number[];
    } catch (e) {
      if (!scriptMissing(e)) throw e;
      return (await to.eval(s.lua, keys.length, ...keys, ...args)) as number[];
    }
  }, MAX_HOPS);
  // the check script answers one string of packed doubles (src/store/reply.ts unpackReply): read as bytes
  // (ioredis has evalshaBuffer and evalBuffer on a Cluster, untyped; its callBuffer drops the command name there)
  const bytes = c as unknown as {
    evalshaBuffer(sha: string, n: number, ...a: Array<string | number | Buffer>): Promise<Buffer>;
    evalBuffer(lua: string, n: number, ...a: Array<string | number | Buffer>): Promise<Buffer>;
  };
  // The check script goes as the Function library (src/store/check-call.ts says why): FCALL, routed by its
  // keys' slot like any keyed command; a master without the library ("Function not found": a new Cluster, a
  // restart, FUNCTION FLUSH) has it loaded there, and the call is sent again. A Cluster that refuses FUNCTION
  // LOAD or FCALL (older than 7: unknown command; an ACL without them) is called by EVALSHA for good. A master
  // that refuses the LOAD for now (OOM, READONLY, BUSY...) fails its call with that error, which says Redis is
  // unwell (src/store/failure-kind.ts), not that the script failed. The rule is src/store/library-way.ts's,
  // shared with one connection's calls; the loads, one master at a time, are these (loadOn).
  const lib = checkLibrary();
  const way: LibraryWay<LaneCall> = new LibraryWay(true, (sent) => {
    // where its resend goes: where a redirection sent it (src/store/cluster-redirect.ts), else the master
    // serving its slot now, which is the one it was written to unless the slot moved or ioredis followed a
    // redirection (MOVED; then the master that answered, as the slot map says now)
    const at = sent.to !== null ? sent.at : loadsOf(masterOf(sent.lane.slot));
    // no load there since the call was written: one now. A load still unanswered that began before it was
    // written does not do (a newer FUNCTION FLUSH removed the library after that load ran); the other calls
    // written there before this load, which fail alike (the parts of one batch), wait for it
    if (at !== sent.at || sent.sentAt === at.count) {
      loadOn(at);
      loadElsewhere(at);
    }
    return at.loaded;
  });
  const masters = new Map<string, MasterLoads>();
  const loadsOf = (node: string): MasterLoads => {
    let m = masters.get(node);
    if (m === undefined) masters.set(node, (m = { node, count: 0, loaded: SETTLED, pending: false }));
    return m;
  };
  /**
   * Loads the library on master `m`, on the connection its calls go by (which just answered): only there.
   * Loading every master made each resend wait for every master's answer, a frozen master's too (none before
   * ioredis's 60 s command timeout: test/fault/redis-cluster-frozen-reload.test.ts), and opened the lazy
   * connections of masters not called yet, which fail the calls routed to them until they are up ("Connection
   * is closed.": ioredis's Cluster, without an offline queue, refuses a command to a node still connecting).
   * A master that lacks the library says so at its own next call.
   */
  const loadOn = (m: MasterLoads): void => {
    m.count++;
    m.pending = true;
    const client = clientOf(m.node);
    const load = client === undefined ? Promise.reject(clusterError(`no master ${m.node}`)) : client.call('FUNCTION', 'LOAD', lib.text);
    const loaded = load.then(() => undefined, (e: unknown) => (way.loadFailed(e) === 'retry' ? e : undefined));
    m.loaded = loaded;
    void loaded.then(() => {
      if (m.loaded === loaded) m.pending = false;
    });
  };
  /**
   * Also loads the library, without waiting for it, on every other master whose connection is up and that has
   * no load under way: a call redirected by ASK (its slot half-way through a migration) was answered "Function
   * not found" by the master importing the slot, which the slot map does not name yet, and its resend is
   * redirected there again; its load, written on that master's connection before the resend reaches it, is read
   * first (test/fault/redis-cluster-moved-reload.test.ts). Not awaited, so a frozen master does not hold the
   * resend; connections that are up only, so none is opened (see loadOn). A master that has the library answers
   * "already exists" (loadFailure: loaded).
   */
  const loadElsewhere = (own: MasterLoads): void => {
    for (const node of c.nodes('master')) {
      if (node.status !== 'ready') continue;
      const m = loadsOf(nameOf(node));
      if (m !== own && !m.pending) loadOn(m);
    }
  };
  // through ioredis's own method, so the call takes the Cluster's auto-pipelining like the EVALSHA below
  const fcallBuffer = (keys: string[], args: Array<number | Buffer>): Promise<Buffer> =>
    (c as unknown as { fcallBuffer(fn: string, n: number, ...a: Array<string | number | Buffer>): Promise<Buffer> }).fcallBuffer(lib.fn, keys.length, ...keys, ...args);
  /** The lanes by slot, each made at its slot's first call (a dense array: a lookup per call). */
  const lanes = new Array<Lane | undefined>(16384).fill(undefined);
  const laneOf = (slot: number): Lane => {
    let l = lanes[slot];
    if (l === undefined) lanes[slot] = l = { slot, unanswered: new Set(), pending: new Set(), gate: new CallGate(), last: SETTLED, at: loadsOf(masterOf(slot)) };
    return l;
  };
  /** `p`, kept in `set` until it settles. */
  const tracked = <T>(set: Set<Promise<unknown>>, p: Promise<T>): Promise<T> => {
    set.add(p);
    const done = (): void => {
      set.delete(p);
    };
    p.then(done, done);
    return p;
  };
  const written = <T>(lane: Lane, p: Promise<T>): Promise<T> => tracked(lane.unanswered, p);
  /** Closes `lane`'s gate until the calls in `set` now have settled and the resends of the failures read so far are made. */
  const hold = (lane: Lane, set: Set<Promise<unknown>>): void => {
    lane.gate.close(Promise.allSettled([...set]), () => way.settled(lane));
  };
  // legs: the call's 6 numbers per leg, as unpackReply reads the reply by them; lane: its keys' slot's
  const sendCheck = (keys: string[], legs: readonly number[], flag: number, now: number, lane: Lane, givenUp: () => boolean): Promise<number[]> => {
    // a copy of packLegs's scratch: ioredis writes it later (auto-pipelining), and the call may be resent
    const args = [flag, now, keys.length, Buffer.from(packLegs(legs, 0, legs.length / 6))];
    const unpack = (b: Buffer): number[] => unpackReply(b, legs, 0);
    const failed = (e: unknown): void => {
      // every call of this slot written so far answered, and the resends made (src/store/call-gate.ts)
      if (LibraryWay.asksResend(e) || redirected(e) || splitByMigration(e)) hold(lane, lane.unanswered);
    };
    // A call failed with a redirection ioredis did not follow (src/store/cluster-redirect.ts) is sent where it
    // names, up to MAX_HOPS times, in the slot's resend order; one refused TRYAGAIN (its keys split by a
    // migration under way) is sent again where it went, after a pause, until its deadline; a library failure
    // ("Function not found", NOSCRIPT, FCALL refused) is answered by the way (one resend: LibraryWay), sent where
    // the failed call went; any other failure, and a resend's, is the call's. `to`: where the call goes (null:
    // by the slot map).
    const send = (how: Resend, to: Redirect | null): Promise<Buffer> => {
      if (to === null) {
        if (how === 'fcall') return fcallBuffer(keys, args);
        return how === 'evalsha' ? bytes.evalshaBuffer(checkLua.sha, keys.length, ...keys, ...args) : bytes.evalBuffer(checkLua.lua, keys.length, ...keys, ...args);
      }
      return sendRedirected(c, to, (n) => (how === 'fcall' ? n.callBuffer('FCALL', lib.fn, keys.length, ...keys, ...args)
        : how === 'evalsha' ? n.callBuffer('EVALSHA', checkLua.sha, keys.length, ...keys, ...args)
          : n.callBuffer('EVAL', checkLua.lua, keys.length, ...keys, ...args)) as Promise<Buffer>);
    };
    const attempt = (how: Resend, resent: boolean, to: Redirect | null, hops: number, tries = 0): Promise<number[]> => {
      // the loads of the master it is written to: the slot's (which changes only when the slot moves: a string
      // compare per call), or the one a redirection named
      if (to === null) {
        const node = masterOf(lane.slot);
        if (lane.at.node !== node) lane.at = loadsOf(node);
      }
      const at = to === null ? lane.at : loadsOf(to.node);
      const sent: LaneCall = { fcall: how === 'fcall', resent, sentAt: at.count, lane, at, to };
      return written(lane, send(how, to)).then(unpack, (e: unknown) => {
        failed(e);
        const r = redirectOf(e);
        if (r !== null) {
          // given up on (its deadline) meanwhile: its checks took their failure rule, so it goes nowhere
          if (hops >= MAX_HOPS || givenUp()) throw e;
          return resendInTurn(lane, () => undefined, () => attempt(how, resent, r, hops + 1));
        }
        if (splitByMigration(e)) {
          // the migration moves the call's other keys within milliseconds (a MIGRATE of the next keys): sent
          // again where it went after 5, 10, 20... ms (up to 100), until its deadline gives it up
          if (givenUp()) throw e;
          const ms = Math.min(100, 5 * 2 ** tries);
          return resendInTurn(lane, () => new Promise<void>((r) => setTimeout(r, ms)), () => attempt(how, resent, to, hops, tries + 1));
        }
        if (resent) throw e;
        // FCALL refused: by EVALSHA for good, a first EVALSHA (its NOSCRIPT gets an EVAL)
        return way.resend(e, sent, (h) => attempt(h, h !== 'evalsha', to, hops), lane);
      });
    };
    return attempt(way.fcall ? 'fcall' : 'evalsha', false, null, 0);
  };
  const runCheck = (keys: string[], legs: readonly number[], flag: number, now: number, slot: number, givenUp: () => boolean): Promise<number[]> => {
    const lane = laneOf(slot);
    // The slot moved (the slot map names another master) while calls written to the old one are unsettled:
    // those will be redirected (MOVED) to the new master, or fail, and a check made now must not reach the new
    // master ahead of them (test/fault/redis-cluster-redirect.test.ts). It waits, as behind a reload, until each
    // is decided (its redirection followed) or given up: an old master frozen holds the slot one deadline at most.
    if (lane.gate.open && lane.pending.size > 0 && lane.at.node !== masterOf(slot)) hold(lane, lane.pending);
    if (lane.gate.open) return sendCheck(keys, legs, flag, now, lane, givenUp);
    // given up on (its deadline) while it waited: not written (src/store/call-gate.ts)
    return lane.gate.wait(() => sendCheck(keys, legs, flag, now, lane, givenUp), givenUp);
  };
  // One circuit breaker per master, as it has its own liveness: a master lost opens its own, so its slots'
  // checks take their failure rule at once while the other masters' keep being decided (one breaker for the
  // Cluster opened on a single master's timeouts, and failed the healthy masters' checks with it). Its idle
  // probe is a write that master refuses while unwell (breaker.ts probeWrite), on a key of a slot it serves.
  type Part = (keys: string[], legs: readonly number[], flag: number, now: number, slot: number) => Promise<number[]>;
  const part: Part = (keys, legs, flag, now, slot) => {
    const p = deadlineOrDrop((givenUp) => runCheck(keys, legs, flag, now, slot, givenUp), timeoutMs, liveOf(slot), (r) => lateSpend(r, legs, 0));
    return tracked(laneOf(slot).pending, p);
  };
  const breakers = new Map<string, ReturnType<typeof createBreaker<Parameters<Part>, number[]>>>();
  /** A probe key per slot (slots.ts keyInSlot: some thousand CRC16s to find), made once it is needed. */
  const probeKeys = new Map<number, string>();
  const probeKey = (slot: number): string => {
    let k = probeKeys.get(slot);
    if (k === undefined) probeKeys.set(slot, (k = keyInSlot(`${prefix}breaker-probe:`, slot)));
    return k;
  };
  /** A slot the slot map gives to `node`, other than `avoid`: `slot` while it is one, else the first; -1 if none. */
  const servedSlot = (node: string, slot: number, avoid: number): number => {
    if (slot !== avoid && masterOf(slot) === node) return slot;
    for (let s = 0; s < 16384; s++) if (s !== avoid && masterOf(s) === node) return s;
    return -1;
  };
  const breakerOf = (slot: number): ReturnType<typeof createBreaker<Parameters<Part>, number[]>> => {
    const node = masterOf(slot);
    let b = breakers.get(node);
    if (b === undefined) {
      // a slot that redirected the last probe (MOVED: it moved away; ASK: it is being migrated), avoided after
      let avoid = -1;
      const probe = (): Promise<unknown> => {
        const client = clientOf(node);
        // a slot that master serves now: the slot it was made for moves away in a resharding, and a key of a
        // slot it does not serve is answered MOVED (or ASK) before Redis looks at its memory, its role or its
        // load, which said nothing of the master's health yet closed its breaker
        const at = servedSlot(node, slot, avoid);
        if (client === undefined || at < 0) return Promise.reject(clusterError(`no master ${node}`));
        return probeWrite(client, probeKey(at), (p) => deadline(p, timeoutMs, liveOf(at)), (e) => breaking.healthy(e) && !redirected(e))
          .catch((e: unknown) => {
            if (redirected(e)) {
              // the slot map is stale (MOVED), or the slot is on its way (ASK): the next probe takes another
              avoid = at;
              c.refreshSlotsCache();
            }
            throw e;
          });
      };
      breakers.set(node, (b = createBreaker(part, breaking.options, breaking.healthy, probe, () => clientOf(node)?.status === 'ready')));
    }
    return b;
  };
  const state = (): BreakerState => {
    let open = 0, notClosed = 0;
    for (const { state: st } of breakers.values()) {
      const x = st();
      if (x === 'open') open++;
      if (x !== 'closed') notClosed++;
    }
    return breakers.size > 0 && open === breakers.size ? 'open' : notClosed > 0 ? 'halfOpen' : 'closed';
  };
  // without a slot map, ioredis would queue the call until connected: fail now instead
  const notReady = (): Promise<number[]> => Promise.reject(clusterError(`${c.status}, not ready`));
  return {
    bounded: (p, key) => deadline(p, timeoutMs, liveOf(calculateSlot(key))),
    shutdown: () => {
      for (const b of breakers.values()) b.breaker.shutdown();
    },
    // args: 6 per leg. Each slot's call has its own deadline, and the slots that answered are decided even if
    // another failed (a master lost): its legs' rows are NaN. All failed: rejects.
    async check(keys, args, flag, now) {
      if (c.status !== 'ready') return notReady();
      const parts = splitChecks(prefix, keys, args, 6, 5);
      const settled = await Promise.allSettled(parts.map((p) => breakerOf(p.slot).breaker.fire(p.keys, p.args, flag, now, p.slot)));
      const failed = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      // every failed slot call is one store error; when all failed, decide() counts the one it rethrows
      if (failed.length > 0 && failed.length === parts.length) {
        for (const r of failed.slice(1)) partFailed(r.reason);
        throw failed[0].reason;
      }
      for (const r of failed) partFailed(r.reason);
      const out = new Array<number>(keys.length * LEG_WIDE).fill(NaN);
      parts.forEach((p, k) => {
        const r = settled[k];
        if (r.status !== 'fulfilled') return;
        const wide = widen(r.value, p.args, 0);
        p.legs.forEach((leg, i) => {
          for (let a = 0; a < LEG_WIDE; a++) out[leg * LEG_WIDE + a] = wide[i * LEG_WIDE + a];
        });
      });
      return out;
    },
    // keys: the n state keys, then the batch's markers (its own, then its parents'); args: clock flag, now, n,
    // then 5 per key. Each part gets its own markers, in its slot: `<marker>:{<tag>}`; a retry splits the same
    // way, so it meets the same. `capMs` caps each part's deadline (deadline.ts).
    async merge(keys, args, capMs) {
      if (c.status !== 'ready') return notReady();
      const n = args[2];
      const parts = splitKeys(keys.slice(0, n), args.slice(3), 5);
      const markers = keys.slice(n);
      const replies = await Promise.all(parts.map((p) => deadline(
        run(syncLua, [...p.keys, ...markers.map((m) => `${m}:{${p.tag}}`)], [args[0], args[1], p.keys.length, ...p.args]),
        Math.min(timeoutMs, capMs), liveOf(p.slot), undefined, capMs)));
      const out = new Array<number>(n * 3);
      parts.forEach((p, k) => p.legs.forEach((leg, i) => {
        for (let a = 0; a < 3; a++) out[leg * 3 + a] = replies[k][i * 3 + a];
      }));
      return out;
    },
    state,
  };
}
