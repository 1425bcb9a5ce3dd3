/**
 * The check script's call on one Redis connection, written as one prebuilt request.
 *
 * ioredis builds a command argument by argument: a length string, a `Buffer.byteLength` and a `buf.write`
 * (two calls into C++) per key, then concatenates the pieces: at 64 checks a call that was a quarter of the
 * client's time per strict decision (a `--cpu-prof` of the bench's loop). Here the whole RESP request is
 * written into one Buffer: its small ASCII header and arguments as two strings, each key's bytes copied from
 * what the over-limit cache made once for it (src/store/key-wire.ts), then the packed legs (lua/check.lua's
 * ARGV[4]: 6 little-endian doubles per leg, a check of one leg on a key no other leg names marked
 * {@link UNIQUE_KEY}). The request goes through ioredis as a {@link Command} whose bytes
 * are already made, so the client's reply queue, its connection handling and its errors stay ioredis's.
 *
 * The script is called as a Redis Function (FCALL of src/store/scripts.ts checkLibrary): Redis runs a
 * library's code once, at FUNCTION LOAD, where an EVAL chunk makes its helpers and tables on every call (a
 * callgrind count, bench/README.md: ~16 % of the Redis instructions per decision at 21 checks a call). The
 * first call on a connection is preceded by FUNCTION LOAD on it ("already exists": another instance of this
 * version loaded it); a call answered "Function not found" (a restart without persistence, FUNCTION FLUSH) loads
 * it again and is sent once more. A Redis that refuses FUNCTION LOAD (older than 7.0, an ACL without it) is
 * called as before, EVALSHA, with an EVAL first on each connection and after each NOSCRIPT, like ioredis's own
 * scripts.
 */
import { createHash } from 'node:crypto';
import { Command, type Redis } from 'ioredis';
import { keyWire } from './key-wire.js';
import { functionMissing, loadFailure, scriptMissing, type CheckLibrary } from './scripts.js';

/** Bytes per packed leg: 6 doubles. */
const LEG_BYTES = 48;

/**
 * Added to the algorithm number (a leg's first) of a check of one leg whose key no other leg of the call
 * names (lua/check.lua UNIQUE): Redis then decides it without the bookkeeping that lets later legs of the
 * call see a key's new state, and queues its write as it goes (~1.9 k of ~31 k Redis instructions per
 * decision, a callgrind count: bench/README.md).
 */
export const UNIQUE_KEY = 16;

/** The script's 6th leg number: group length + maxDelayMs · this (src/engine/delay.ts SCRIPT_DELAY_SHIFT). */
const GROUP_SPAN = 65536;

/** legDoubles' scratch: each key of the call being encoded, at its first leg (−1: named by several). */
const firstLeg = new Map<string, number>();

/**
 * Copies the `keys.length` legs of `args` from `from` (6 numbers each: algorithm, L, P, B, cost, group
 * length) into `f`, each check of one leg whose key no other leg names marked {@link UNIQUE_KEY}.
 */
export function legDoubles(keys: readonly string[], args: ArrayLike<number>, from: number, f: Float64Array): void {
  const n = keys.length;
  for (let i = 0; i < 6 * n; i++) f[i] = args[from + i];
  const seen = firstLeg;
  for (let i = 0; i < n; i++) {
    const k = keys[i];
    const at = seen.get(k);
    if (at === undefined) {
      seen.set(k, i);
      if (f[6 * i + 5] % GROUP_SPAN === 1) f[6 * i] += UNIQUE_KEY;
    } else if (at >= 0) {
      if (f[6 * at] >= UNIQUE_KEY) f[6 * at] -= UNIQUE_KEY;
      seen.set(k, -1);
    }
  }
  seen.clear();
}

/** A command whose request bytes are given (ioredis writes what toWritable returns). */
class RawCommand extends Command {
  constructor(name: string, private readonly bytes: Buffer) {
    super(name, []);
  }

  override toWritable(): Buffer {
    return this.bytes;
  }
}

/**
 * The request's head up to the script's name: `*argc EVALSHA sha` (`name` 40 hex digits), or `*argc FCALL name`
 * when `cmd` is `fcall`; ASCII.
 */
function callHead(n: number, name: string, cmd = 'evalsha'): string {
  return `*${n + 7}\r\n$${cmd.length}\r\n${cmd}\r\n$${name.length}\r\n${name}\r\n`;
}

/** Whether a Float64Array holds little-endian doubles here (then a call's legs are copied in one piece). */
const LITTLE_ENDIAN = new Uint8Array(new Float64Array([1]).buffer)[7] === 0x3f;

/** The legs of the call being encoded, as doubles (grown as needed; the request copies its bytes). */
let legScratch = new Float64Array(64 * 6);

/** {@link legDoubles} into the scratch, grown to hold them. */
function scratchLegs(keys: readonly string[], args: ArrayLike<number>, from: number): Float64Array {
  const m = keys.length * 6;
  if (legScratch.length < m) legScratch = new Float64Array(Math.max(m, 2 * legScratch.length));
  legDoubles(keys, args, from, legScratch);
  return legScratch;
}

/** lua/check.lua's ARGV[4] for `keys` and their legs in `args` from `from` ({@link legDoubles}), as a new Buffer. */
export function packLegs(keys: readonly string[], args: ArrayLike<number>, from: number): Buffer {
  const f = scratchLegs(keys, args, from);
  const b = Buffer.allocUnsafe(keys.length * LEG_BYTES);
  for (let i = 0; i < keys.length * 6; i++) b.writeDoubleLE(f[i], i * 8);
  return b;
}

/**
 * The request `EVALSHA name n key… flag now n legs` (`name` the script's SHA-1; or, `cmd` `fcall`, `FCALL name
 * n key…`, `name` the function's) for `keys`, given as
 * RESP bytes in `wire` (src/store/key-wire.ts: `$<bytes>\r\n<key>\r\n` each, in order, any number per element):
 * `args` holds 6 numbers per leg from `from` (algorithm, L, P, B, cost, group length), one leg per key, sent
 * as {@link legDoubles} makes them. The keys are copied, not encoded, and the legs' doubles go in one copy.
 */
export function encodeCheckWire(name: string, keys: readonly string[], wire: readonly Uint8Array[], flag: number, now: number, args: ArrayLike<number>,
  from: number, cmd = 'evalsha'): Buffer {
  const n = keys.length;
  const legBytes = n * LEG_BYTES;
  const nStr = String(n), nowStr = String(now), flagStr = String(flag);
  // ASCII only: one byte per character
  const head = `${callHead(n, name, cmd)}$${nStr.length}\r\n${nStr}\r\n`;
  const tail = `$${flagStr.length}\r\n${flagStr}\r\n$${nowStr.length}\r\n${nowStr}\r\n$${nStr.length}\r\n${nStr}\r\n$${legBytes}\r\n`;
  let keyBytes = 0;
  for (let i = 0; i < wire.length; i++) keyBytes += wire[i].length;
  const buf = Buffer.allocUnsafe(head.length + keyBytes + tail.length + legBytes + 2);
  let o = buf.write(head, 0, 'latin1');
  for (let i = 0; i < wire.length; i++) {
    buf.set(wire[i], o);
    o += wire[i].length;
  }
  o += buf.write(tail, o, 'latin1');
  // a pooled Buffer's offset need not be a multiple of 8: the doubles are made in the scratch, then copied
  const f = scratchLegs(keys, args, from);
  if (LITTLE_ENDIAN) {
    buf.set(new Uint8Array(f.buffer, 0, legBytes), o);
    o += legBytes;
  } else {
    for (let i = 0; i < n * 6; i++) o = buf.writeDoubleLE(f[i], o);
  }
  buf[o] = 13;
  buf[o + 1] = 10;
  return buf;
}

/** {@link encodeCheckWire} for keys not encoded yet (a call that comes without the over-limit cache's bytes). */
export function encodeCheck(sha: string, keys: readonly string[], flag: number, now: number, args: ArrayLike<number>, from: number): Buffer {
  return encodeCheckWire(sha, keys, [keyWire(keys)], flag, now, args, from);
}

/** An {@link encodeCheck} request of `n` keys as EVAL with the script's text instead of its SHA-1. */
export function asEval(req: Buffer, n: number, sha: string, lua: string): Buffer {
  return retarget(req, callHead(n, sha).length, `*${n + 7}\r\n$4\r\neval\r\n$${Buffer.byteLength(lua)}\r\n${lua}\r\n`);
}

/** `req` with its first `headBytes` bytes (the command and the script's name) replaced by `head`. */
function retarget(req: Buffer, headBytes: number, head: string): Buffer {
  return Buffer.concat([Buffer.from(head), req.subarray(headBytes)]);
}

/**
 * Calls the check script on `redis` (one server, or the master Sentinel follows) as the Function `lib`
 * (FCALL), or as `lua` by EVALSHA where Redis refuses the library (see the file's doc): resolves to the
 * script's reply as bytes (one bulk string of packed doubles, src/store/reply.ts), rejects as ioredis does.
 * The request is encoded when called: `args` may be reused once this returns. `wire`, when given, holds
 * `keys` as RESP bytes (src/store/key-wire.ts), copied instead of encoding the keys.
 */
export function checkCaller(redis: Redis, lua: string, lib?: CheckLibrary): (keys: readonly string[], flag: number, now: number, args: ArrayLike<number>,
  from: number, wire?: readonly Uint8Array[]) => Promise<Buffer> {
  const sha = createHash('sha1').update(lua).digest('hex');
  /** FCALL until Redis refuses FUNCTION LOAD; then EVALSHA for good. */
  let fcall = lib !== undefined;
  /** The connection (socket) the script was last loaded on (FUNCTION LOAD, or EVAL): a new one loads it first. */
  let loadedOn: unknown = null;
  /** The last FUNCTION LOAD sent: settles once its answer is read (and `fcall` says whether it took). */
  let loading: Promise<void> = Promise.resolve();
  /** FUNCTION LOADs sent so far: a call sent before the latest one is resent without loading again. */
  let loads = 0;
  const load = (l: CheckLibrary): void => {
    loads++;
    loading = redis.call('FUNCTION', 'LOAD', l.text).then(() => undefined, (e: unknown) => {
      const outcome = loadFailure(e);
      if (outcome === 'loaded') return;
      if (outcome === 'refused') fcall = false;
      loadedOn = null;
    });
  };
  const send = (req: Buffer, n: number, viaFcall: boolean): Promise<Buffer> => {
    const stream = (redis as unknown as { stream?: unknown }).stream;
    const first = stream !== loadedOn;
    if (first) loadedOn = stream;
    let c: RawCommand;
    if (viaFcall) {
      if (first) load(lib!);
      c = new RawCommand('fcall', req);
    } else {
      c = first ? new RawCommand('eval', asEval(req, n, sha, lua)) : new RawCommand('evalsha', req);
    }
    void redis.sendCommand(c);
    return c.promise as Promise<Buffer>;
  };
  return (keys, flag, now, args, from, wire) => {
    const n = keys.length;
    const viaFcall = fcall;
    const name = viaFcall ? lib!.fn : sha, cmd = viaFcall ? 'fcall' : 'evalsha';
    const req = encodeCheckWire(name, keys, wire ?? [keyWire(keys)], flag, now, args, from, cmd);
    const sent = send(req, n, viaFcall);
    // the FUNCTION LOADs sent before this call (or with it, just ahead of it on the connection)
    const sentAt = loads;
    return sent.catch(async (e: unknown) => {
      if (viaFcall ? !functionMissing(e) : !scriptMissing(e)) throw e;
      // the library (or the script's cache) is gone from this server: load it again, once. The calls in
      // flight with this one fail alike; the first one answered reloads, a call sent before that load was
      // sent is just resent behind it (its answer comes after the load's, on the one connection)
      if (viaFcall) {
        if (sentAt === loads) loadedOn = null;
        await loading;
      } else {
        loadedOn = null;
      }
      if (viaFcall && !fcall) return send(retarget(req, callHead(n, name, cmd).length, callHead(n, sha)), n, false);
      return send(req, n, viaFcall);
    });
  };
}
