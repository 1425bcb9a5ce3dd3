import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkFromQuery } from '../../../src/wire/codec.js';
import { describe as describeValue } from '../../../src/keys/derive.js';
import { invalidArgument } from '../../../src/util/errors.js';
import type { CheckRequest } from '../../../src/types/decision.js';

/**
 * The query parser as first written (split on `&`, decode every part, a Set of names seen): the reference
 * the one-pass parser must match, in its result and in the error it throws (field and message).
 */
function reference(query: string): CheckRequest {
  if (query.includes('\uFFFD')) throw invalidArgument('query', 'is not well-formed UTF-8 (percent-encode bytes outside ASCII)');
  const req: CheckRequest = { policy: '', cost: 1 };
  const seen = new Set<string>();
  let descriptors: Record<string, string> | undefined;
  for (const pair of query === '' ? [] : query.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = decode(eq < 0 ? pair : pair.slice(0, eq), 'query');
    const value = decode(eq < 0 ? '' : pair.slice(eq + 1), name);
    if (seen.has(name)) throw invalidArgument(name, 'is given more than once');
    seen.add(name);
    if (name === 'policy') req.policy = value;
    else if (name === 'key') req.key = value;
    else if (name === 'cost') {
      const n = Number(value);
      if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) {
        throw invalidArgument('cost', `must be a non-negative safe integer (got ${describeValue(value)})`);
      }
      req.cost = n;
    } else (descriptors ??= Object.create(null) as Record<string, string>)[name] = value;
  }
  if (!seen.has('policy')) throw invalidArgument('policy', 'is required');
  if (descriptors !== undefined) req.descriptors = descriptors;
  return req;
}

function decode(s: string, field: string): string {
  try {
    return decodeURIComponent(s.includes('+') ? s.replace(/\+/g, ' ') : s);
  } catch {
    throw invalidArgument(field, 'is not well-formed percent-encoded UTF-8');
  }
}

type Outcome = { ok: CheckRequest } | { error: { field: unknown; message: string } };
function outcome(parse: (q: string) => CheckRequest, q: string): Outcome {
  try {
    const r = parse(q);
    // descriptors are null-prototype objects: compare their entries
    return { ok: { ...r, ...(r.descriptors ? { descriptors: { ...r.descriptors } } : {}) } };
  } catch (e) {
    return { error: { field: (e as { field?: unknown }).field, message: (e as Error).message } };
  }
}

/** Pieces hostile queries are built from: names, separators, escapes good and bad, U+FFFD. */
const piece = fc.constantFrom(
  'policy', 'key', 'cost', 'tenant', 'action', '__proto__', 'constructor', '=', '&', '&&', '+', '%', '%2', '%25', '%3A',
  '%26', '%3D', '%2B', '%FF', '%C3%A9', '%E2%82', '%ED%A0%80', 'p%6Flicy', 'k%65y', '\uFFFD', 'é', ':', '1', '0', '-1',
  '9007199254740991', '9007199254740992', '1.5', ' ', 'a', 'free',
);

describe('checkFromQuery (one pass) matches the split-and-decode reference', () => {
  it('on hand-picked queries', () => {
    for (const q of [
      '', '&', 'policy=free', 'policy=free&key=k1', 'policy=free&&key=k1&', 'policy', 'policy=&key=', 'key=k&policy=p&cost=3',
      'policy=a&policy=b', 'policy=a&p%6Flicy=b', 'policy=a&tenant=x&tenant=y', 'policy=a&cost=x&cost=1', 'policy=a=b&key=c=d',
      'policy=p&key=%FF', 'policy=p&%FF=1', 'policy=p&key=a+b%20c', 'policy=p&key=a&x=\uFFFD', 'policy=a&policy=b&\uFFFD',
      'policy=p&__proto__=x', 'policy=p&cost=9007199254740992', 'cost=1',
    ]) expect(outcome(checkFromQuery, q), q).toStrictEqual(outcome(reference, q));
  });

  it('on 20,000 queries built from hostile pieces', () => {
    fc.assert(fc.property(fc.array(piece, { maxLength: 14 }).map((a) => a.join('')), (q) => {
      expect(outcome(checkFromQuery, q)).toStrictEqual(outcome(reference, q));
    }), { numRuns: 20_000 });
  });

  it('on arbitrary strings', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (q) => {
      expect(outcome(checkFromQuery, q)).toStrictEqual(outcome(reference, q));
    }), { numRuns: 5_000 });
  });
});
