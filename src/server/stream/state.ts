/**
 * The state of `/v1/stream` connections: what a connection holds (uWS user data), the checks waiting in its
 * queue (binary ones and frames of plain JSON checks as column segments, other JSON ones one by one), and its
 * armed subscriptions. Data only: the parts that act on it are conn.ts (output, queue and backpressure),
 * json-frames.ts, binary-frames.ts and subscriptions.ts.
 */
import type { HeldAnswers } from '../held.js';
import type { WebSocket } from 'uWebSockets.js';
import type { CheckRequest } from '../../types/decision.js';
import { FrameWriter } from '../../wire/binary-write.js';
import { readUtf8 } from '../../wire/binary-format.js';
import { type CheckColumns } from '../../wire/binary-read.js';
import { JsonAnswers, type JsonCheckColumns } from '../../wire/json-stream.js';
import type { BatchInput } from '../../engine/batch.js';

/** One check waiting for, or being decided by, the engine. */
export class Item {
  constructor(
    readonly bin: boolean,
    /** Binary: the u32 id. */
    readonly id: number,
    /** JSON: the id as JSON text. */
    readonly idJson: string,
    readonly req: CheckRequest,
    readonly subscribe: boolean,
    /** onLimit: delay: answer a delayed admission when due (true), or at once with its delay (`wait: 0`). */
    readonly hold = true,
  ) {}
}

/**
 * Checks of a connection, as columns: [head, n) wait for the engine, [0, head) were handed to it. A frame's
 * checks go in whole; a segment with checks in flight is not reused until they land. Keys are read from
 * copies of the frames they came in.
 */
export abstract class Segment implements BatchInput {
  n = 0;
  head = 0;
  /** Checks of this segment handed to the engine and not answered yet. */
  inFlight = 0;
  /** In its connection's queue (it may take more checks, or still has some waiting). */
  inQueue = false;
  readonly costs: Float64Array;
  readonly policies: string[];
  readonly keys: Array<string | null>;
  readonly keyAt: Int32Array;
  abstract readonly keyLen: Uint16Array | Int32Array;
  /** Copies of the frames the checks came in (keys are read from here), `used` bytes of it. */
  keyBytes: Uint8Array;
  used = 0;
  constructor(readonly capacity: number, bytesPerCheck: number) {
    this.costs = new Float64Array(capacity);
    this.policies = new Array<string>(capacity).fill('');
    this.keys = new Array<string | null>(capacity).fill(null);
    this.keyAt = new Int32Array(capacity);
    this.keyBytes = new Uint8Array(capacity * bytesPerCheck);
  }

  /** Copies a frame in (uWS reuses its memory after the callback); returns where it starts. */
  copy(frame: Uint8Array): number {
    const at = this.used;
    if (at + frame.byteLength > this.keyBytes.byteLength) {
      let size = this.keyBytes.byteLength * 2;
      while (size < at + frame.byteLength) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.keyBytes.subarray(0, at));
      this.keyBytes = next;
    }
    this.keyBytes.set(frame, at);
    this.used = at + frame.byteLength;
    return at;
  }

  /** Key i as a string. */
  key(i: number): string {
    return (this.keys[i] ??= readUtf8(this.keyBytes, this.keyAt[i], this.keyLen[i]) ?? '');
  }

  /** Empties the segment for reuse. */
  reset(): void {
    this.n = this.head = this.used = 0;
  }
}

/** Binary checks of a connection (src/wire/binary-read.ts readCheckColumns). */
export class BinSeg extends Segment implements CheckColumns {
  readonly ids: Uint32Array;
  readonly flags: Uint8Array;
  readonly keyLen: Uint16Array;
  constructor(capacity: number) {
    super(capacity, 32);
    this.ids = new Uint32Array(capacity);
    this.flags = new Uint8Array(capacity);
    this.keyLen = new Uint16Array(capacity);
  }
}

/** Plain JSON checks of a connection (src/wire/json-stream.ts readPlainChecks): ids as JSON text in keyBytes. */
export class JsonSeg extends Segment implements JsonCheckColumns {
  readonly idAt: Int32Array;
  readonly idLen: Uint16Array;
  readonly keyLen: Int32Array;
  constructor(capacity: number) {
    super(capacity, 64);
    this.idAt = new Int32Array(capacity);
    this.idLen = new Uint16Array(capacity);
    this.keyLen = new Int32Array(capacity);
  }

  /** Check i's id as JSON text (an error answer's, a held answer's). */
  idJson(i: number): string {
    return readUtf8(this.keyBytes, this.idAt[i], this.idLen[i]) ?? '';
  }
}

/** An armed (or firing) subscription. */
export class Sub {
  due = 0;
  /** False once fired, cancelled or its connection closed; a dead entry stays in the heap until popped. */
  live = true;
  inHeap = false;
  constructor(
    readonly conn: Conn,
    readonly mapKey: string,
    readonly bin: boolean,
    readonly id: number,
    readonly idJson: string,
    /** The same check with cost 0. */
    readonly peek: CheckRequest,
    readonly cost: number,
  ) {}
}

/**
 * A connection's state (uWS user data). A plain object: uWS copies the user data's own properties into an
 * object of its own at upgrade, so nothing may live on a prototype (its fields' values may be class instances).
 */
export interface Conn {
  ws: WebSocket<Conn> | null;
  /** Waiting checks: JSON ones one by one or by segment (plain checks), binary ones by segment. */
  queue: Array<Item | Segment | undefined>;
  /** Index of the first entry in `queue` with waiting checks. */
  head: number;
  /** Checks waiting in `queue`. */
  queued: number;
  /** A binary segment out of the queue with nothing in flight, for the next frame. */
  spare: BinSeg | null;
  /** The same for plain JSON checks. */
  jsonSpare: JsonSeg | null;
  inFlight: number;
  paused: boolean;
  closed: boolean;
  /** JSON answers not yet sent (the UTF-8 of one text frame). */
  json: JsonAnswers;
  /** Binary answers not yet sent (created on the first binary answer). */
  bin: FrameWriter | null;
  flushScheduled: boolean;
  pumpScheduled: boolean;
  subs: Map<string, Sub> | null;
  /** Delayed answers being held (onLimit: delay); made on the first. */
  held: HeldAnswers | null;
}

export function newConn(): Conn {
  return {
    ws: null, queue: [], head: 0, queued: 0, spare: null, jsonSpare: null, inFlight: 0, paused: false, closed: false, json: new JsonAnswers(), bin: null,
    flushScheduled: false, pumpScheduled: false, subs: null, held: null,
  };
}
