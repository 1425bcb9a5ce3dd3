/**
 * Decoding `/v1/stream` binary frames (layout in binary-format.ts): a checks frame into a callback per record
 * or into columns (the server), an unsubscribe frame's ids, and an answers frame record by record or whole
 * (the client). The structure of a frame is checked before any record is handed over.
 */
import {
  ANSWER_HEAD, CHECK_HEAD, CHECK_NO_WAIT, CHECK_SUBSCRIBE, FRAME_ANSWERS, FRAME_HEADER, readHeader, readUtf8, type BinaryAnswer,
} from './binary-format.js';

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
