/**
 * The frames test/fuzz/ws.test.ts sends to `/v1/stream`, and what the server owes each: the policies and
 * limits the fuzzed server runs with, a seeded source of choices, the oracles (answers by id, id-less errors,
 * the close codes a frame may end its connection with, computed without the server's code) and the generator
 * of valid checks, garbage and frames that must close the connection.
 */
import type { PolicySpec } from '../../src/index.js';
import { FRAME_CHECKS } from '../../src/wire/binary-format.js';
import { FrameWriter } from '../../src/wire/binary-write.js';

export const POLICIES: Record<string, PolicySpec> = {
  tb: { algorithm: 'token_bucket', limit: 40, period: 1000 },
  gcra: { algorithm: 'gcra', limit: 10, period: 1000, burst: 30 },
  fw: { algorithm: 'fixed_window', limit: 35, period: 1000 },
  sw: { algorithm: 'sliding_window', limit: 30, period: 1000 },
  multi: {
    limits: [
      { algorithm: 'token_bucket', limit: 25, period: 500, name: 'multi-fast' },
      { algorithm: 'sliding_window', limit: 45, period: 3000, name: 'multi-slow' },
    ],
  },
};
export const PLAIN = Object.keys(POLICIES);
export const MAX_FRAME = 64 * 1024;
export const MAX_CHECKS = 24;

// ---------------------------------------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------------------------------------

export class Rnd {
  constructor(readonly next: () => number) {}
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Oracles: what the server owes a frame, computed without the server's code
// ---------------------------------------------------------------------------------------------------------

/** What a frame is owed: answers by id (JSON text of the id, or the u32), id-less errors, or a close. */
export interface Owed {
  ids: Array<string | number>;
  noId: number;
  /** Close codes the frame may end the connection with (null: it stays open). */
  close: number[] | null;
}

function readableJsonId(id: unknown): string | null {
  if (typeof id === 'string' && id.length > 0 && id.length <= 256) return JSON.stringify(id);
  if (typeof id === 'number' && Number.isSafeInteger(id)) return JSON.stringify(id);
  return null;
}

export function owedText(sent: string): Owed {
  // what the server reads: the frame's UTF-8 bytes, in which a lone surrogate of the generated string (a
  // mutation may cut a pair) is already U+FFFD (FUZZ_SEED=520176703 expected its \ud83d back)
  const text = Buffer.from(sent, 'utf8').toString('utf8');
  const bytes = Buffer.byteLength(text);
  if (bytes > 2 * MAX_FRAME) return { ids: [], noId: 0, close: [1006, 1009] };
  if (bytes > MAX_FRAME) return { ids: [], noId: 0, close: [1009] };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { ids: [], noId: 1, close: null };
  }
  const owed: Owed = { ids: [], noId: 0, close: null };
  const item = (x: unknown): void => {
    if (typeof x !== 'object' || x === null || Array.isArray(x)) return void owed.noId++;
    const id = readableJsonId((x as Record<string, unknown>).id);
    if (id === null) owed.noId++;
    else owed.ids.push(id);
  };
  if (Array.isArray(v)) {
    if (v.length === 0) owed.noId++;
    else if (v.length > MAX_CHECKS) return { ids: [], noId: 0, close: [1009] };
    else v.forEach(item);
  } else if (typeof v !== 'object' || v === null) owed.noId++;
  else item(v);
  return owed;
}

export function owedBinary(b: Uint8Array): Owed {
  if (b.byteLength > 2 * MAX_FRAME) return { ids: [], noId: 0, close: [1006, 1009] };
  if (b.byteLength > MAX_FRAME) return { ids: [], noId: 0, close: [1009] };
  if (b.byteLength < 4 || b[0] !== 1 || (b[1] !== 1 && b[1] !== 3)) return { ids: [], noId: 0, close: [1002] };
  const count = b[2] + 256 * b[3];
  if (count > MAX_CHECKS) return { ids: [], noId: 0, close: [1009] };
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (count === 0) return { ids: [], noId: 1, close: null };
  const ids: number[] = [];
  if (b[1] === 3) {
    if (b.byteLength !== 4 + 4 * count) return { ids: [], noId: 1, close: null };
    for (let i = 0; i < count; i++) ids.push(dv.getUint32(4 + 4 * i, true));
    return { ids, noId: 0, close: null };
  }
  let at = 4;
  for (let i = 0; i < count; i++) {
    if (at + 16 > b.byteLength) return { ids: [], noId: 1, close: null };
    ids.push(dv.getUint32(at, true));
    at += 16 + b[at + 13] + dv.getUint16(at + 14, true);
    if (at > b.byteLength) return { ids: [], noId: 1, close: null };
  }
  if (at !== b.byteLength) return { ids: [], noId: 1, close: null };
  return { ids, noId: 0, close: null };
}

// ---------------------------------------------------------------------------------------------------------
// Frame generators
// ---------------------------------------------------------------------------------------------------------

export interface Valid {
  /** The id as the answer carries it: JSON text (text frames) or the u32 (binary). */
  id: string | number;
  bin: boolean;
  policy: string;
  key: string;
  cost: number;
}

export interface Frame {
  data: string | Uint8Array;
  /** Not UTF-8: sent as a text frame anyway. */
  rawText?: boolean;
  valid: Valid[];
  /** Ids (as owed) whose answer must be an error. */
  mustError: Array<string | number>;
}

const WEIRD_STRINGS = [
  'NaN', 'Infinity', '-Infinity', '1e309', '-0', '0x10', '1_000', ' 1', '', 'null', 'undefined', 'true', '[]', '{}',
  '\u0000', '\u0001\u0002\u001f', '\u007f', '\t\n\r', 'é', '😀', '\ud800', '\udfff', '\u2028\u2029', '%00', '%ff',
  '\\', '"', '../', 'a'.repeat(300),
];
const BAD_COSTS: unknown[] = [
  -1, -0.5, 0.5, 1.5, 1e-300, 2 ** 53, 2 ** 64, -(2 ** 53), 1e308, 'NaN', 'Infinity', '1', '', null, true, [], {}, [1],
  { n: 1 }, '-1', '١',
];

export class Gen {
  private n = 0;
  constructor(private readonly r: Rnd, private readonly lane: number) {}

  private seq(): number {
    return ++this.n;
  }

  /** A valid check of this lane (keys of its own), for a text or binary frame. */
  valid(bin: boolean): Valid {
    const r = this.r;
    const n = this.seq();
    const key = `v${this.lane}:${r.int(12)}`;
    const cost = r.pick([0, 1, 1, 1, 2, 3, 5]);
    const policy = r.pick(PLAIN);
    return bin ? { id: n, bin, policy, key, cost } : { id: r.chance(0.5) ? String(n) : JSON.stringify(`v${n}`), bin, policy, key, cost };
  }

  private validJson(v: Valid): string {
    const r = this.r;
    const parts = [`"id":${v.id}`, `"policy":${JSON.stringify(v.policy)}`, `"key":${JSON.stringify(v.key)}`];
    if (v.cost !== 1 || r.chance(0.5)) parts.push(`"cost":${v.cost}`);
    for (let i = parts.length - 1; i > 0; i--) {
      const j = r.int(i + 1);
      [parts[i], parts[j]] = [parts[j], parts[i]];
    }
    const ws = r.chance(0.2) ? ' \n\t' : '';
    return `{${ws}${parts.join(`,${ws}`)}}`;
  }

  /** A hostile readable text id (never a valid check's). */
  private hostileId(): string {
    const r = this.r;
    const n = this.seq();
    switch (r.int(6)) {
      case 0: return String(1_000_000_000 + n);
      case 1: return `${1_000_000_000 + n}.0`;
      case 2: return `${(1_000_000_000 + n) / 10}e1`;
      case 3: return JSON.stringify(`h${n}${r.pick(WEIRD_STRINGS).slice(0, 200)}`);
      case 4: return `"h${n}\\u0000\\ud800"`;
      default: return JSON.stringify(`h${n}`.padEnd(256, 'x'));
    }
  }

  private junkKey(): string {
    const r = this.r;
    switch (r.int(8)) {
      case 0: return `j${'k'.repeat(r.pick([300, 5000, 40_000]))}`;
      case 1: return `j\u0000\u0001\u001b[31m${r.int(100)}`;
      case 2: return `j${r.pick(WEIRD_STRINGS)}`;
      default: return `j${r.int(50)}`;
    }
  }

  /** A JSON value of a wrong type, or nested deep. */
  private junkValue(): string {
    const r = this.r;
    switch (r.int(12)) {
      case 0: return 'null';
      case 1: return String(r.pick([1e308, -1e308, 2 ** 53 + 2, 1e-320, 0.1, -0]));
      case 2: return '1e400';
      case 3: return JSON.stringify(r.pick(WEIRD_STRINGS));
      case 4: return '[1,2,3]';
      case 5: return '{"a":{"b":[]}}';
      case 6: return 'true';
      case 7: {
        const d = r.pick([20, 500, 5000]);
        return '['.repeat(d) + ']'.repeat(d);
      }
      case 8: {
        const d = r.pick([20, 1000]);
        return '{"a":'.repeat(d) + '1' + '}'.repeat(d);
      }
      case 9: return '"' + '\\u0000'.repeat(50) + '"';
      case 10: return '123456789012345678901234567890';
      default: return '{}';
    }
  }

  /** A hostile JSON item with a readable id that must be answered with an error. */
  private badCheck(): { json: string; id: string } {
    const r = this.r;
    const id = this.hostileId();
    const policy = JSON.stringify(r.pick(PLAIN));
    const key = JSON.stringify(this.junkKey());
    let body: string;
    switch (r.int(9)) {
      case 0: body = `"policy":${policy},"key":${key},"cost":${JSON.stringify(r.pick(BAD_COSTS))}`; break;
      case 1: body = `"policy":${policy},"key":${key},"cost":${r.pick(['1e400', '-1e400', '-0.0000001', '9007199254740993', '1.0000001'])}`; break;
      case 2: body = `"policy":${this.junkValue()},"key":${key}`; break;
      case 3: body = `"policy":${JSON.stringify('nope' + r.pick(WEIRD_STRINGS))},"key":${key}`; break;
      case 4: body = `"key":${key}`; break;
      case 5: body = `"policy":${policy},"key":${key},"${r.pick(['extra', 'constructor', 'Policy', '', '__proto__'])}":${this.junkValue()}`; break;
      case 6: body = `"policy":${policy},"key":${key},"subscribe":${r.pick(['1', '"true"', 'null', '[]'])}`; break;
      case 7: body = `"op":${r.pick(['"sub"', '1', 'null', '"UNSUBSCRIBE"'])}`; break;
      default: body = `"op":"unsubscribe","policy":${policy}`; break;
    }
    return { json: `{"id":${id},${body}}`, id: JSON.stringify(JSON.parse(id)) };
  }

  /** A hostile JSON item whose answer may be anything (but has the id when readable). */
  private anyItem(): string {
    const r = this.r;
    switch (r.int(8)) {
      case 0: return this.junkValue();
      case 1: return `{"id":${this.junkValue()},"policy":"tb","key":"j1"}`;
      case 2: return `{"policy":"tb","key":"j1"}`;
      case 3: return `{"id":${this.hostileId()},"policy":"tb","key":${JSON.stringify(this.junkKey())},"cost":${r.pick(['0', '1', '2'])}}`;
      case 4: return `{"id":${this.hostileId()},"op":"unsubscribe"}`;
      case 5: return `{"id":${this.hostileId()},"policy":"tb","key":"j2","subscribe":true,"cost":1000}`;
      case 6: return `{"id":${this.hostileId()},"__proto__":{"policy":"tb","key":"j3"}}`;
      default: return `{"id":${this.hostileId()},"policy":"multi","key":${this.junkValue()}}`;
    }
  }

  /** A text frame: garbage, a mixed array, or valid checks. */
  text(): Frame {
    const r = this.r;
    const valid: Valid[] = [];
    const mustError: string[] = [];
    const k = r.int(10);
    if (k <= 3) {
      // an array mixing valid checks, invalid checks and junk
      const items: string[] = [];
      const len = 1 + r.int(MAX_CHECKS);
      for (let i = 0; i < len; i++) {
        const t = r.int(3);
        if (t === 0) {
          const v = this.valid(false);
          valid.push(v);
          items.push(this.validJson(v));
        } else if (t === 1) {
          const b = this.badCheck();
          mustError.push(b.id);
          items.push(b.json);
        } else items.push(this.anyItem());
      }
      return { data: `[${items.join(',')}]`, valid, mustError };
    }
    if (k === 4) {
      const v = this.valid(false);
      return { data: this.validJson(v), valid: [v], mustError };
    }
    if (k === 5) {
      const b = this.badCheck();
      return { data: b.json, valid, mustError: [b.id] };
    }
    if (k === 6) return { data: this.anyItem(), valid, mustError };
    if (k === 7) {
      // a mutation of a valid-looking frame: truncated, a character replaced or inserted (keys made junk)
      const base = this.validJson({ id: this.hostileId(), bin: false, policy: r.pick(PLAIN), key: `j${r.int(9)}`, cost: 1 });
      const at = r.int(base.length);
      const ch = r.pick(['"', '{', '}', ',', ':', '\\', '\u0000', '\u001f', ' ', 'x', '9', '[', ']', '😀', 'é']);
      const data = r.chance(0.4) ? base.slice(0, at) : r.chance(0.5) ? base.slice(0, at) + ch + base.slice(at + 1) : base.slice(0, at) + ch + base.slice(at);
      return { data, valid, mustError };
    }
    if (k === 8) {
      // not JSON, or JSON of the wrong shape
      return {
        data: r.pick([
          '', ' ', '{', '[', '[]', '[[]]', '{}', 'null', '0', '"x"', 'NaN', 'undefined', '{id:1}', "{'id':1}",
          '{"id":1,}', '[1,]', '\u0000', '\ufeff{}', '//', '{"id":1}{"id":2}', this.junkValue(),
        ]),
        valid, mustError,
      };
    }
    // arrays of junk values only
    const len = 1 + r.int(6);
    return { data: `[${Array.from({ length: len }, () => this.junkValue()).join(',')}]`, valid, mustError };
  }

  /** A raw check record. */
  private record(id: number, cost: number, flags: number, policy: Uint8Array, key: Uint8Array): Uint8Array {
    const b = new Uint8Array(16 + policy.byteLength + key.byteLength);
    const dv = new DataView(b.buffer);
    dv.setUint32(0, id >>> 0, true);
    dv.setFloat64(4, cost, true);
    b[12] = flags;
    b[13] = policy.byteLength;
    dv.setUint16(14, key.byteLength, true);
    b.set(policy, 16);
    b.set(key, 16 + policy.byteLength);
    return b;
  }

  private frameOf(type: number, records: Uint8Array[], count = records.length): Uint8Array {
    const len = 4 + records.reduce((s, x) => s + x.byteLength, 0);
    const b = new Uint8Array(len);
    b[0] = 1;
    b[1] = type;
    b[2] = count & 0xff;
    b[3] = count >>> 8;
    let at = 4;
    for (const x of records) {
      b.set(x, at);
      at += x.byteLength;
    }
    return b;
  }

  /** A hostile binary id: the top 8 bits set, so no few bit flips make it a valid check's (those are < 2^24). */
  private binId(): number {
    return (0xff000000 | this.seq()) >>> 0;
  }

  /** A hostile binary record: a bad cost, flags, policy or key, or a check on a junk key. */
  private badRecord(): { rec: Uint8Array; id: number; mustError: boolean } {
    const r = this.r;
    const id = this.binId();
    const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
    const pol = enc(r.pick(PLAIN));
    const key = enc(`j${r.int(20)}`);
    switch (r.int(7)) {
      case 0: return { rec: this.record(id, r.pick([-1, 0.5, NaN, Infinity, -Infinity, 2 ** 53, 1e300, -0.0001]), 0, pol, key), id, mustError: true };
      case 1: return { rec: this.record(id, 1, r.pick([4, 8, 128, 255, 7]), pol, key), id, mustError: true }; // bits 0-1 are subscribe and no-wait
      case 2: return { rec: this.record(id, 1, 0, new Uint8Array([0xff, 0xfe]), key), id, mustError: true };
      case 3: return { rec: this.record(id, 1, 0, pol, new Uint8Array([0x6a, 0xc3, 0x28, 0xed, 0xa0, 0x80])), id, mustError: true };
      case 4: return { rec: this.record(id, 1, 0, enc('nope\u0000'), key), id, mustError: true };
      case 5: return { rec: this.record(id, 1, 0, pol, enc(`j${'\u0000'.repeat(r.int(40))}${'y'.repeat(r.pick([0, 1000, 30_000]))}`)), id, mustError: false };
      default: return { rec: this.record(id, r.pick([0, 1, 2]), r.int(2), pol, key), id, mustError: false };
    }
  }

  /** A binary frame: valid and bad records mixed, or a mutated / truncated / out-of-protocol frame. */
  binary(): Frame {
    const r = this.r;
    const valid: Valid[] = [];
    const mustError: number[] = [];
    const k = r.int(10);
    if (k <= 4) {
      const recs: Uint8Array[] = [];
      const len = 1 + r.int(MAX_CHECKS);
      for (let i = 0; i < len; i++) {
        if (r.chance(0.5)) {
          const v = this.valid(true);
          valid.push(v);
          const w = new FrameWriter(FRAME_CHECKS);
          w.check(v.id as number, v.policy, v.key, v.cost, 0);
          recs.push(w.finish()!.subarray(4));
        } else {
          const b = this.badRecord();
          if (b.mustError) mustError.push(b.id);
          recs.push(b.rec);
        }
      }
      return { data: this.frameOf(1, recs), valid, mustError };
    }
    // hostile records only, then mutated
    const recs = Array.from({ length: 1 + r.int(6) }, () => this.badRecord().rec);
    let frame = r.chance(0.15)
      ? this.frameOf(3, Array.from({ length: 1 + r.int(4) }, () => {
        const b = new Uint8Array(4);
        new DataView(b.buffer).setUint32(0, this.binId(), true);
        return b;
      }))
      : this.frameOf(1, recs);
    switch (k) {
      case 5: frame = frame.slice(0, 4 + r.int(frame.byteLength - 4)); break; // truncated
      case 6: { // bit flips past the header (which would close the connection)
        frame = frame.slice();
        const flips = 1 + r.int(3);
        for (let i = 0; i < flips; i++) {
          const at = 4 + r.int(frame.byteLength - 4);
          frame[at] ^= 1 << r.int(8);
        }
        break;
      }
      case 7: { // trailing bytes, or a count off by some
        if (r.chance(0.5)) frame = Uint8Array.from([...frame, ...Array.from({ length: 1 + r.int(5) }, () => r.int(256))]);
        else {
          const c = Math.max(0, frame[2] + r.pick([-1, 1, 2, -5]));
          frame[2] = c & 0xff;
        }
        break;
      }
      case 8: frame = this.frameOf(1, [], 0); break; // count 0
      default: break; // as is (junk keys, bad fields)
    }
    return { data: frame, valid, mustError: [] };
  }

  /** A frame that closes the connection (sent only once the lane is owed nothing). */
  killer(): Frame {
    const r = this.r;
    const none = { valid: [], mustError: [] };
    switch (r.int(9)) {
      case 0: return { data: Uint8Array.from([r.pick([0, 2, 255]), 1, 1, 0]), ...none };
      case 1: return { data: Uint8Array.from([1, r.pick([0, 2, 4, 200]), 1, 0, 9, 9]), ...none };
      case 2: return { data: Uint8Array.from([1, 1, 0].slice(0, r.int(4))), ...none };
      case 3: { // a bit flip in the header
        const f = this.binary().data as Uint8Array;
        const g = f.slice();
        g[r.int(2)] ^= 1 << r.int(8);
        return { data: g, ...none };
      }
      case 4: return { data: this.frameOf(1, [], MAX_CHECKS + 1 + r.int(60_000)), ...none };
      case 5: return { data: `[${Array.from({ length: MAX_CHECKS + 1 }, () => '{"id":1,"policy":"tb","key":"j"}').join(',')}]`, ...none };
      case 6: return { data: JSON.stringify({ id: 'big', policy: 'tb', key: 'j'.repeat(MAX_FRAME + 10) }), ...none };
      case 7: return { data: new Uint8Array(2 * MAX_FRAME + 100), ...none };
      default: return { data: Uint8Array.from([0x7b, r.pick([0xff, 0xc0, 0xed, 0x80]), 0x7d]), rawText: true, ...none };
    }
  }
}
