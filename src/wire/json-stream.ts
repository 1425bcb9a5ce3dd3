/**
 * `/v1/stream` JSON frames without JSON.parse or a string per answer: a reader that writes a frame of plain
 * checks (`{id, policy, key, cost?}` objects, or an array of them) straight into columns, as binary frames
 * are read (src/wire/binary-read.ts readCheckColumns), and a writer that builds a connection's JSON answers into
 * one UTF-8 buffer, sent as one text frame.
 *
 * The reader is exact by refusing: it takes only the plain form, where what JSON.parse would give is plain
 * (strings without escapes, integers of at most 15 digits, only the fields `id`, `policy`, `key` and `cost`,
 * each once, `id`, `policy` and `key` present), and gives up on the whole frame at anything else (an
 * escape, a float, another field, a nested value, bad JSON...). The caller then reads that frame the general
 * way (JSON.parse, item by item), so every error, and every answer to input off the plain form, is what it
 * was. Only a frame the reader took is decided through the columns.
 */
import type { Decision } from '../types/decision.js';
import { decisionJson } from './codec.js';
import { grown } from './grow.js';

/** Where a frame's plain checks go: check i's id is idLen[i] bytes of JSON text at idAt[i] in `bytes`. */
export interface JsonCheckColumns {
  readonly capacity: number;
  readonly idAt: Int32Array;
  readonly idLen: Uint16Array;
  readonly policies: string[];
  readonly costs: Float64Array;
  /** The key as a string once made (null until then). */
  readonly keys: Array<string | null>;
  readonly keyAt: Int32Array;
  readonly keyLen: Int32Array;
}

/** The shortest plain check, `{"id":0,"policy":"","key":""}`, and the comma after it. */
const MIN_ITEM_BYTES = 30;

/** An upper bound of the checks in a frame of `bytes` bytes, were it all plain checks. */
export function maxPlainChecks(bytes: number): number {
  return Math.floor((bytes + 1) / MIN_ITEM_BYTES) + 1;
}

const QUOTE = 0x22, BACKSLASH = 0x5c, COMMA = 0x2c, COLON = 0x3a;
const OPEN_ARRAY = 0x5b, CLOSE_ARRAY = 0x5d, OPEN_OBJECT = 0x7b, CLOSE_OBJECT = 0x7d;
const FIELD_ID = 1, FIELD_POLICY = 2, FIELD_KEY = 4, FIELD_COST = 8;
/** Most characters of a string id (the stream's rule; checked the general way beyond). */
const MAX_ID_CHARS = 256;
/** Digits of the longest integer read here (below 2^53: a safe integer, printed as written). */
const MAX_DIGITS = 15;

const DECODER = new TextDecoder('utf-8');

/**
 * Reads a frame of plain checks: bytes [from, to) of `b` (well-formed UTF-8: uWS refuses text frames that
 * are not) into `cols` from index `at` on, at most `max` checks. Positions in the columns are positions in `b`.
 * @returns how many checks were read, or −1 when the frame is not all plain checks (nothing is to be used then).
 */
export function readPlainChecks(b: Uint8Array, from: number, to: number, cols: JsonCheckColumns, at: number, max: number): number {
  const r = new PlainReader(b, to, cols);
  let p = r.ws(from);
  if (p >= to) return -1;
  if (b[p] === OPEN_OBJECT) {
    if (max < 1 || at >= cols.capacity) return -1;
    p = r.check(p, at);
    if (p < 0 || r.ws(p) !== to) return -1;
    return 1;
  }
  if (b[p] !== OPEN_ARRAY) return -1;
  let n = 0;
  p = r.ws(p + 1);
  for (;;) {
    if (p >= to || b[p] !== OPEN_OBJECT || n >= max || at + n >= cols.capacity) return -1;
    p = r.check(p, at + n);
    if (p < 0) return -1;
    n++;
    p = r.ws(p);
    if (p >= to) return -1;
    if (b[p] === COMMA) {
      p = r.ws(p + 1);
      continue;
    }
    if (b[p] !== CLOSE_ARRAY) return -1;
    return r.ws(p + 1) === to ? n : -1;
  }
}

/** The reader's state over one frame: a class, so the hot loop reads fields instead of a closure's. */
class PlainReader {
  /** The last policy name read and its bytes, so that a frame of one policy makes its string once. */
  private static lastPolicy = '';
  private static lastPolicyBytes = new Uint8Array(0);
  /** The number the last number() read. */
  private num = 0;

  constructor(private readonly b: Uint8Array, private readonly end: number, private readonly cols: JsonCheckColumns) {}

  /** The first position at or after p that is not JSON whitespace. */
  ws(p: number): number {
    const b = this.b;
    const end = this.end;
    while (p < end) {
      const c = b[p];
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      p++;
    }
    return p;
  }

  /** A string's closing quote, from the position after its opening one; −1 at an escape, a control character or the end. */
  private stringEnd(p: number): number {
    const b = this.b;
    const end = this.end;
    for (; p < end; p++) {
      const c = b[p];
      if (c === QUOTE) return p;
      if (c === BACKSLASH || c < 0x20) return -1;
    }
    return -1;
  }

  /** An integer of 1 to 15 digits without a leading zero at p (into `num`): the position after it, or −1. */
  private number(p: number): number {
    const b = this.b;
    const end = this.end;
    let c = b[p];
    if (!(c >= 0x30 && c <= 0x39)) return -1;
    if (c === 0x30) {
      this.num = 0;
      p++;
    } else {
      let v = 0;
      const start = p;
      while (p < end && (c = b[p]) >= 0x30 && c <= 0x39) {
        v = v * 10 + (c - 0x30);
        p++;
      }
      if (p - start > MAX_DIGITS) return -1;
      this.num = v;
    }
    // a fraction or an exponent (or a digit after a leading zero) is not the plain form
    if (p < end && ((c = b[p]) === 0x2e || c === 0x65 || c === 0x45 || (c >= 0x30 && c <= 0x39))) return -1;
    return p;
  }

  /** One check object at p (its `{`) into index i: the position after its `}`, or −1. */
  check(p: number, i: number): number {
    const b = this.b;
    const cols = this.cols;
    let seen = 0;
    let cost = 1;
    p = this.ws(p + 1);
    if (p < this.end && b[p] === CLOSE_OBJECT) return -1; // {}: the general way names what is missing
    for (;;) {
      if (p >= this.end || b[p] !== QUOTE) return -1;
      const nameEnd = this.stringEnd(p + 1);
      if (nameEnd < 0) return -1;
      const field = fieldOf(b, p + 1, nameEnd - p - 1);
      if (field === 0 || (seen & field) !== 0) return -1;
      seen |= field;
      p = this.ws(nameEnd + 1);
      if (p >= this.end || b[p] !== COLON) return -1;
      p = this.ws(p + 1);
      if (p >= this.end) return -1;
      if (field === FIELD_COST) {
        p = this.number(p);
        if (p < 0) return -1;
        cost = this.num;
      } else if (field === FIELD_ID) {
        const start = p;
        if (b[p] === QUOTE) {
          const e = this.stringEnd(p + 1);
          if (e < 0) return -1;
          const chars = e - p - 1;
          if (chars === 0 || chars > MAX_ID_CHARS) return -1;
          // ASCII only: JSON.stringify of it is these bytes, and its length is its byte count
          for (let k = p + 1; k < e; k++) if (b[k] > 0x7e) return -1;
          p = e + 1;
        } else {
          p = this.number(p);
          if (p < 0) return -1;
        }
        cols.idAt[i] = start;
        cols.idLen[i] = p - start;
      } else {
        if (b[p] !== QUOTE) return -1;
        const e = this.stringEnd(p + 1);
        if (e < 0) return -1;
        if (field === FIELD_KEY) {
          cols.keyAt[i] = p + 1;
          cols.keyLen[i] = e - p - 1;
        } else cols.policies[i] = this.policy(p + 1, e);
        p = e + 1;
      }
      p = this.ws(p);
      if (p >= this.end) return -1;
      if (b[p] === COMMA) {
        p = this.ws(p + 1);
        continue;
      }
      if (b[p] !== CLOSE_OBJECT) return -1;
      if ((seen & (FIELD_ID | FIELD_POLICY | FIELD_KEY)) !== (FIELD_ID | FIELD_POLICY | FIELD_KEY)) return -1;
      cols.costs[i] = cost;
      cols.keys[i] = null;
      return p + 1;
    }
  }

  /** The policy name of bytes [from, to): the last one's string when the bytes are the same. */
  private policy(from: number, to: number): string {
    const b = this.b;
    const last = PlainReader.lastPolicyBytes;
    const len = to - from;
    if (len === last.byteLength) {
      let same = true;
      for (let k = 0; k < len; k++) {
        if (b[from + k] !== last[k]) {
          same = false;
          break;
        }
      }
      if (same) return PlainReader.lastPolicy;
    }
    const name = DECODER.decode(b.subarray(from, to));
    PlainReader.lastPolicy = name;
    PlainReader.lastPolicyBytes = b.slice(from, to);
    return name;
  }
}

/** The field a name's bytes are (FIELD_*), or 0 for any other name. */
function fieldOf(b: Uint8Array, at: number, len: number): number {
  if (len === 2) return b[at] === 0x69 && b[at + 1] === 0x64 ? FIELD_ID : 0; // id
  if (len === 3) return b[at] === 0x6b && b[at + 1] === 0x65 && b[at + 2] === 0x79 ? FIELD_KEY : 0; // key
  if (len === 4) return b[at] === 0x63 && b[at + 1] === 0x6f && b[at + 2] === 0x73 && b[at + 3] === 0x74 ? FIELD_COST : 0; // cost
  if (len === 6) {
    return b[at] === 0x70 && b[at + 1] === 0x6f && b[at + 2] === 0x6c && b[at + 3] === 0x69 && b[at + 4] === 0x63 && b[at + 5] === 0x79
      ? FIELD_POLICY : 0; // policy
  }
  return 0;
}

const ENCODER = new TextEncoder();

/**
 * Fixed ASCII text to copy into an answer: its bytes as little-endian u32 words (written 4 at a time through
 * a DataView: a third fewer stores than byte by byte, which is what writing answers costs), then the rest.
 */
interface Part {
  readonly words: Uint32Array;
  readonly rest: Uint8Array;
  readonly length: number;
}

function part(s: string): Part {
  const b = ENCODER.encode(s);
  const words = new Uint32Array(b.length >> 2);
  for (let i = 0; i < words.length; i++) words[i] = (b[4 * i] | (b[4 * i + 1] << 8) | (b[4 * i + 2] << 16) | (b[4 * i + 3] << 24)) >>> 0;
  return { words, rest: b.slice(words.length * 4), length: b.length };
}

/** Copies a part into `b` (viewed by `v`) at `at`; returns the position after it. */
function put(v: DataView, b: Uint8Array, at: number, p: Part): number {
  const w = p.words;
  let q = at;
  for (let i = 0; i < w.length; i++, q += 4) v.setUint32(q, w[i], true);
  const r = p.rest;
  for (let i = 0; i < r.length; i++) b[q + i] = r[i];
  return at + p.length;
}

const ID = part('{"id":');
const NEXT_ID = part(',{"id":');
const RESET = part(',"resetAfterMs":');
const RETRY = part(',"retryAfterMs":');
const RETRY_NULL = part(',"retryAfterMs":null');
const REASON = part(',"reason":');

/**
 * Writes `v` as `${v}` prints it at `at` (room made for 24 bytes, the longest a number prints); returns the
 * position after it. Integers below 2^32 are written digit by digit, others from String(v).
 */
function putNumber(b: Uint8Array, at: number, v: number): number {
  if (v >= 0 && v < 4294967296 && Math.floor(v) === v) {
    let x = v >>> 0; // −0 prints as 0, as it does here
    if (x < 10) {
      b[at] = 0x30 + x;
      return at + 1;
    }
    let digits = 2;
    for (let t = 100; x >= t && digits < 10; t *= 10) digits++;
    let p = at + digits;
    do {
      const q = (x / 10) >>> 0;
      b[--p] = 0x30 + x - q * 10;
      x = q;
    } while (x > 0);
    return at + digits;
  }
  const s = String(v); // ASCII: digits, '-', '.', 'e', '+', or Infinity / NaN
  for (let i = 0; i < s.length; i++) b[at + i] = s.charCodeAt(i);
  return at + s.length;
}

/**
 * A connection's JSON answers not yet sent, as the UTF-8 of one text frame: one answer object, or an array of
 * them (`[a,b,…]`), exactly what joining the answers' strings made before. Answers come as strings
 * ({@link push}) or, for a decision the batch path composed, from its fields ({@link decision}).
 */
export class JsonAnswers {
  private buf: Uint8Array;
  private view: DataView;
  /** Byte 0 is kept for the array's `[`; answers start at 1. */
  private at = 1;
  private n = 0;
  /** The limit and name the parts below were made for (a frame's decisions are mostly of one limit). */
  private lastName: string | null = null;
  private lastLimit = -1;
  /** `,"allowed":true,"limit":<limit>,"remaining":`, the same with false, and `,"policy":<name JSON>}`. */
  private headTrue = part('');
  private headFalse = part('');
  private tail = part('');

  constructor(initialBytes = 4096) {
    this.buf = new Uint8Array(initialBytes);
    this.view = new DataView(this.buf.buffer);
  }

  /** Answers written since the last finish() or clear(). */
  get count(): number {
    return this.n;
  }

  /** Bytes of the frame finish() would give. */
  get byteLength(): number {
    return this.n === 0 ? 0 : this.n === 1 ? this.at - 1 : this.at + 1;
  }

  /** Forgets every answer written. */
  clear(): void {
    this.at = 1;
    this.n = 0;
  }

  private room(extra: number): void {
    if (this.at + extra <= this.buf.byteLength) return;
    this.buf = grown(this.buf, this.at, this.at + extra);
    this.view = new DataView(this.buf.buffer);
  }

  /** Starts an answer: the comma before every one but the first. */
  private begin(): void {
    if (this.n++ > 0) this.buf[this.at++] = COMMA;
  }

  /** A string's UTF-8 (room made for 3 bytes a unit: the most UTF-8 takes). */
  private text(s: string): void {
    this.room(s.length * 3);
    const b = this.buf;
    let at = this.at;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c > 0x7f) {
        this.at = at + ENCODER.encodeInto(s.slice(i), b.subarray(at)).written;
        return;
      }
      b[at++] = c;
    }
    this.at = at;
  }

  /** Appends one answer object given as its JSON text. */
  push(answer: string): void {
    this.room(answer.length * 3 + 1);
    this.begin();
    this.text(answer);
  }

  /**
   * Appends the answer to a decision composed into columns (allowed or denied; no degraded, delay, shadow or
   * staleness fields: those decisions come as objects, {@link decisionOf}), exactly as
   * `{"id":…,` + decisionJson() of the same decision: `idLen` bytes of JSON text at `idAt` in `src` are its id.
   */
  decision(src: Uint8Array, idAt: number, idLen: number, allowed: boolean, limit: number, remaining: number, resetAfterMs: number,
    retryAfterMs: number | null, name: string, reason: string): void {
    if (name !== this.lastName || limit !== this.lastLimit) this.parts(name, limit);
    const head = allowed ? this.headTrue : this.headFalse;
    const tail = this.tail;
    // `,{"id":`, the id, the parts, three numbers of at most 24 bytes, `,"retryAfterMs":` and the tail
    this.room(7 + idLen + head.length + 3 * 24 + 20 + tail.length);
    const b = this.buf;
    const v = this.view;
    let at = put(v, b, this.at, this.n++ > 0 ? NEXT_ID : ID);
    for (let i = 0; i < idLen; i++) b[at + i] = src[idAt + i];
    at = put(v, b, at + idLen, head);
    at = putNumber(b, at, remaining);
    at = putNumber(b, put(v, b, at, RESET), resetAfterMs);
    at = retryAfterMs === null ? put(v, b, at, RETRY_NULL) : putNumber(b, put(v, b, at, RETRY), retryAfterMs);
    if (reason === '') {
      this.at = put(v, b, at, tail);
      return;
    }
    // a decision that can never pass: its reason goes after the policy (decisionJson's order)
    this.at = put(v, b, at, tail) - 1;
    this.room(REASON.length + 1);
    this.at = put(this.view, this.buf, this.at, REASON);
    this.text(JSON.stringify(reason));
    this.room(1);
    this.buf[this.at++] = CLOSE_OBJECT;
  }

  /** The fixed parts of a decision's answer for a limit and its name. */
  private parts(name: string, limit: number): void {
    this.lastName = name;
    this.lastLimit = limit;
    this.headTrue = part(`,"allowed":true,"limit":${limit},"remaining":`);
    this.headFalse = part(`,"allowed":false,"limit":${limit},"remaining":`);
    this.tail = part(`,"policy":${JSON.stringify(name)}}`);
  }

  /** Appends `{"id":<idJson>,` + decisionJson(d) without its `{`: the answer to a decision made as an object. */
  decisionOf(idJson: string, d: Decision): void {
    this.push(`{"id":${idJson},${decisionJson(d).slice(1)}`);
  }

  /**
   * The frame of every answer since the last call (a view of this writer's memory, valid until the next
   * write: uWS copies what it sends), or null when there is none; empties the writer.
   */
  finish(): Uint8Array | null {
    const n = this.n;
    if (n === 0) return null;
    let view: Uint8Array;
    if (n === 1) view = this.buf.subarray(1, this.at);
    else {
      this.room(1);
      this.buf[0] = OPEN_ARRAY;
      this.buf[this.at++] = CLOSE_ARRAY;
      view = this.buf.subarray(0, this.at);
    }
    this.at = 1;
    this.n = 0;
    return view;
  }
}
