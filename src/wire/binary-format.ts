/**
 * The binary frame format of `/v1/stream`, version 1: one frame carries a batch of checks (client → server) or
 * a batch of answers (server → client). Every number is little-endian; every string is UTF-8 with its length
 * in bytes in front. Numbers that may exceed 2^32 (cost, limit, remaining, times in ms) travel as f64, which
 * holds every integer up to 2^53 − 1 exactly. This file holds the layout, its constants and the frame header;
 * binary-read.ts decodes frames and binary-write.ts encodes them; the server (`src/server/ws.ts`,
 * `src/server/stream/`) and the client (`src/client/ws.ts`) import the three files. Pure (no I/O).
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
