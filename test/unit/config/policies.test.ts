import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ALGORITHM_CODES, type Algorithm, type CompiledPolicy } from '../../../src/config/policy-spec.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';

const MAX = Number.MAX_SAFE_INTEGER;
const ALGORITHMS: Algorithm[] = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window'];
const PERIOD_RULE = 'must be a positive integer of ms or a duration string such as "1m"';
const COUNT_RULE = 'must be a non-negative safe integer';
const ALGO_LIST = 'token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency';
const POLICY_KEYS = 'algorithm, limit, period, burst, timeZone, leaseTtl, limits, descriptors, version, guard, consistency, lease, onStoreError, carryOver, shadow, shadowOf, allow, deny, authCost, rls, scope, onLimit, maxDelayMs';

/** The error compilePolicies throws (fails the test when it does not throw). */
function configErrorOf(policies: unknown): SluiceError {
  try {
    compilePolicies(policies);
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    const err = e as SluiceError;
    expect(err.code).toBe('CONFIG');
    expect(err.status).toBe(500);
    return err;
  }
  throw new Error('expected compilePolicies to throw');
}

function expectError(policies: unknown, message: string, field: string | undefined): void {
  const err = configErrorOf(policies);
  expect(err.message).toBe(message);
  expect(err.field).toBe(field);
}

function one(spec: Record<string, unknown>, name = 'p'): CompiledPolicy {
  const compiled = compilePolicies({ [name]: spec }).get(name);
  if (compiled === undefined) throw new Error('policy missing');
  return compiled;
}

const BASE = { algorithm: 'token_bucket', limit: 10, period: 1000 };

/** A copy of BASE with `field` replaced, or removed when `value` is the string "(missing)". */
function tenantA(field: string, value: unknown): Record<string, unknown> {
  const spec: Record<string, unknown> = { ...BASE };
  if (value === '(missing)') delete spec[field];
  else spec[field] = value;
  return { tenantA: spec };
}

describe('compilePolicies: the twenty bad policies (13-bad-policy)', () => {
  it.each<[string, unknown, string]>([
    ['period', 0, `${PERIOD_RULE} (got 0)`],
    ['period', -1000, `${PERIOD_RULE} (got -1000)`],
    ['period', 1.5, `${PERIOD_RULE} (got 1.5)`],
    ['period', Number.NaN, `${PERIOD_RULE} (got NaN)`],
    ['period', 'abc', `${PERIOD_RULE} (got "abc")`],
    ['period', '10x', `${PERIOD_RULE} (got "10x")`],
    ['period', '', `${PERIOD_RULE} (got "")`],
    ['period', '0s', `${PERIOD_RULE} (got "0s")`],
    ['period', '(missing)', 'is required: a positive integer of ms or a duration string such as "1m"'],
    ['limit', -1, `${COUNT_RULE} (got -1)`],
    ['limit', 2.5, `${COUNT_RULE} (got 2.5)`],
    ['limit', Number.NaN, `${COUNT_RULE} (got NaN)`],
    ['limit', Number.POSITIVE_INFINITY, `${COUNT_RULE} (got Infinity)`],
    ['limit', 2 ** 53, `${COUNT_RULE} (got 9007199254740992)`],
    ['limit', '10', `${COUNT_RULE} (got "10")`],
    ['limit', '(missing)', 'is required: a non-negative safe integer'],
    ['burst', -1, `${COUNT_RULE} (got -1)`],
    ['burst', 2.5, `${COUNT_RULE} (got 2.5)`],
    ['algorithm', 'leaky_queue', `must be one of ${ALGO_LIST} (got "leaky_queue")`],
    ['algorithm', '(missing)', `is required: one of ${ALGO_LIST}`],
  ])('%s = %s names tenantA and the field', (field, value, why) => {
    const err = configErrorOf(tenantA(field, value));
    expect(err.message).toBe(`policy "tenantA": ${field}: ${why}`);
    expect(err.field).toBe(field);
  });
});

describe('compilePolicies: one inline limit', () => {
  it('compiles to engine units with defaults filled in', () => {
    const map = compilePolicies({ tenantA: { algorithm: 'gcra', limit: 10, period: '1m' } });
    expect([...map.keys()]).toEqual(['tenantA']);
    const p = map.get('tenantA') as CompiledPolicy;
    expect(p).toEqual({
      name: 'tenantA',
      version: expect.stringMatching(/^[0-9a-f]{8}$/),
      limits: [{ algorithm: 'gcra', algorithmCode: 1, limit: 10, periodMs: 60_000, burst: 10, name: 'tenantA' }],
      descriptors: [],
      guard: null,
      consistency: 'local',
      lease: null,
      onStoreError: 'local',
      versionGiven: false,
      carryOver: false,
      shadow: false,
      shadowOf: null,
      allow: [],
      deny: [],
      authCost: 1,
      rls: null,
      scope: 'local',
    });
  });

  it.each(ALGORITHMS)('maps %s to its kernel code', (algorithm) => {
    expect(one({ algorithm, limit: 1, period: 1 }).limits[0].algorithmCode).toBe(ALGORITHM_CODES[algorithm]);
  });

  it('has the documented algorithm codes', () => {
    expect(ALGORITHM_CODES).toEqual({ token_bucket: 0, gcra: 1, fixed_window: 2, sliding_window: 3, sliding_log: 5, concurrency: 6 });
  });

  it.each([
    ['500ms', 500],
    ['1s', 1000],
    ['90s', 90_000],
    ['1m', 60_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    [250, 250],
  ])('period %s is %d ms', (period, ms) => {
    expect(one({ ...BASE, period }).limits[0].periodMs).toBe(ms);
  });

  it.each(ALGORITHMS)('accepts limit 0 for %s (it denies everything)', (algorithm) => {
    const l = one({ algorithm, limit: 0, period: 1000 }).limits[0];
    expect(l.limit).toBe(0);
    expect(l.burst).toBe(0);
  });

  it('keeps an explicit burst for the buckets, and burst 0', () => {
    expect(one({ ...BASE, burst: 25 }).limits[0].burst).toBe(25);
    expect(one({ ...BASE, algorithm: 'gcra', burst: 3 }).limits[0].burst).toBe(3);
    expect(one({ ...BASE, burst: 0 }).limits[0].burst).toBe(0);
  });

  it('normalises -0 to 0', () => {
    const l = one({ ...BASE, limit: -0, burst: -0 }).limits[0];
    expect(Object.is(l.limit, 0)).toBe(true);
    expect(Object.is(l.burst, 0)).toBe(true);
  });

  it('treats keys whose value is undefined as absent', () => {
    expect(one({ ...BASE, burst: undefined, version: undefined, guard: undefined }).limits[0].burst).toBe(10);
  });

  it.each(['fixed_window', 'sliding_window'])('accepts burst equal to limit for %s', (algorithm) => {
    expect(one({ algorithm, limit: 10, period: 1000, burst: 10 }).limits[0].burst).toBe(10);
  });

  it.each(['fixed_window', 'sliding_window'])('rejects another burst for %s', (algorithm) => {
    expectError(
      { w: { algorithm, limit: 10, period: 1000, burst: 20 } },
      `policy "w": burst: burst applies to token_bucket and gcra only (got 20 for ${algorithm}, whose limit is 10); omit it`,
      'burst',
    );
  });

  it('rejects a burst of the wrong type', () => {
    expectError(tenantA('burst', '5'), `policy "tenantA": burst: ${COUNT_RULE} (got "5")`, 'burst');
    expectError(tenantA('burst', null), `policy "tenantA": burst: ${COUNT_RULE} (got null)`, 'burst');
  });

  it('rejects other algorithm values', () => {
    expectError(tenantA('algorithm', 'TOKEN_BUCKET'), `policy "tenantA": algorithm: must be one of ${ALGO_LIST} (got "TOKEN_BUCKET")`, 'algorithm');
    expectError(tenantA('algorithm', 'constructor'), `policy "tenantA": algorithm: must be one of ${ALGO_LIST} (got "constructor")`, 'algorithm');
    expectError(tenantA('algorithm', 0), `policy "tenantA": algorithm: must be one of ${ALGO_LIST} (got 0)`, 'algorithm');
  });

  it('checks fields in the order algorithm, limit, period, burst', () => {
    expectError({ p: { limit: -1, period: 0 } }, `policy "p": algorithm: is required: one of ${ALGO_LIST}`, 'algorithm');
    expectError({ p: { algorithm: 'gcra', limit: -1, period: 0 } }, `policy "p": limit: ${COUNT_RULE} (got -1)`, 'limit');
    expectError({ p: { algorithm: 'gcra', limit: 1, period: 0, burst: -1 } }, `policy "p": period: ${PERIOD_RULE} (got 0)`, 'period');
  });

  it('rejects unknown keys, naming them', () => {
    expectError(
      { tenantA: { ...BASE, perid: 1000 } },
      `policy "tenantA": perid: unknown key (a policy accepts ${POLICY_KEYS})`,
      'perid',
    );
    expectError(
      { tenantA: { ...BASE, name: 'x' } },
      `policy "tenantA": name: unknown key (a policy accepts ${POLICY_KEYS})`,
      'name',
    );
    expectError(
      { tenantA: { ...BASE, 'a.b': 1 } },
      `policy "tenantA": ["a.b"]: unknown key (a policy accepts ${POLICY_KEYS})`,
      '["a.b"]',
    );
  });

  it('reports an unknown key before a missing field', () => {
    expectError(
      { tenantA: { algorithm: 'gcra', limit: 1, perod: '1s' } },
      `policy "tenantA": perod: unknown key (a policy accepts ${POLICY_KEYS})`,
      'perod',
    );
  });
});

describe('compilePolicies: exactness bounds', () => {
  const I64 = '9223372036854775807';

  it.each(['token_bucket', 'gcra'])('%s accepts limit 2^53-1 per 1000 ms and limit 1 per 2^53-1 ms', (algorithm) => {
    expect(one({ algorithm, limit: MAX, period: 1000 }).limits[0]).toMatchObject({ limit: MAX, burst: MAX, periodMs: 1000 });
    expect(one({ algorithm, limit: 1, period: MAX }).limits[0]).toMatchObject({ limit: 1, burst: 1, periodMs: MAX });
  });

  it.each(['fixed_window', 'sliding_window'])('%s accepts limit 2^53-1 per 1000 ms', (algorithm) => {
    expect(one({ algorithm, limit: MAX, period: 1000 }).limits[0].limit).toBe(MAX);
  });

  it.each(['token_bucket', 'gcra'])('%s: burst * period above 2^63-1 names burst when burst is given', (algorithm) => {
    expectError(
      { p: { algorithm, limit: 1, period: 2048, burst: MAX } },
      `policy "p": burst: burst * period must be at most 2^63 - 1 = ${I64} for exact 64-bit math (got 9007199254740991 * 2048 ms = 18446744073709549568)`,
      'burst',
    );
  });

  it('burst * period above 2^63-1 names limit when burst defaults to limit', () => {
    expectError(
      { p: { algorithm: 'token_bucket', limit: MAX, period: 2048 } },
      `policy "p": limit: limit * period must be at most 2^63 - 1 = ${I64} for exact 64-bit math (got 9007199254740991 * 2048 ms = 18446744073709549568)`,
      'limit',
    );
  });

  // 2^63 - 1 = 7^2 · 73 · 127 · 337 · 92737 · 649657: a limit and a period whose product is exactly the bound.
  const P_EXACT = 92_737 * 649_657;
  const L_EXACT = Number((2n ** 63n - 1n) / BigInt(P_EXACT));

  it('the 2^63-1 bound is inclusive', () => {
    expect(BigInt(L_EXACT) * BigInt(P_EXACT)).toBe(2n ** 63n - 1n);
    expect(one({ algorithm: 'fixed_window', limit: L_EXACT, period: P_EXACT }).limits[0].limit).toBe(L_EXACT);
    expect(one({ algorithm: 'token_bucket', limit: L_EXACT, period: P_EXACT }).limits[0].burst).toBe(L_EXACT);
    const err = configErrorOf({ p: { algorithm: 'fixed_window', limit: L_EXACT + 1, period: P_EXACT } });
    expect(err.field).toBe('limit');
    expect(err.message).toBe(
      `policy "p": limit: limit * period must be at most 2^63 - 1 = ${I64} for exact 64-bit math (got ${L_EXACT + 1} * ${P_EXACT} ms = ${BigInt(L_EXACT + 1) * BigInt(P_EXACT)})`,
    );
  });

  it.each(['fixed_window', 'sliding_window'])('%s: limit * period above 2^63-1 names limit', (algorithm) => {
    expectError(
      { p: { algorithm, limit: MAX, period: '1d' } },
      `policy "p": limit: limit * period must be at most 2^63 - 1 = ${I64} for exact 64-bit math (got 9007199254740991 * 86400000 ms = ${BigInt(MAX) * 86_400_000n})`,
      'limit',
    );
  });

  it('buckets: the longest wait ceil(burst * period / limit) must be a safe integer of ms (names period)', () => {
    expectError(
      { p: { algorithm: 'token_bucket', limit: 1, burst: 1000, period: 2 ** 50 } },
      `policy "p": period: ceil(burst * period / limit) must be at most 2^53 - 1 = 9007199254740991 ms (got ceil(1000 * 1125899906842624 / 1) = 1125899906842624000 ms)`,
      'period',
    );
    expectError(
      { p: { algorithm: 'gcra', limit: 1, burst: 2, period: MAX } },
      `policy "p": period: ceil(burst * period / limit) must be at most 2^53 - 1 = 9007199254740991 ms (got ceil(2 * 9007199254740991 / 1) = 18014398509481982 ms)`,
      'period',
    );
  });

  it('buckets: the wait bound rounds up (3 * P / 2 = 2^53 - 1/2 is refused)', () => {
    const period = Number((2n ** 54n - 1n) / 3n);
    expect(3n * BigInt(period)).toBe(2n ** 54n - 1n);
    expectError(
      { p: { algorithm: 'token_bucket', limit: 2, burst: 3, period } },
      `policy "p": period: ceil(burst * period / limit) must be at most 2^53 - 1 = 9007199254740991 ms (got ceil(3 * ${period} / 2) = 9007199254740992 ms)`,
      'period',
    );
    expect(one({ algorithm: 'token_bucket', limit: 2, burst: 2, period }).limits[0].periodMs).toBe(period);
  });

  it('buckets: no wait bound when limit is 0', () => {
    expect(one({ algorithm: 'token_bucket', limit: 0, burst: 5, period: MAX }).limits[0].burst).toBe(5);
  });

  it('sliding_window: 2 * period must be a safe integer (names period)', () => {
    expect(one({ algorithm: 'sliding_window', limit: 1, period: 2 ** 52 - 1 }).limits[0].periodMs).toBe(2 ** 52 - 1);
    expectError(
      { p: { algorithm: 'sliding_window', limit: 1, period: 2 ** 52 } },
      'policy "p": period: 2 * period must be at most 2^53 - 1 = 9007199254740991 ms for sliding_window (got 2 * 4503599627370496 ms = 9007199254740992 ms)',
      'period',
    );
    expect(one({ algorithm: 'fixed_window', limit: 1, period: MAX }).limits[0].periodMs).toBe(MAX);
  });
});

describe('compilePolicies: limits arrays', () => {
  const second = { algorithm: 'fixed_window', limit: 1000, period: '1h' };

  it('compiles each limit, naming them policy#i unless named', () => {
    const p = one({ limits: [BASE, { ...second, name: 'hourly' }, { ...BASE, algorithm: 'sliding_window' }] }, 'api');
    expect(p.limits).toEqual([
      { algorithm: 'token_bucket', algorithmCode: 0, limit: 10, periodMs: 1000, burst: 10, name: 'api#0' },
      { algorithm: 'fixed_window', algorithmCode: 2, limit: 1000, periodMs: 3_600_000, burst: 1000, name: 'hourly' },
      { algorithm: 'sliding_window', algorithmCode: 3, limit: 10, periodMs: 1000, burst: 10, name: 'api#2' },
    ]);
  });

  it('accepts up to 8 limits', () => {
    expect(one({ limits: Array.from({ length: 8 }, () => BASE) }).limits).toHaveLength(8);
  });

  it('names the field path of a bad limit', () => {
    expectError(
      { tenantA: { limits: [BASE, { ...second, period: -1000 }] } },
      `policy "tenantA": limits[1].period: ${PERIOD_RULE} (got -1000)`,
      'limits[1].period',
    );
    expectError(
      { tenantA: { limits: [{ ...BASE, algorithm: undefined }] } },
      `policy "tenantA": limits[0].algorithm: is required: one of ${ALGO_LIST}`,
      'limits[0].algorithm',
    );
    expectError(
      { tenantA: { limits: [BASE, { ...second, burst: 5 }] } },
      'policy "tenantA": limits[1].burst: burst applies to token_bucket and gcra only (got 5 for fixed_window, whose limit is 1000); omit it',
      'limits[1].burst',
    );
    expectError(
      { tenantA: { limits: [{ ...BASE, limit: MAX, period: 2048 }] } },
      `policy "tenantA": limits[0].limit: limit * period must be at most 2^63 - 1 = 9223372036854775807 for exact 64-bit math (got 9007199254740991 * 2048 ms = 18446744073709549568)`,
      'limits[0].limit',
    );
  });

  it('rejects unknown keys in a limit', () => {
    expectError(
      { tenantA: { limits: [{ ...BASE, descriptors: [] }] } },
      'policy "tenantA": limits[0].descriptors: unknown key (a limit accepts algorithm, limit, period, burst, timeZone, leaseTtl, name)',
      'limits[0].descriptors',
    );
  });

  it('rejects limits mixed with inline fields', () => {
    expectError(
      { tenantA: { algorithm: 'gcra', limit: 5, limits: [BASE] } },
      'policy "tenantA": limits: cannot be combined with inline algorithm, limit: give one inline limit or a limits array, not both',
      'limits',
    );
    expectError(
      { tenantA: { burst: 5, limits: [BASE] } },
      'policy "tenantA": limits: cannot be combined with inline burst: give one inline limit or a limits array, not both',
      'limits',
    );
  });

  it.each<[unknown, string]>([
    [[], '0 entries'],
    [Array.from({ length: 9 }, () => BASE), '9 entries'],
    [BASE, 'an object'],
    ['1m', '"1m"'],
    [null, 'null'],
  ])('rejects limits = %s', (limits, got) => {
    expectError({ tenantA: { limits } }, `policy "tenantA": limits: must be an array of 1 to 8 limits (got ${got})`, 'limits');
  });

  it('rejects a limit that is not an object (holes included)', () => {
    expectError(
      { tenantA: { limits: [BASE, 5] } },
      'policy "tenantA": limits[1]: must be an object {algorithm, limit, period, burst?, timeZone?, name?} (got 5)',
      'limits[1]',
    );
    expectError(
      { tenantA: { limits: [BASE, , BASE] } },
      'policy "tenantA": limits[1]: must be an object {algorithm, limit, period, burst?, timeZone?, name?} (got undefined)',
      'limits[1]',
    );
  });

  it('rejects bad and duplicate limit names', () => {
    expectError(
      { tenantA: { limits: [{ ...BASE, name: 'a b' }] } },
      'policy "tenantA": limits[0].name: must be 1 to 64 characters of A-Z a-z 0-9 _ . - (got "a b")',
      'limits[0].name',
    );
    expectError(
      { tenantA: { limits: [{ ...BASE, name: 'x' }, { ...BASE, name: 'x' }] } },
      'policy "tenantA": limits[1].name: duplicate limit name "x" (also limits[0])',
      'limits[1].name',
    );
  });
});

describe('compilePolicies: the policies object', () => {
  it.each<[unknown, string]>([
    [null, 'null'],
    [undefined, 'undefined'],
    [[], 'an array'],
    ['free', '"free"'],
    [new Map([['p', BASE]]), 'an object'],
  ])('rejects %s', (policies, got) => {
    expectError(policies, `policies: must be an object mapping policy names to policies (got ${got})`, 'policies');
  });

  it('rejects an empty object', () => {
    expectError({}, 'policies: must define at least one policy (got an empty object)', 'policies');
  });

  it.each([
    ['a b', '"a b"'],
    ['', '""'],
    ['x'.repeat(65), `"${'x'.repeat(40)}"...`],
    ['é', '"é"'],
    ['a/b', '"a/b"'],
  ])('rejects the policy name %j', (name, shown) => {
    expectError(
      { [name]: BASE },
      `policies: invalid policy name ${shown}: must be 1 to 64 characters of A-Z a-z 0-9 _ . -`,
      'policies',
    );
  });

  it('accepts names of letters, digits, _ . - up to 64 characters, and null-prototype objects', () => {
    const names = ['a', 'A.b-c_9', 'x'.repeat(64)];
    const policies = Object.create(null) as Record<string, unknown>;
    for (const n of names) policies[n] = BASE;
    expect([...compilePolicies(policies).keys()]).toEqual(names);
  });

  it('rejects a policy that is not an object', () => {
    expectError({ tenantA: 5 }, 'policy "tenantA": must be an object (got 5)', undefined);
    expectError({ tenantA: [BASE] }, 'policy "tenantA": must be an object (got an array)', undefined);
  });

  it('caps the total number of limits at 65535', () => {
    const eight = { limits: Array.from({ length: 8 }, () => BASE) };
    const ok: Record<string, unknown> = {};
    for (let i = 0; i < 8191; i++) ok[`p${i}`] = eight;
    ok.last = { limits: Array.from({ length: 7 }, () => BASE) };
    expect(compilePolicies(ok).size).toBe(8192);
    ok.last = eight;
    expectError(ok, 'policies: too many limits: 65536 in total, at most 65535 across all policies', 'policies');
  });

  it('freezes the compiled policies', () => {
    const p = one({ ...BASE, descriptors: ['tenant'] });
    expect(Object.isFrozen(p)).toBe(true);
    expect(Object.isFrozen(p.limits)).toBe(true);
    expect(Object.isFrozen(p.limits[0])).toBe(true);
    expect(Object.isFrozen(p.descriptors[0])).toBe(true);
  });
});

describe('compilePolicies: descriptors', () => {
  it('compiles names and {name, header}, lower-casing headers', () => {
    const p = one({ ...BASE, descriptors: ['tenant', { name: 'user', header: 'X-User-ID' }, { name: 'action' }] });
    expect(p.descriptors).toEqual([
      { name: 'tenant', header: null, from: 'query' },
      { name: 'user', header: 'x-user-id', from: 'header' },
      { name: 'action', header: null, from: 'query' },
    ]);
  });

  it('accepts an empty list', () => {
    expect(one({ ...BASE, descriptors: [] }).descriptors).toEqual([]);
  });

  it.each<[unknown, string, string]>([
    ['tenant', 'descriptors', 'must be an array of descriptor names or {name, header} objects (got "tenant")'],
    [['a b'], 'descriptors[0]', 'must be 1 to 64 characters of A-Z a-z 0-9 _ . - (got "a b")'],
    [[''], 'descriptors[0]', 'must be 1 to 64 characters of A-Z a-z 0-9 _ . - (got "")'],
    [['t', 7], 'descriptors[1]', 'must be a descriptor name or a {name, header} object (got 7)'],
    [['t', 't'], 'descriptors[1]', 'duplicate descriptor "t" (also descriptors[0])'],
    [['t', { name: 't' }], 'descriptors[1].name', 'duplicate descriptor "t" (also descriptors[0])'],
    [[{ header: 'x-t' }], 'descriptors[0].name', 'is required: 1 to 64 characters of A-Z a-z 0-9 _ . -'],
    [[{ name: 5 }], 'descriptors[0].name', 'must be 1 to 64 characters of A-Z a-z 0-9 _ . - (got 5)'],
    [[{ name: 't', header: 'x tenant' }], 'descriptors[0].header', 'must be an HTTP header name such as "x-tenant-id" (got "x tenant")'],
    [[{ name: 't', header: '' }], 'descriptors[0].header', 'must be an HTTP header name such as "x-tenant-id" (got "")'],
    [[{ name: 't', header: 'x:t' }], 'descriptors[0].header', 'must be an HTTP header name such as "x-tenant-id" (got "x:t")'],
    [[{ name: 't', header: 1 }], 'descriptors[0].header', 'must be an HTTP header name such as "x-tenant-id" (got 1)'],
    [[{ name: 't', hdr: 'x' }], 'descriptors[0].hdr', 'unknown key (a descriptor accepts name, header, from)'],
  ])('rejects descriptors %j at %s', (descriptors, field, why) => {
    expectError({ tenantA: { ...BASE, descriptors } }, `policy "tenantA": ${field}: ${why}`, field);
  });
});

describe('compilePolicies: version', () => {
  it('keeps a given string or integer', () => {
    expect(one({ ...BASE, version: 'v2' }).version).toBe('v2');
    expect(one({ ...BASE, version: 3 }).version).toBe('3');
    expect(one({ ...BASE, version: 0 }).version).toBe('0');
  });

  it('defaults to 8 hex chars of sha256 over the canonical JSON of limits and descriptors', () => {
    const canonical = JSON.stringify({
      limits: [['token_bucket', 10, 60_000, 20]],
      descriptors: [['tenant', null], ['user', 'x-user']],
    });
    const expected = createHash('sha256').update(canonical).digest('hex').slice(0, 8);
    const p = one({ algorithm: 'token_bucket', limit: 10, period: '1m', burst: 20, descriptors: ['tenant', { name: 'user', header: 'X-User' }] });
    expect(p.version).toBe(expected);
  });

  it('changes when a number changes, not with the name or the way a number is written', () => {
    const v = one(BASE, 'a').version;
    expect(one(BASE, 'b').version).toBe(v);
    expect(one({ ...BASE, period: '1s' }).version).toBe(v);
    expect(one({ ...BASE, burst: 10 }).version).toBe(v);
    expect(one({ ...BASE, limit: 11 }).version).not.toBe(v);
    expect(one({ ...BASE, period: 1001 }).version).not.toBe(v);
    expect(one({ ...BASE, burst: 11 }).version).not.toBe(v);
    expect(one({ ...BASE, algorithm: 'gcra' }).version).not.toBe(v);
    expect(one({ ...BASE, descriptors: ['tenant'] }).version).not.toBe(v);
  });

  it.each<[unknown, string]>([
    ['', '""'],
    ['v 2', '"v 2"'],
    ['x'.repeat(65), `"${'x'.repeat(40)}"...`],
    [1.5, '1.5'],
    [null, 'null'],
    [{}, 'an object'],
  ])('rejects version %s', (version, got) => {
    expectError(
      { tenantA: { ...BASE, version } },
      `policy "tenantA": version: must be an integer or a string of 1 to 64 visible ASCII characters (got ${got})`,
      'version',
    );
  });
});

describe('compilePolicies: guard', () => {
  it('accepts a guard naming another unguarded policy', () => {
    const map = compilePolicies({ free: { ...BASE, guard: 'global' }, global: BASE });
    expect(map.get('free')?.guard).toBe('global');
    expect(map.get('global')?.guard).toBeNull();
  });

  it('rejects a guard that does not exist, is itself, or is guarded', () => {
    expectError({ free: { ...BASE, guard: 'glob' }, global: BASE }, 'policy "free": guard: no policy named "glob" in policies', 'guard');
    expectError({ free: { ...BASE, guard: 'free' } }, 'policy "free": guard: a policy cannot guard itself', 'guard');
    expectError(
      { free: { ...BASE, guard: 'mid' }, mid: { ...BASE, guard: 'top' }, top: BASE },
      'policy "free": guard: policy "mid" has a guard of its own ("top"); a guard cannot itself be guarded',
      'guard',
    );
    expectError({ free: { ...BASE, guard: 'constructor' } }, 'policy "free": guard: no policy named "constructor" in policies', 'guard');
    expectError({ free: { ...BASE, guard: 1 } }, 'policy "free": guard: must be the name of another policy (got 1)', 'guard');
  });
});
