/**
 * src/wire/json-stream.ts: the reader of plain JSON check frames takes exactly what JSON.parse reads as plain
 * checks (the same ids, policies, keys and costs) and gives up on every other frame; the answers writer
 * writes, byte for byte, what `{"id":…,` + decisionJson() wrote, framed as joining the answers did.
 */
import { describe, expect, it } from 'vitest';
import { JsonAnswers, maxPlainChecks, readPlainChecks, type JsonCheckColumns } from '../../../src/wire/json-stream.js';
import { decisionJson } from '../../../src/wire/codec.js';
import type { Decision } from '../../../src/types/decision.js';

function columns(capacity: number): JsonCheckColumns {
  return {
    capacity,
    idAt: new Int32Array(capacity),
    idLen: new Uint16Array(capacity),
    policies: new Array<string>(capacity).fill(''),
    costs: new Float64Array(capacity),
    keys: new Array<string | null>(capacity).fill(null),
    keyAt: new Int32Array(capacity),
    keyLen: new Int32Array(capacity),
  };
}

const enc = new TextEncoder();
const dec = new TextDecoder();

interface Read {
  idJson: string;
  policy: string;
  key: string;
  cost: number;
}

/** Reads `text` at an offset inside a larger buffer (positions must be the buffer's). */
function read(text: string, max = 4096): Read[] | null {
  const body = enc.encode(text);
  const b = new Uint8Array(body.length + 7);
  b.set(body, 5);
  const cols = columns(maxPlainChecks(body.length));
  const n = readPlainChecks(b, 5, 5 + body.length, cols, 0, max);
  if (n < 0) return null;
  const out: Read[] = [];
  for (let i = 0; i < n; i++) {
    out.push({
      idJson: dec.decode(b.subarray(cols.idAt[i], cols.idAt[i] + cols.idLen[i])),
      policy: cols.policies[i],
      key: dec.decode(b.subarray(cols.keyAt[i], cols.keyAt[i] + cols.keyLen[i])),
      cost: cols.costs[i],
    });
  }
  return out;
}

/** What the general path reads of the same text, for a frame of plain checks. */
function parsed(text: string): Read[] {
  const v = JSON.parse(text) as unknown;
  const items = (Array.isArray(v) ? v : [v]) as Array<Record<string, unknown>>;
  return items.map((o) => ({
    idJson: typeof o.id === 'string' ? JSON.stringify(o.id) : String(o.id),
    policy: o.policy as string,
    key: o.key as string,
    cost: Object.hasOwn(o, 'cost') ? (o.cost as number) : 1,
  }));
}

describe('readPlainChecks', () => {
  const plain = [
    '{"id":1,"policy":"p","key":"k"}',
    '[{"id":1,"policy":"p","key":"k","cost":3},{"id":"a-b c","policy":"p","key":"k2","cost":0}]',
    ' [ { "cost" : 7 , "key" : "ключ ☃ 𝄞" ,\n\t"policy":"pólicy", "id" : 123456789012345 } ]\r\n',
    '[{"id":0,"policy":"","key":""}]',
    `[{"id":"${'x'.repeat(256)}","policy":"p","key":"${'y'.repeat(2000)}","cost":999999999999999}]`,
  ];
  it.each(plain)('reads %s as JSON.parse does', (text) => {
    expect(read(text)).toEqual(parsed(text));
  });

  it('reads a frame of many checks of several policies, each policy name once made', () => {
    const items = Array.from({ length: 500 }, (_, i) => ({ id: i, policy: ['a', 'b', 'é'][i % 3 === 0 ? 0 : i % 7 === 0 ? 2 : 1], key: `k${i}`, cost: i % 4 }));
    const text = JSON.stringify(items);
    expect(read(text)).toEqual(parsed(text));
  });

  const refused = [
    ['not JSON', '[{"id":1,"policy":"p","key":"k"}'],
    ['trailing text', '{"id":1,"policy":"p","key":"k"} x'],
    ['an empty array', '[]'],
    ['an empty object', '[{}]'],
    ['a trailing comma', '[{"id":1,"policy":"p","key":"k"},]'],
    ['a scalar', '5'],
    ['an escape in a key', '{"id":1,"policy":"p","key":"a\\"b"}'],
    ['an escape in a policy', '{"id":1,"policy":"\\u0070","key":"k"}'],
    ['an escape in a field name', '{"i\\u0064":1,"policy":"p","key":"k"}'],
    ['another field', '{"id":1,"policy":"p","key":"k","subscribe":false}'],
    ['wait', '{"id":1,"policy":"p","key":"k","wait":0}'],
    ['descriptors', '{"id":1,"policy":"p","descriptors":{"a":"b"}}'],
    ['op', '{"id":1,"op":"unsubscribe"}'],
    ['a field twice', '{"id":1,"policy":"p","key":"k","key":"j"}'],
    ['no id', '{"policy":"p","key":"k"}'],
    ['no policy', '{"id":1,"key":"k"}'],
    ['no key', '{"id":1,"policy":"p"}'],
    ['a negative cost', '{"id":1,"policy":"p","key":"k","cost":-1}'],
    ['a fractional cost', '{"id":1,"policy":"p","key":"k","cost":1.5}'],
    ['an exponent', '{"id":1,"policy":"p","key":"k","cost":1e3}'],
    ['a leading zero', '{"id":01,"policy":"p","key":"k"}'],
    ['16 digits', '{"id":1234567890123456,"policy":"p","key":"k"}'],
    ['a string cost', '{"id":1,"policy":"p","key":"k","cost":"1"}'],
    ['a null cost', '{"id":1,"policy":"p","key":"k","cost":null}'],
    ['a number key', '{"id":1,"policy":"p","key":5}'],
    ['a number policy', '{"id":1,"policy":5,"key":"k"}'],
    ['an empty string id', '{"id":"","policy":"p","key":"k"}'],
    ['an id of 257 characters', `{"id":"${'x'.repeat(257)}","policy":"p","key":"k"}`],
    ['a non-ASCII id', '{"id":"é","policy":"p","key":"k"}'],
    ['a boolean id', '{"id":true,"policy":"p","key":"k"}'],
    ['a control character', '{"id":1,"policy":"p","key":"a\tb"}'],
    ['a nested array', '[[{"id":1,"policy":"p","key":"k"}]]'],
  ];
  it.each(refused)('gives up on %s', (_what, text) => {
    expect(read(text)).toBeNull();
  });

  it('gives up on more checks than the most asked for, and on a full segment', () => {
    const text = JSON.stringify([{ id: 1, policy: 'p', key: 'k' }, { id: 2, policy: 'p', key: 'k' }]);
    expect(read(text, 2)).toHaveLength(2);
    expect(read(text, 1)).toBeNull();
    const b = enc.encode(text);
    expect(readPlainChecks(b, 0, b.length, columns(1), 0, 10)).toBe(-1);
    expect(readPlainChecks(b, 0, b.length, columns(3), 1, 10)).toBe(2);
  });

  it('maxPlainChecks bounds the checks of any frame it would read', () => {
    for (let n = 1; n < 50; n++) {
      const text = JSON.stringify(Array.from({ length: n }, () => ({ id: 0, policy: '', key: '' })));
      expect(maxPlainChecks(enc.encode(text).length)).toBeGreaterThanOrEqual(n);
    }
  });
});

describe('JsonAnswers', () => {
  const decisions: Decision[] = [
    { allowed: true, limit: 10, remaining: 9, resetAfterMs: 600, retryAfterMs: 0, policy: 'p' },
    { allowed: false, limit: 1_000_000_000, remaining: 0, resetAfterMs: 4_294_967_296, retryAfterMs: 123_456_789, policy: 'p' },
    { allowed: false, limit: 0, remaining: 0, resetAfterMs: 0, retryAfterMs: null, policy: 'zero', reason: 'limit is 0' },
    { allowed: false, limit: 5, remaining: 5, resetAfterMs: 0, retryAfterMs: null, policy: 'm-window', reason: "cost exceeds the limit's capacity" },
    { allowed: true, limit: 2 ** 53 - 1, remaining: 2 ** 53 - 2, resetAfterMs: 1.5, retryAfterMs: 0, policy: 'pólicy "q" ☃' },
    { allowed: true, limit: 7, remaining: -0, resetAfterMs: 1e21, retryAfterMs: 0, policy: 'p' },
    { allowed: true, limit: 7, remaining: -3, resetAfterMs: 99, retryAfterMs: 0, policy: 'p' },
  ];

  it('writes each decision as `{"id":…,` + decisionJson(), and a frame of several as their joined array', () => {
    const w = new JsonAnswers(16);
    const expected: string[] = [];
    const ids = ['1', '"abc"', '123456789012345'];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < decisions.length; i++) {
        const d = decisions[(i + round) % decisions.length];
        const idJson = ids[i % ids.length];
        const src = enc.encode(`xx${idJson}`);
        w.decision(src, 2, src.length - 2, d.allowed, d.limit, d.remaining, d.resetAfterMs, d.retryAfterMs, d.policy, d.reason ?? '');
        expected.push(`{"id":${idJson},${decisionJson(d).slice(1)}`);
      }
      w.push('{"id":9,"error":{"code":"X","detail":"ü"}}');
      expected.push('{"id":9,"error":{"code":"X","detail":"ü"}}');
      w.decisionOf('"s"', decisions[0]);
      expected.push(`{"id":"s",${decisionJson(decisions[0]).slice(1)}`);
    }
    expect(w.count).toBe(expected.length);
    const want = `[${expected.join(',')}]`;
    expect(w.byteLength).toBe(Buffer.byteLength(want));
    expect(dec.decode(w.finish()!)).toBe(want);
    expect(w.finish()).toBeNull();
  });

  it('a single answer is the object alone; clear() forgets what was written', () => {
    const w = new JsonAnswers();
    w.push('{"id":1}');
    expect(w.byteLength).toBe(8);
    expect(dec.decode(w.finish()!)).toBe('{"id":1}');
    w.push('{"id":2}');
    w.clear();
    expect(w.count).toBe(0);
    expect(w.finish()).toBeNull();
  });
});
