/**
 * boundedKey (src/keys/derive.ts): a joined descriptor key over 1,024 bytes of UTF-8 is keyed by its SHA-256,
 * in a form no joined key can take (a joined key's `%` is always escaped as `%25`).
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { boundedKey, escapePart, validateKey } from '../../../src/keys/derive.js';

const digest = (s: string) => `%sha256:${createHash('sha256').update(s, 'utf8').digest('hex')}`;

describe('boundedKey', () => {
  it('keeps a key of up to 1,024 bytes, and digests a longer one (bytes of UTF-8, not characters)', () => {
    expect(boundedKey('a'.repeat(1024))).toBe('a'.repeat(1024));
    expect(boundedKey('a'.repeat(1025))).toBe(digest('a'.repeat(1025)));
    expect(boundedKey('é'.repeat(512))).toBe('é'.repeat(512));
    expect(boundedKey('é'.repeat(513))).toBe(digest('é'.repeat(513)));
    expect(boundedKey('€'.repeat(341))).toBe('€'.repeat(341));
    expect(boundedKey('€'.repeat(342))).toBe(digest('€'.repeat(342)));
  });

  it('gives a valid key that no joined key equals', () => {
    const k = boundedKey('x'.repeat(2000));
    expect(validateKey(k)).toBe(k);
    expect(k).toHaveLength(8 + 64);
    // the same text as joined values: its % escaped
    expect([escapePart(k), ['%sha256', k.slice(8)].map(escapePart).join(':')]).not.toContain(k);
  });
});
