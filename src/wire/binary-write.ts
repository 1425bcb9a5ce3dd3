/**
 * Encoding `/v1/stream` binary frames (layout in binary-format.ts): {@link FrameWriter} appends check,
 * unsubscribe, answer and decision records to one growable buffer and finishes each frame in place.
 */
import { isWellFormed } from '../util/text.js';
import { ANSWER_HEAD, BINARY_VERSION, CHECK_HEAD, FRAME_HEADER, MAX_FRAME_RECORDS } from './binary-format.js';
import { grown } from './grow.js';

const UTF8_ENCODER = new TextEncoder();

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
    this.buf = grown(this.buf, this.at, this.at + extra);
    this.view = new DataView(this.buf.buffer);
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
   * @throws RangeError when the policy is over 255 bytes or the key over 65,535 bytes of UTF-8, when either holds
   * a lone surrogate (UTF-8 has no bytes for one: the encoder would write U+FFFD, merging distinct keys), or
   * when the id is not a u32.
   */
  check(id: number, policy: string, key: string, cost: number, flags: number): void {
    if (!(id >= 0 && id <= 0xffffffff && Number.isInteger(id))) throw new RangeError(`id: must be an integer in [0, 2^32) (got ${id})`);
    const pb = utf8Length(policy), kb = utf8Length(key);
    if (pb > 255) throw new RangeError('policy: longer than 255 bytes of UTF-8');
    if (kb > 65_535) throw new RangeError('key: longer than 65,535 bytes of UTF-8');
    // an ASCII string (byte length = length) has no surrogate to check
    if (pb !== policy.length && !isWellFormed(policy)) throw new RangeError('policy: must be well-formed Unicode (no lone surrogates)');
    if (kb !== key.length && !isWellFormed(key)) throw new RangeError('key: must be well-formed Unicode (no lone surrogates)');
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
