/**
 * The check script's call on one Redis connection, written as one prebuilt request.
 *
 * ioredis builds a command argument by argument: a length string, a `Buffer.byteLength` and a `buf.write`
 * (two calls into C++) per key, then concatenates the pieces: at 64 checks a call that was a quarter of the
 * client's time per strict decision (a `--cpu-prof` of the bench's loop). Here the whole RESP request is
 * written into one Buffer: its small ASCII header and arguments as two strings, each key's bytes copied from
 * what the over-limit cache made once for it (src/store/key-wire.ts), then the packed legs (lua/check.lua's
 * ARGV[4]: 6 little-endian doubles per leg). The request goes through ioredis as a {@link Command} whose bytes
 * are already made, so the client's reply queue, its connection handling and its errors stay ioredis's.
 *
 * Like ioredis's own scripts, the first call on a connection (and every call after a NOSCRIPT: a restart, a
 * failover, SCRIPT FLUSH) is an EVAL with the script's text, which also caches it in Redis; the others are
 * EVALSHA.
 */
import { createHash } from 'node:crypto';
import { Command, type Redis } from 'ioredis';
import { keyWire } from './key-wire.js';

/** Bytes per packed leg: 6 doubles. */
const LEG_BYTES = 48;

/** A command whose request bytes are given (ioredis writes what toWritable returns). */
class RawCommand extends Command {
  constructor(name: string, private readonly bytes: Buffer) {
    super(name, []);
  }

  override toWritable(): Buffer {
    return this.bytes;
  }
}

/** The request's head up to the script's SHA-1: `*argc EVALSHA sha`, ASCII. */
function shaHead(n: number, sha: string): string {
  return `*${n + 7}\r\n$7\r\nevalsha\r\n$40\r\n${sha}\r\n`;
}

/** Whether a Float64Array holds little-endian doubles here (then a call's legs are copied in one piece). */
const LITTLE_ENDIAN = new Uint8Array(new Float64Array([1]).buffer)[7] === 0x3f;

/** The legs of the call being encoded, as doubles (grown as needed; the request copies its bytes). */
let legScratch = new Float64Array(64 * 6);

/**
 * The request `EVALSHA sha n key… flag now n legs`, its keys given as RESP bytes (src/store/key-wire.ts:
 * `$<bytes>\r\n<key>\r\n` each, in order, any number per element; `n` keys in all): `args` holds 6 numbers per
 * leg from `from` (algorithm, L, P, B, cost, group length), one leg per key. The keys are copied, not encoded,
 * and the legs' doubles go in one copy.
 */
export function encodeCheckWire(sha: string, n: number, wire: readonly Uint8Array[], flag: number, now: number, args: ArrayLike<number>, from: number): Buffer {
  const legBytes = n * LEG_BYTES;
  const nStr = String(n), nowStr = String(now), flagStr = String(flag);
  // ASCII only: one byte per character
  const head = `${shaHead(n, sha)}$${nStr.length}\r\n${nStr}\r\n`;
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
  const m = n * 6;
  if (LITTLE_ENDIAN) {
    // a pooled Buffer's offset need not be a multiple of 8: the doubles are made in the scratch, then copied
    if (legScratch.length < m) legScratch = new Float64Array(Math.max(m, 2 * legScratch.length));
    const f = legScratch;
    for (let i = 0; i < m; i++) f[i] = args[from + i];
    buf.set(new Uint8Array(f.buffer, 0, legBytes), o);
    o += legBytes;
  } else {
    for (let i = 0; i < m; i++) o = buf.writeDoubleLE(args[from + i], o);
  }
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
  const from = shaHead(n, sha).length;
  return Buffer.concat([Buffer.from(`*${n + 7}\r\n$4\r\neval\r\n$${Buffer.byteLength(lua)}\r\n${lua}\r\n`), req.subarray(from)]);
}

/**
 * Calls the check script `lua` on `redis` (one server, or the master Sentinel follows): resolves to the
 * script's reply as bytes (one bulk string of packed doubles, src/store/reply.ts), rejects as ioredis does.
 * The request is encoded when called: `args` may be reused once this returns. `wire`, when given, holds
 * `keys` as RESP bytes (src/store/key-wire.ts), copied instead of encoding the keys.
 */
export function checkCaller(redis: Redis, lua: string): (keys: readonly string[], flag: number, now: number, args: ArrayLike<number>, from: number,
  wire?: readonly Uint8Array[]) => Promise<Buffer> {
  const sha = createHash('sha1').update(lua).digest('hex');
  /** The connection (socket) the script was last sent on by EVAL: a new one gets an EVAL first. */
  let loadedOn: unknown = null;
  const send = (req: Buffer, n: number): Promise<Buffer> => {
    const stream = (redis as unknown as { stream?: unknown }).stream;
    const first = stream !== loadedOn;
    if (first) loadedOn = stream;
    const c = first ? new RawCommand('eval', asEval(req, n, sha, lua)) : new RawCommand('evalsha', req);
    void redis.sendCommand(c);
    return c.promise as Promise<Buffer>;
  };
  return (keys, flag, now, args, from, wire) => {
    const req = wire === undefined ? encodeCheck(sha, keys, flag, now, args, from) : encodeCheckWire(sha, keys.length, wire, flag, now, args, from);
    const n = keys.length;
    return send(req, n).catch((e: unknown) => {
      if (!String((e as Error)?.message).includes('NOSCRIPT')) throw e;
      loadedOn = null;
      return send(req, n);
    });
  };
}
