/**
 * The check script's call on one Redis connection, written as one prebuilt request.
 *
 * ioredis builds a command argument by argument: a length string, a `Buffer.byteLength` and a `buf.write`
 * (two calls into C++) per key, then concatenates the pieces: at 64 checks a call that was a quarter of the
 * client's time per strict decision (a `--cpu-prof` of the bench's loop). Here the whole RESP request is
 * written into one Buffer: its small ASCII header and arguments as two strings, each key's bytes copied from
 * what the over-limit cache made once for it (src/store/key-wire.ts), then the packed legs (lua/check.lua's
 * ARGV[4]: 6 little-endian doubles per leg, each run's head marked and its later legs left out:
 * src/store/leg-runs.ts). The request goes
 * through ioredis as a {@link Command} whose bytes are already made, so the client's reply queue, its
 * connection handling and its errors stay ioredis's.
 *
 * The script is called as a Redis Function (FCALL of src/store/scripts.ts checkLibrary): Redis runs a
 * library's code once, at FUNCTION LOAD, where an EVAL chunk makes its helpers and tables on every call (a
 * callgrind count, bench/README.md: ~16 % of the Redis instructions per decision at 21 checks a call). The
 * first call on a connection is preceded by FUNCTION LOAD on it ("already exists": another instance of this
 * version loaded it); a call answered "Function not found" (a restart without persistence, FUNCTION FLUSH) loads
 * it again and is sent once more, unless that load was refused for now (READONLY: a replica; OOM; BUSY...): the
 * call then fails with the load's error, which says Redis is unwell (counted as unavailable, toward the
 * breaker: src/store/failure-kind.ts), as the same error on the FCALL itself would. A Redis that refuses
 * FUNCTION LOAD or FCALL (older than 7.0: unknown command; an ACL without them: NOPERM) is called as before,
 * EVALSHA, with an EVAL first on each connection and after each NOSCRIPT, like ioredis's own scripts; the
 * calls sent with the refused LOAD or FCALL are resent that way. What a failed call does next is
 * src/store/library-way.ts's rule, shared with a Cluster's calls; where and when the library is loaded is this
 * file's, and so is the order: from a failure that asks for a resend until every call written before it is
 * answered or resent, a new call waits (the calls written after the failed one went to the same server and may
 * fail alike; a new call written meanwhile would reach Redis ahead of their resends, a key's later check before
 * its earlier one). A Redis Cluster does the same per hash slot (src/store/cluster-calls.ts).
 */
import { createHash } from 'node:crypto';
import { Command, type Redis } from 'ioredis';
import { keyWire } from './key-wire.js';
import { packLegs } from './leg-runs.js';
import { LibraryWay, type Resend, type SentCall } from './library-way.js';
import { CallGate } from './call-gate.js';
import type { CheckLibrary } from './scripts.js';


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

/**
 * The request `EVALSHA name n key… flag now n legs` (`name` the script's SHA-1; or, `cmd` `fcall`, `FCALL name
 * n key…`, `name` the function's), its keys given as
 * RESP bytes (src/store/key-wire.ts: `$<bytes>\r\n<key>\r\n` each, in order, any number per element; `n` keys
 * in all): `args` holds 6 numbers per leg from `from` (algorithm, L, P, B, cost, group length), one leg per
 * key, packed by src/store/leg-runs.ts packLegs. The keys are copied, not encoded, and the legs' doubles go in
 * one copy.
 */
export function encodeCheckWire(name: string, n: number, wire: readonly Uint8Array[], flag: number, now: number, args: ArrayLike<number>, from: number,
  cmd = 'evalsha'): Buffer {
  // the legs as sent: each run's later legs left out; a view of packLegs's scratch, copied below
  const legs = packLegs(args, from, n);
  const legBytes = legs.length;
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
  buf.set(legs, o);
  o += legBytes;
  buf[o] = 13;
  buf[o + 1] = 10;
  return buf;
}

/** {@link encodeCheckWire} for keys not encoded yet (a call that comes without the over-limit cache's bytes). */
export function encodeCheck(sha: string, keys: readonly string[], flag: number, now: number, args: ArrayLike<number>, from: number): Buffer {
  return encodeCheckWire(sha, keys.length, [keyWire(keys)], flag, now, args, from);
}

/** An {@link encodeCheck} request of `n` keys as EVAL with the script's text instead of its SHA-1. */
export function asEval(req: Buffer, n: number, sha: string, lua: string): Buffer {
  return retarget(req, callHead(n, sha).length, `*${n + 7}\r\n$4\r\neval\r\n$${Buffer.byteLength(lua)}\r\n${lua}\r\n`);
}

/** `req` with its first `headBytes` bytes (the command and the script's name) replaced by `head`. */
function retarget(req: Buffer, headBytes: number, head: string): Buffer {
  return Buffer.concat([Buffer.from(head), req.subarray(headBytes)]);
}

/** A check call as sent on the connection, with the FUNCTION LOAD sent ahead of it (or with it), the latest. */
interface ConnectionCall extends SentCall {
  /** That load's outcome: the error that refused it for now, else undefined. */
  ahead: Promise<unknown>;
}

/**
 * Calls the check script on `redis` (one server, or the master Sentinel follows) as the Function `lib`
 * (FCALL), or as `lua` by EVALSHA where Redis refuses the library (see the file's doc): resolves to the
 * script's reply as bytes (one bulk string of packed doubles, src/store/reply.ts), rejects as ioredis does.
 * The request is encoded when called, but the reply is read by the same `args` (src/store/reply.ts
 * unpackReply rebuilds an admission's remaining and resetAfterMs from its leg's L, P and B): they must stay as
 * they are until it is. `wire`, when given, holds `keys` as RESP bytes (src/store/key-wire.ts), copied instead
 * of encoding the keys. `givenUp`, when given, says whether the caller gave up on the call (its deadline): a
 * call still waiting behind a library reload then is not written, and fails with a StoreGivenUpError (src/store/call-gate.ts).
 */
export function checkCaller(redis: Redis, lua: string, lib?: CheckLibrary): (keys: readonly string[], flag: number, now: number, args: ArrayLike<number>,
  from: number, wire?: readonly Uint8Array[], givenUp?: () => boolean) => Promise<Buffer> {
  const sha = createHash('sha1').update(lua).digest('hex');
  /** The connection (socket) the library was last loaded on (FUNCTION LOAD): a new one loads it first. */
  let loadedOn: unknown = null;
  /** The connection the script was last sent on by EVAL (the EVALSHA way): a new one sends EVAL first. */
  let evalOn: unknown = null;
  /**
   * The last FUNCTION LOAD sent: settles once its answer is read (and the way says whether it took), to the
   * error that refused it for now (READONLY, OOM, BUSY, LOADING...: loadFailure `retry`), else undefined.
   */
  let loading: Promise<unknown> = Promise.resolve(undefined);
  // by FCALL unless the caller has no library (EVALSHA only then)
  const way: LibraryWay<ConnectionCall> = new LibraryWay(lib !== undefined, async (sent) => {
    // the LOAD sent ahead of this call, refused for now: its error is the call's
    const unwell = await sent.ahead;
    // FCALL given up meanwhile: resent by EVALSHA, nothing to load; a resend that found no library again fails
    if (unwell !== undefined || !way.fcall || sent.resent) return unwell;
    // the library is gone from this server (a restart, FUNCTION FLUSH): load it again, once, ahead of the
    // resend. The calls in flight with this one fail alike; the first one answered reloads, a call sent before
    // that load was sent is just resent behind it (its answer comes after the load's, on the one connection)
    if (way.noLoadSince(sent)) loadedOn = null;
    return loading;
  });
  const load = (l: CheckLibrary): void => {
    way.loadBegun();
    loading = redis.call('FUNCTION', 'LOAD', l.text).then(() => undefined, (e: unknown) => {
      if (way.loadFailed(e) !== 'retry') return undefined;
      loadedOn = null;
      return e;
    });
  };
  /** The reply of the last call written on the connection, a first one or a resend (replies come in order). */
  let lastReply: Promise<unknown> = Promise.resolve();
  /** New calls after a failure that asks for a resend wait for the calls written before it (src/store/call-gate.ts). */
  const gate = new CallGate();
  const send = (req: Buffer, n: number, viaFcall: boolean): Promise<Buffer> => {
    const stream = (redis as unknown as { stream?: unknown }).stream;
    let c: RawCommand;
    if (viaFcall) {
      if (stream !== loadedOn) {
        loadedOn = stream;
        load(lib!);
      }
      c = new RawCommand('fcall', req);
    } else if (stream !== evalOn) {
      evalOn = stream;
      c = new RawCommand('eval', asEval(req, n, sha, lua));
    } else {
      c = new RawCommand('evalsha', req);
    }
    void redis.sendCommand(c);
    lastReply = c.promise;
    return c.promise as Promise<Buffer>;
  };
  /** Sends `req` (FCALL when `viaFcall`, else EVALSHA) and answers its failures as the way says. */
  const attempt = (req: Buffer, n: number, viaFcall: boolean, resent: boolean): Promise<Buffer> => {
    const reply = send(req, n, viaFcall);
    // the FUNCTION LOADs sent before this call (or with it, just ahead of it on the connection), the latest
    const sent: ConnectionCall = { fcall: viaFcall, resent, sentAt: way.loads, ahead: loading };
    // resent in the order the calls failed (LibraryWay.resend)
    return reply.catch((e: unknown) => {
      if (LibraryWay.asksResend(e)) gate.close(lastReply, () => way.settled());
      return way.resend(e, sent, (h: Resend): Promise<Buffer> => {
        switch (h) {
          case 'fcall':
            return attempt(req, n, true, true);
          case 'evalsha':
            return attempt(retarget(req, callHead(n, lib!.fn, 'fcall').length, callHead(n, sha)), n, false, false);
          case 'eval':
            // the server lost the script: send() sends it as EVAL again
            evalOn = null;
            return attempt(req, n, false, true);
        }
      });
    });
  };
  const first = (keys: readonly string[], flag: number, now: number, args: ArrayLike<number>, from: number, wire?: readonly Uint8Array[]): Promise<Buffer> => {
    const n = keys.length;
    const viaFcall = way.fcall;
    const name = viaFcall ? lib!.fn : sha, cmd = viaFcall ? 'fcall' : 'evalsha';
    return attempt(encodeCheckWire(name, n, wire ?? [keyWire(keys)], flag, now, args, from, cmd), n, viaFcall, false);
  };
  return (keys, flag, now, args, from, wire, givenUp) => {
    if (gate.open) return first(keys, flag, now, args, from, wire);
    // encoded when it goes out, by the way then in force (args and wire stay as they are until the reply)
    return gate.wait(() => first(keys, flag, now, args, from, wire), givenUp);
  };
}
