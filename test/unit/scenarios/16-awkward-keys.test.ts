/**
 * Shared case 16: keys with odd characters, encodings and lengths are bytes, compared exactly (no
 * normalisation, no cut at NUL, no truncation); over 1 KiB of UTF-8 or empty is a validation error naming
 * `key`; and no composition of policy and key (or of descriptor values) makes two different things collide.
 */
import { describe, expect, it } from 'vitest';
import { loadCases } from '../../helpers/cases.js';
import { SHARDS, main, runTable, withSession, type Policies, type Row } from './table.js';

/** Every key gets three checks, all at t = 0 under one policy: a collision would show as an early denial. */
const KEYS: Array<[what: string, key: string]> = [
  ['IPv6', '2001:db8::1'],
  ['IPv4-mapped IPv6', '::ffff:10.0.0.1'],
  ['space', 'user name'],
  ['tab', 'tab\tkey'],
  ['newline', 'new\nline'],
  ['NUL inside', 'nul\u0000byte'],
  ['the part before the NUL', 'nul'],
  ['Japanese', 'ユーザー'],
  ['é composed (U+00E9)', '\u00e9'],
  ['é decomposed (e + U+0301)', 'e\u0301'],
  ['User', 'User'],
  ['user', 'user'],
  ['leading space', ' user'],
  ['trailing space', 'user '],
  ['*', '*'],
  ['?', '?'],
  ['[', '['],
  ['%', '%'],
  ['{x}', '{x}'],
  ['{', '{'],
  ['}', '}'],
  ['a:b', 'a:b'],
  ['a|b', 'a|b'],
  ['backslash', '\\'],
  ['double quote', '"'],
  ['single quote', "'"],
  ['emoji', '\u{1F600}'],
  ['"a" × 300', 'a'.repeat(300)],
  ['"€" × 100 (300 bytes)', '€'.repeat(100)],
  ['300 bytes, first 250 shared (…A)', 'p'.repeat(250) + 'A'.repeat(50)],
  ['300 bytes, first 250 shared (…B)', 'p'.repeat(250) + 'B'.repeat(50)],
  ['"a" × 1024 (1 024 bytes)', 'a'.repeat(1024)],
  ['"é" × 512 (1 024 bytes)', 'é'.repeat(512)],
  ['"€" × 341 (1 023 bytes)', '€'.repeat(341)],
];

/** Over 1 KiB of UTF-8, whatever the length in characters, or empty: an error naming `key`. */
const REJECTED: Array<[what: string, key: string, bytes: number]> = [
  ['"a" × 1025', 'a'.repeat(1025), 1025],
  ['"é" × 513', 'é'.repeat(513), 1026],
  ['"€" × 342', '€'.repeat(342), 1026],
  ['empty', '', 0],
];

const CELLS = {
  fixed_window: ['allow r=1 reset=60_000', 'allow r=0 reset=60_000', 'deny r=0 retry=60_000 reset=60_000'],
  token_bucket: ['allow r=1 reset=30_000', 'allow r=0 reset=60_000', 'deny r=0 retry=30_000 reset=60_000'],
} as const;

function table(algorithm: keyof typeof CELLS): Row[] {
  return [
    ...KEYS.flatMap(([what, key]) => CELLS[algorithm].map((expect, i) => ({ label: `${what} #${i + 1}`, t: 0, key, cost: 1, expect }))),
    ...REJECTED.map(([what, key]) => ({ label: what, t: 0, key, cost: 1, expect: 'error (key)' })),
  ];
}

describe('16 the keys themselves', () => {
  it('have the byte lengths the case states', () => {
    const bytes = (k: string) => Buffer.byteLength(k, 'utf8');
    expect(KEYS.map(([, k]) => bytes(k)).slice(-3)).toStrictEqual([1024, 1024, 1023]);
    expect(bytes('€'.repeat(100))).toBe(300);
    expect(REJECTED.map(([, k, n]) => bytes(k) === n)).toStrictEqual([true, true, true, true]);
    expect(new Set(KEYS.map(([, k]) => k)).size).toBe(KEYS.length);
    expect(KEYS.length * 3 + REJECTED.length).toBe(106);
  });

  it('are, in order, the keys of cases.json (16-keys/…)', () => {
    for (const id of ['16-keys/fixed_window', '16-keys/token_bucket']) {
      const c = loadCases().find((x) => x.id === id)!;
      expect(c.calls.map((call) => call.key)).toStrictEqual(table(id.endsWith('fixed_window') ? 'fixed_window' : 'token_bucket').map((r) => r.key));
    }
  });
});

describe.each(SHARDS)('16 awkward keys, shards: %i', (shards) => {
  it.each(['fixed_window', 'token_bucket'] as const)('%s, limit 2 per 60 000 ms: 106 calls', async (algorithm) => {
    await runTable(main(algorithm, 2, 60_000), shards, table(algorithm), algorithm);
  });

  it.each(['fixed_window', 'token_bucket'] as const)('%s: a lone surrogate is refused (UTF-8 would merge it with U+FFFD)', async (algorithm) => {
    await runTable(main(algorithm, 2, 60_000), shards, [
      { t: 0, key: 'x\ud800', cost: 1, expect: 'error (key)' },
      { t: 0, key: 'x\ufffd', cost: 1, expect: 'allow r=1' },
    ], algorithm);
  });

  it('composition: key "c" under policy "ab" and key "bc" under policy "a" do not share state', async () => {
    const policies = {
      ab: { algorithm: 'fixed_window', limit: 2, period: 60_000 },
      a: { algorithm: 'fixed_window', limit: 2, period: 60_000 },
    } as Policies;
    await runTable(policies, shards, [
      { t: 0, policy: 'ab', key: 'c', cost: 1, expect: 'allow r=1 reset=60_000' },
      { t: 0, policy: 'ab', key: 'c', cost: 1, expect: 'allow r=0 reset=60_000' },
      { t: 0, policy: 'a', key: 'bc', cost: 1, expect: 'allow r=1 reset=60_000' },
      { t: 0, policy: 'a', key: 'bc', cost: 1, expect: 'allow r=0 reset=60_000' },
      { t: 0, policy: 'ab', key: 'c', cost: 1, expect: 'deny r=0 retry=60_000 reset=60_000' },
      { t: 0, policy: 'a', key: 'bc', cost: 1, expect: 'deny r=0 retry=60_000 reset=60_000' },
    ], 'composition');
  });

  // Also check: descriptor tuples such as ("a:b", "c") and ("a", "b:c"), and tuples with empty parts, are
  // different keys.
  it('descriptor tuples that would join to the same string stay apart', async () => {
    const policies = { d: { algorithm: 'fixed_window', limit: 1, period: 60_000, descriptors: ['x', 'y'] } } as unknown as Policies;
    const tuples: Array<[string, string]> = [
      ['a:b', 'c'],
      ['a', 'b:c'],
      ['', 'a'],
      ['a', ''],
      ['', ''],
      [':', ''],
      ['', ':'],
      ['%3A', ''],
    ];
    await withSession(policies, shards, async (s) => {
      for (const [x, y] of tuples) {
        const d = await s.check(0, { policy: 'd', descriptors: { x, y }, cost: 1 });
        expect({ allowed: d.allowed, remaining: d.remaining }, `(${JSON.stringify(x)}, ${JSON.stringify(y)})`).toStrictEqual({ allowed: true, remaining: 0 });
      }
      for (const [x, y] of tuples) {
        const d = await s.check(0, { policy: 'd', descriptors: { x, y }, cost: 1 });
        expect(d.allowed, `(${JSON.stringify(x)}, ${JSON.stringify(y)}) again`).toBe(false);
      }
    });
  });
});
