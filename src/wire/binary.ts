/**
 * The binary frame format of `/v1/stream`, version 1: one frame carries a batch of checks (client → server) or
 * a batch of answers (server → client). Every number is little-endian; every string is UTF-8 with its length
 * in bytes in front. Numbers that may exceed 2^32 (cost, limit, remaining, times in ms) travel as f64, which
 * holds every integer up to 2^53 − 1 exactly. This module is pure (no I/O) and is shared by the server
 * (`src/server/ws.ts`) and the client (`src/client/ws.ts`).
 *
 * ```
 * frame header (4 bytes)
 *  +--------+--------+-----------------+
 *  | ver u8 | type u8|   count u16     |   ver = 1; type: 1 checks, 2 answers, 3 unsubscribe
 *  +--------+--------+-----------------+
 *
 * check record (type 1), 16 bytes + policy + key
 *  0      4                 12     13      14        16
 *  +------+-----------------+------+-------+---------+-------------+----------+
 *  | id   | cost f64        |flags |polLen | keyLen  | policy      | key      |
 *  | u32  | (integer)       | u8   | u8    | u16     | polLen B    | keyLen B |
 *  +------+-----------------+------+-------+---------+-------------+----------+
 *  flags: bit 0 = subscribe (push a "ready" answer when a denied key becomes admissible); bit 1 = no wait
 *         (onLimit: delay: answer a delayed admission at once, with its delay, instead of when it is due);
 *         others must be 0
 *
 * unsubscribe record (type 3): id u32 (4 bytes)
 *
 * answer record (type 2), 44 bytes + name + field + text
 *  0      4      5      6       8         16          24             32             40     41     42       44
 *  +------+------+------+-------+---------+-----------+--------------+--------------+------+------+--------+------+-------+------+
 *  | id   | kind | flags|status | limit   | remaining | resetAfterMs | retryAfterMs |nameL |fieldL| textL  | name | field | text |
 *  | u32  | u8   | u8   | u16   | f64     | f64       | f64          | f64 (−1=null)| u8   | u8   | u16    |      |       |      |
 *  +------+------+------+-------+---------+-----------+--------------+--------------+------+------+--------+------+-------+------+
 *  kind: 0 denied, 1 allowed, 2 error, 3 ready (subscription push), 4 subscription ended (unsubscribed or failed)
 *  flags: bit 0 no id (an error about a whole frame, id is 0), bit 1 subscribed, bit 2 degraded, bits 3–4 the
 *         degraded decision's rule (1 open, 2 closed, 3 local; 0 from a server before this field: readers
 *         then know only that it was degraded); bit 5 delayed (onLimit: delay: admitted with a wait, whose ms
 *         are in the retryAfterMs place; sent when due, or at once for a check with the no-wait flag).
 *         Readers ignore bits they do not know, so this stays version 1.
 *  decisions and ready: name = the binding limit's name, text = reason (only when retryAfterMs is null)
 *  errors: name = the error code (INVALID_ARGUMENT...), field = the field at fault, text = the detail, status = HTTP status
 *  kind 4: flags bit 1 set when a subscription existed; name/field/text carry an error when it failed
 * ```
 */

/** The only version this module reads and writes. */
export const BINARY_VERSION = 1;
/** Frame types. */
export const FRAME_CHECKS = 1;
export const FRAME_ANSWERS = 2;
export const FRAME_UNSUBSCRIBE = 3;
/** Header bytes of every frame. */
export const FRAME_HEADER = 4;
/** Fixed bytes of a check record, before its policy and key. */
export const CHECK_HEAD = 16;
/** Fixed bytes of an answer record, before its strings. */
export const ANSWER_HEAD = 44;
/** Most records in one frame (count is a u16). */
export const MAX_FRAME_RECORDS = 65_535;

/** Check flags. */
export const CHECK_SUBSCRIBE = 1;
/** onLimit: delay: answer a delayed admission at once (with its delay) rather than when it is due. */
export const CHECK_NO_WAIT = 2;
/** Answer kinds. */
export const KIND_DENIED = 0;
export const KIND_ALLOWED = 1;
export const KIND_ERROR = 2;
export const KIND_READY = 3;
export const KIND_ENDED = 4;
/** Answer flags. */
export const ANSWER_NO_ID = 1;
export const ANSWER_SUBSCRIBED = 2;
export const ANSWER_DEGRADED = 4;
/** An admitted answer with a delay (onLimit: delay): its retryAfterMs field carries delayMs. */
export const ANSWER_DELAYED = 32;
/** Where a degraded answer's rule sits in its flags: (flags >> ANSWER_RULE_SHIFT) & 3 (see degradedCode). */
export const ANSWER_RULE_SHIFT = 3;
/** The degraded rule of each code in bits 3–4 (0: not told). */
export const ANSWER_RULES: readonly ('open' | 'closed' | 'local' | undefined)[] = [undefined, 'open', 'closed', 'local'];

/** A check as the binary codec carries it: a u32 id, a policy, a key (descriptor policies: the joined form). */
export interface BinaryCheck {
  /** Correlation id, an integer in [0, 2^32). */
  id: number;
  policy: string;
  key: string;
  /** Tokens to spend: a non-negative safe integer. */
  cost: number;
  /** Ask for a push when the key, if denied, becomes admissible. */
  subscribe?: boolean;
}

/** One decoded answer record. */
export interface BinaryAnswer {
  id: number;
  kind: number;
  flags: number;
  /** HTTP-like status of an error; 0 otherwise. */
  status: number;
  limit: number;
  remaining: number;
  resetAfterMs: number;
  /** `null` when the check can never be admitted. */
  retryAfterMs: number | null;
  /** Decisions and ready: the binding limit; errors: the error code. */
  name: string;
  /** Errors: the field at fault ('' when none). */
  field: string;
  /** Decisions: the reason of a never-denial; errors: the detail ('' when none). */
  text: string;
}

const UTF8_FATAL = new TextDecoder('utf-8', { fatal: true });
const UTF8_ENCODER = new TextEncoder();

/** A string from `len` bytes at `at`: ASCII without a decoder call; anything else must be well-formed UTF-8. */
export function readUtf8(bytes: Uint8Array, at: number, len: number): string | null {
  let ascii = true;
  for (let i = at, end = at + len; i < end; i++) {
    if (bytes[i] > 0x7f) {
      ascii = false;
      break;
    }
  }
  if (ascii) {
    // Short strings: fromCharCode beats a decoder call; long ones take latin1 (== ASCII here) from Buffer.
    if (len <= 32) {
      let s = '';
      for (let i = at, end = at + len; i < end; i++) s += String.fromCharCode(bytes[i]);
      return s;
    }
    return Buffer.from(bytes.buffer, bytes.byteOffset + at, len).toString('latin1');
  }
  try {
    return UTF8_FATAL.decode(bytes.subarray(at, at + len));
  } catch {
    return null;
  }
}

/** The outcome of reading a frame's header: its type and record count, or why it is not a frame. */
export type FrameHeader =
  | { ok: true; type: number; count: number }
  | { ok: false; violation: 'short' | 'version' | 'type' };

/** Reads a frame header (does not look at the records). */
export function readHeader(bytes: Uint8Array): FrameHeader {
  if (bytes.byteLength < FRAME_HEADER) return { ok: false, violation: 'short' };
  if (bytes[0] !== BINARY_VERSION) return { ok: false, violation: 'version' };
  const type = bytes[1];
  if (type !== FRAME_CHECKS && type !== FRAME_ANSWERS && type !== FRAME_UNSUBSCRIBE) return { ok: false, violation: 'type' };
  return { ok: true, type, count: bytes[2] | (bytes[3] << 8) };
}

/** What {@link readChecks} calls per record. `policy` or `key` is null when its bytes are not well-formed UTF-8. */
export type CheckSink = (id: number, policy: string | null, key: string | null, cost: number, flags: number) => void;

/**
 * Reads the check records of a type-1 frame into `sink`, in order. The structure is checked before any record
 * is handed over: on a truncated record, trailing bytes or a count of 0 it returns the reason and calls
 * `sink` for none. Field values (a bad cost, unknown flags, bad UTF-8) are the caller's to judge per record.
 * @returns null when every record was read, else what is wrong with the frame.
 */
export function readChecks(bytes: Uint8Array, count: number, sink: CheckSink): string | null {
  const bad = checkStructure(bytes, count);
  if (bad !== null) return bad;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = FRAME_HEADER;
  for (let i = 0; i < count; i++) {
    const id = view.getUint32(at, true);
    const cost = view.getFloat64(at + 4, true);
    const flags = bytes[at + 12];
    const pl = bytes[at + 13];
    const kl = view.getUint16(at + 14, true);
    const p = at + CHECK_HEAD;
    sink(id, readUtf8(bytes, p, pl), readUtf8(bytes, p + pl, kl), cost, flags);
    at = p + pl + kl;
  }
  return null;
}

/**
 * What is wrong with the structure of a type-1 frame of `count` records (truncated, trailing bytes, count 0),
 * or null: the records add up to the frame.
 */
function checkStructure(bytes: Uint8Array, count: number): string | null {
  if (count === 0) return 'count is 0 (a checks frame holds at least one check)';
  const n = bytes.byteLength;
  let at = FRAME_HEADER;
  for (let i = 0; i < count; i++) {
    if (at + CHECK_HEAD > n) return `record ${i}: truncated (frame ends at byte ${n})`;
    const len = bytes[at + 13] + (bytes[at + 14] | (bytes[at + 15] << 8));
    at += CHECK_HEAD + len;
    if (at > n) return `record ${i}: policy and key run past the end of the frame (byte ${n})`;
  }
  if (at !== n) return `${n - at} bytes after the last of ${count} records`;
  return null;
}

/**
 * Checks decoded as columns: check i is (ids[i], policies[i], key i, costs[i], flags[i]). Key i is keyLen[i]
 * bytes of well-formed UTF-8 at keyAt[i] in the caller's copy of the frame; keys[i] holds it as a string when
 * one was made (a key that is not ASCII is decoded to check it), else null.
 */
export interface CheckColumns {
  readonly capacity: number;
  readonly ids: Uint32Array;
  readonly costs: Float64Array;
  readonly flags: Uint8Array;
  readonly policies: string[];
  readonly keys: Array<string | null>;
  readonly keyAt: Int32Array;
  readonly keyLen: Uint16Array;
}

/** What {@link readCheckColumns} calls for a record it cannot hand over: its id, the field at fault and why. */
export type RecordFault = (id: number, field: 'flags' | 'policy' | 'key', detail: string) => void;

/**
 * Reads the check records of a type-1 frame into columns, from index `at` on, with no object and (for ASCII
 * keys) no string per record: the structure is checked first, as {@link readChecks} does (a malformed frame
 * appends nothing and faults nothing). A record with unknown flag bits, or a policy or key that is not
 * well-formed UTF-8, goes to `fault` instead (in that order of precedence). A policy repeated from the record
 * before is decoded once: records of one policy share one string. Keys are located at `base` + their offset
 * in the frame: where the caller keeps a copy of it. `cols` must have room for `count` more records.
 * @returns how many records were appended, or what is wrong with the frame.
 */
export function readCheckColumns(bytes: Uint8Array, count: number, cols: CheckColumns, at: number, base: number,
  fault: RecordFault): number | string {
  const bad = checkStructure(bytes, count);
  if (bad !== null) return bad;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const { ids, costs, flags: flagCol, policies, keys, keyAt, keyLen } = cols;
  let k = at;
  let p = FRAME_HEADER;
  let lastAt = -1, lastLen = -1;
  let lastPolicy: string | null = null;
  for (let i = 0; i < count; i++) {
    const id = bytes[p] | (bytes[p + 1] << 8) | (bytes[p + 2] << 16) | (bytes[p + 3] << 24);
    const flags = bytes[p + 12];
    const pl = bytes[p + 13];
    const kl = bytes[p + 14] | (bytes[p + 15] << 8);
    const s = p + CHECK_HEAD;
    const cost = view.getFloat64(p + 4, true);
    p = s + pl + kl;
    let policy: string | null;
    if (pl === lastLen && sameBytes(bytes, s, lastAt, pl)) policy = lastPolicy;
    else {
      policy = readUtf8(bytes, s, pl);
      lastAt = s;
      lastLen = pl;
      lastPolicy = policy;
    }
    if ((flags & ~(CHECK_SUBSCRIBE | CHECK_NO_WAIT)) !== 0) {
      fault(id >>> 0, 'flags', `unknown bits set (got ${flags})`);
      continue;
    }
    if (policy === null) {
      fault(id >>> 0, 'policy', 'is not well-formed UTF-8');
      continue;
    }
    const ks = s + pl;
    let key: string | null = null;
    if (!isAscii(bytes, ks, kl)) {
      key = readUtf8(bytes, ks, kl);
      if (key === null) {
        fault(id >>> 0, 'key', 'is not well-formed UTF-8');
        continue;
      }
    }
    ids[k] = id >>> 0;
    costs[k] = cost;
    flagCol[k] = flags;
    policies[k] = policy;
    keys[k] = key;
    keyAt[k] = base + ks;
    keyLen[k] = kl;
    k++;
  }
  return k - at;
}

function isAscii(b: Uint8Array, at: number, len: number): boolean {
  for (let i = at, end = at + len; i < end; i++) if (b[i] > 0x7f) return false;
  return true;
}

function sameBytes(b: Uint8Array, x: number, y: number, len: number): boolean {
  for (let i = 0; i < len; i++) if (b[x + i] !== b[y + i]) return false;
  return true;
}

/**
 * Reads the ids of a type-3 (unsubscribe) frame.
 * @returns the ids, or what is wrong with the frame.
 */
export function readUnsubscribe(bytes: Uint8Array, count: number): number[] | string {
  if (count === 0) return 'count is 0 (an unsubscribe frame holds at least one id)';
  if (bytes.byteLength !== FRAME_HEADER + 4 * count) {
    return `${count} ids take ${FRAME_HEADER + 4 * count} bytes (got ${bytes.byteLength})`;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const ids: number[] = [];
  for (let i = 0; i < count; i++) ids.push(view.getUint32(FRAME_HEADER + 4 * i, true));
  return ids;
}

/**
 * A growable writer of frames: records are appended to one buffer, and {@link FrameWriter.finish} returns the
 * frame and starts the next one in the same memory. Not reentrant; one per connection.
 */
export class FrameWriter {
  private buf: Uint8Array;
  private view: DataView;
  private at = FRAME_HEADER;
  private n = 0;
  private readonly type: number;

  constructor(type: number, initialBytes = 4096) {
    this.type = type;
    this.buf = new Uint8Array(initialBytes);
    this.view = new DataView(this.buf.buffer);
  }

  /** Records written since the last finish(). */
  get count(): number {
    return this.n;
  }

  /** Bytes written since the last finish(), header included. */
  get byteLength(): number {
    return this.at;
  }

  private room(extra: number): void {
    if (this.at + extra <= this.buf.byteLength) return;
    let size = this.buf.byteLength * 2;
    while (size < this.at + extra) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  /** Writes a string's UTF-8 at `at` (room already made for its byte length). */
  private str(s: string, at: number): number {
    let ascii = true;
    for (let i = 0; i < s.length; i++) {
      if (s.charCodeAt(i) > 0x7f) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      for (let i = 0; i < s.length; i++) this.buf[at + i] = s.charCodeAt(i);
      return s.length;
    }
    return UTF8_ENCODER.encodeInto(s, this.buf.subarray(at)).written;
  }

  /**
   * Appends a check record.
   * @throws RangeError when the policy is over 255 bytes or the key over 65,535 bytes of UTF-8, or the id is not a u32.
   */
  check(id: number, policy: string, key: string, cost: number, flags: number): void {
    if (!(id >= 0 && id <= 0xffffffff && Number.isInteger(id))) throw new RangeError(`id: must be an integer in [0, 2^32) (got ${id})`);
    const pb = utf8Length(policy), kb = utf8Length(key);
    if (pb > 255) throw new RangeError('policy: longer than 255 bytes of UTF-8');
    if (kb > 65_535) throw new RangeError('key: longer than 65,535 bytes of UTF-8');
    this.room(CHECK_HEAD + pb + kb);
    const at = this.at;
    const v = this.view;
    v.setUint32(at, id, true);
    v.setFloat64(at + 4, cost, true);
    this.buf[at + 12] = flags;
    this.buf[at + 13] = pb;
    v.setUint16(at + 14, kb, true);
    this.str(policy, at + CHECK_HEAD);
    this.str(key, at + CHECK_HEAD + pb);
    this.at = at + CHECK_HEAD + pb + kb;
    this.n++;
  }

  /** Appends an unsubscribe record. */
  unsubscribe(id: number): void {
    this.room(4);
    this.view.setUint32(this.at, id >>> 0, true);
    this.at += 4;
    this.n++;
  }

  /**
   * Appends an answer record. `name` and `field` are cut to 255 bytes and `text` to 65,535 (they are ASCII
   * names and messages in practice).
   */
  answer(id: number, kind: number, flags: number, status: number, limit: number, remaining: number,
    resetAfterMs: number, retryAfterMs: number | null, name: string, field: string, text: string): void {
    const nb = Math.min(utf8Length(name), 255), fb = Math.min(utf8Length(field), 255), tb = Math.min(utf8Length(text), 65_535);
    this.room(ANSWER_HEAD + nb + fb + tb);
    const at = this.at;
    const v = this.view;
    v.setUint32(at, id >>> 0, true);
    this.buf[at + 4] = kind;
    this.buf[at + 5] = flags;
    v.setUint16(at + 6, status, true);
    v.setFloat64(at + 8, limit, true);
    v.setFloat64(at + 16, remaining, true);
    v.setFloat64(at + 24, resetAfterMs, true);
    v.setFloat64(at + 32, retryAfterMs === null ? -1 : retryAfterMs, true);
    let p = at + ANSWER_HEAD;
    const wn = this.strCut(name, p, nb);
    const wf = this.strCut(field, p + wn, fb);
    const wt = this.strCut(text, p + wn + wf, tb);
    this.buf[at + 40] = wn;
    this.buf[at + 41] = wf;
    v.setUint16(at + 42, wt, true);
    p += wn + wf + wt;
    this.at = p;
    this.n++;
  }

  /** The last name {@link decision} encoded, and its bytes (cut to 255). */
  private lastName: string | null = null;
  private lastNameBytes: Uint8Array = new Uint8Array(0);

  /**
   * Appends a decision answer (kind KIND_DENIED or KIND_ALLOWED: no status, no field), as {@link answer}
   * does; a `name` equal to the previous call's is copied from its encoded bytes.
   */
  decision(id: number, kind: number, flags: number, limit: number, remaining: number, resetAfterMs: number,
    retryAfterMs: number | null, name: string, text: string): void {
    if (name !== this.lastName) {
      const bytes = new Uint8Array(Math.min(utf8Length(name), 255));
      // whole characters only, as answer() cuts
      const written = bytes.byteLength === 0 ? 0 : UTF8_ENCODER.encodeInto(name, bytes).written;
      this.lastName = name;
      this.lastNameBytes = bytes.subarray(0, written);
    }
    const nameBytes = this.lastNameBytes;
    const nb = nameBytes.byteLength;
    const tb = text.length === 0 ? 0 : Math.min(utf8Length(text), 65_535);
    this.room(ANSWER_HEAD + nb + tb);
    const at = this.at;
    const v = this.view;
    const b = this.buf;
    v.setUint32(at, id >>> 0, true);
    b[at + 4] = kind;
    b[at + 5] = flags;
    b[at + 6] = 0;
    b[at + 7] = 0;
    v.setFloat64(at + 8, limit, true);
    v.setFloat64(at + 16, remaining, true);
    v.setFloat64(at + 24, resetAfterMs, true);
    v.setFloat64(at + 32, retryAfterMs === null ? -1 : retryAfterMs, true);
    const p = at + ANSWER_HEAD;
    for (let i = 0; i < nb; i++) b[p + i] = nameBytes[i];
    const wt = tb === 0 ? 0 : this.strCut(text, p + nb, tb);
    b[at + 40] = nb;
    b[at + 41] = 0;
    v.setUint16(at + 42, wt, true);
    this.at = p + nb + wt;
    this.n++;
  }

  /** Writes at most `max` bytes of `s` (whole characters) and returns how many were written. */
  private strCut(s: string, at: number, max: number): number {
    if (max === 0) return 0;
    if (utf8Length(s) <= max) return this.str(s, at);
    return UTF8_ENCODER.encodeInto(s, this.buf.subarray(at, at + max)).written;
  }

  /**
   * Finishes the frame: writes the header and returns a copy of it (the writer's memory is reused for the next
   * frame). Returns null when no record was written.
   * @throws RangeError when more than 65,535 records were written.
   */
  finish(): Uint8Array | null {
    const view = this.finishView();
    return view === null ? null : view.slice();
  }

  /**
   * Like {@link finish}, but returns a view of the writer's own memory, valid only until the next record is
   * written: for handing to a sender that copies (uWS `send` does).
   */
  finishView(): Uint8Array | null {
    if (this.n === 0) return null;
    if (this.n > MAX_FRAME_RECORDS) throw new RangeError(`a frame holds at most ${MAX_FRAME_RECORDS} records (got ${this.n})`);
    this.buf[0] = BINARY_VERSION;
    this.buf[1] = this.type;
    this.buf[2] = this.n & 0xff;
    this.buf[3] = this.n >>> 8;
    const out = this.buf.subarray(0, this.at);
    this.at = FRAME_HEADER;
    this.n = 0;
    return out;
  }
}

/** The UTF-8 byte length of a string, without encoding it. */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a surrogate pair: 4 bytes for 2 units
      i++;
    } else n += 2; // 3 bytes (a lone surrogate becomes U+FFFD, also 3)
  }
  return n;
}

/**
 * Reads a type-2 (answers) frame record by record without an object per record: `reset(frame)` checks the
 * structure, then each `next()` loads one record into the reader's fields. Names repeated from one record to the
 * next (the binding limit, usually) are decoded once. One reader per connection; not reentrant.
 */
export class AnswerReader {
  id = 0;
  kind = 0;
  flags = 0;
  status = 0;
  limit = 0;
  remaining = 0;
  resetAfterMs = 0;
  /** `null` when the check can never be admitted. */
  retryAfterMs: number | null = 0;
  name = '';
  field = '';
  text = '';
  private bytes: Uint8Array = new Uint8Array(0);
  private view: DataView = new DataView(new ArrayBuffer(0));
  private at = 0;
  private left = 0;
  private lastName: Uint8Array = new Uint8Array(0);

  /**
   * Starts on a frame.
   * @returns null when the frame is a well-formed answers frame, else what is wrong with it (no record is read).
   */
  reset(bytes: Uint8Array): string | null {
    const h = readHeader(bytes);
    if (!h.ok) return `frame: bad header (${h.violation})`;
    if (h.type !== FRAME_ANSWERS) return `frame: type ${h.type} is not an answers frame`;
    const n = bytes.byteLength;
    let at = FRAME_HEADER;
    for (let i = 0; i < h.count; i++) {
      if (at + ANSWER_HEAD > n) return `record ${i}: truncated`;
      at += ANSWER_HEAD + bytes[at + 40] + bytes[at + 41] + (bytes[at + 42] | (bytes[at + 43] << 8));
      if (at > n) return `record ${i}: strings run past the end`;
    }
    if (at !== n) return `frame: ${n - at} bytes after the last record`;
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, n);
    this.at = FRAME_HEADER;
    this.left = h.count;
    return null;
  }

  /** Loads the next record; false when there is none. */
  next(): boolean {
    if (this.left === 0) return false;
    this.left--;
    const b = this.bytes, v = this.view, at = this.at;
    this.id = v.getUint32(at, true);
    this.kind = b[at + 4];
    this.flags = b[at + 5];
    this.status = v.getUint16(at + 6, true);
    this.limit = v.getFloat64(at + 8, true);
    this.remaining = v.getFloat64(at + 16, true);
    this.resetAfterMs = v.getFloat64(at + 24, true);
    const retry = v.getFloat64(at + 32, true);
    this.retryAfterMs = retry < 0 ? null : retry;
    const nl = b[at + 40], fl = b[at + 41], tl = v.getUint16(at + 42, true);
    const p = at + ANSWER_HEAD;
    this.name = this.nameAt(p, nl);
    this.field = fl === 0 ? '' : readUtf8(b, p + nl, fl) ?? '';
    this.text = tl === 0 ? '' : readUtf8(b, p + nl + fl, tl) ?? '';
    this.at = p + nl + fl + tl;
    return true;
  }

  private nameAt(p: number, len: number): string {
    const last = this.lastName;
    if (last.byteLength === len) {
      let same = true;
      for (let i = 0; i < len; i++) {
        if (this.bytes[p + i] !== last[i]) {
          same = false;
          break;
        }
      }
      if (same) return this.name;
    }
    this.lastName = this.bytes.slice(p, p + len);
    return readUtf8(this.bytes, p, len) ?? '';
  }
}

/**
 * Decodes a type-2 (answers) frame.
 * @returns the answers in order, or what is wrong with the frame.
 */
export function readAnswers(bytes: Uint8Array): BinaryAnswer[] | string {
  const r = new AnswerReader();
  const bad = r.reset(bytes);
  if (bad !== null) return bad;
  const out: BinaryAnswer[] = [];
  while (r.next()) {
    out.push({
      id: r.id, kind: r.kind, flags: r.flags, status: r.status, limit: r.limit, remaining: r.remaining,
      resetAfterMs: r.resetAfterMs, retryAfterMs: r.retryAfterMs, name: r.name, field: r.field, text: r.text,
    });
  }
  return out;
}
