import { describe, expect, it } from 'vitest';
import { FrameWriter } from '../../../src/wire/binary-write.js';
import { isWellFormed } from '../../../src/util/text.js';
import { readChecks } from '../../../src/wire/binary-read.js';
import { FRAME_CHECKS } from '../../../src/wire/binary-format.js';

describe('FrameWriter.check', () => {
  it('refuses a policy or key with a lone surrogate (UTF-8 would carry U+FFFD instead) and writes nothing of it', () => {
    const w = new FrameWriter(FRAME_CHECKS);
    expect(() => w.check(1, 'p', '\ud800lone', 1, 0)).toThrow(new RangeError('key: must be well-formed Unicode (no lone surrogates)'));
    expect(() => w.check(2, 'p', 'lone\udc00', 1, 0)).toThrow(new RangeError('key: must be well-formed Unicode (no lone surrogates)'));
    expect(() => w.check(3, '\udfffp', 'k', 1, 0)).toThrow(new RangeError('policy: must be well-formed Unicode (no lone surrogates)'));
    expect(w.count).toBe(0);
    w.check(4, 'p', '\ufffdlone', 1, 0);
    w.check(5, 'p', '\ud83d\ude00', 1, 0);
    const f = w.finish()!;
    const seen: Array<[number, string | null]> = [];
    readChecks(f, 2, (id, _p, key) => seen.push([id, key]));
    expect(seen).toStrictEqual([[4, '\ufffdlone'], [5, '\ud83d\ude00']]);
  });

  it('isWellFormed: pairs are, lone halves are not', () => {
    expect(['', 'ascii', '\ufffd', '\ud83d\ude00', '\ud800', '\udc00x', 'x\ud83d', '\ude00\ud83d'].map(isWellFormed))
      .toStrictEqual([true, true, true, true, false, false, false, false]);
  });
});
