import { readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG_FILE, DEFAULT_CONFIG_YAML, defaultConfig } from '../../../src/config/default.js';
import { loadConfigFile, parseConfig } from '../../../src/config/load.js';
import { compilePolicies } from '../../../src/config/policies.js';
import { isSluiceError, type SluiceError } from '../../../src/util/errors.js';

const FIXTURES = path.resolve(process.cwd(), 'test/fixtures/config');
const fixture = (name: string): string => path.join(FIXTURES, name);

const PERIOD_RULE = 'must be a positive integer of ms or a duration string such as "1m"';
const POLICY_KEYS = 'algorithm, limit, period, burst, timeZone, leaseTtl, limits, descriptors, version, guard, consistency, lease, onStoreError, carryOver, shadow, shadowOf, allow, deny, authCost, rls, scope, onLimit, maxDelayMs';
const NAME_RULE = 'must be 1 to 64 characters of A-Z a-z 0-9 _ . -';

async function loadError(file: string): Promise<SluiceError> {
  try {
    await loadConfigFile(file);
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    expect((e as SluiceError).code).toBe('CONFIG');
    return e as SluiceError;
  }
  throw new Error(`expected ${file} to be rejected`);
}

function parseError(text: string, file = 'policies.yaml'): SluiceError {
  try {
    parseConfig(text, file);
  } catch (e) {
    expect(isSluiceError(e)).toBe(true);
    expect((e as SluiceError).code).toBe('CONFIG');
    return e as SluiceError;
  }
  throw new Error('expected the document to be rejected');
}

/** fixture -> [message after "<file>: ", the error's field (the document path; undefined for YAML errors)] */
const BAD: Record<string, [string, string | undefined]> = {
  'bad-unknown-top-key.yaml': ['logging: unknown key (accepted: policies, engine, server, redis, region, globalRedis, regions)', 'logging'],
  'bad-unknown-policy-key.yaml': [`policies.free.perid: unknown key (a policy accepts ${POLICY_KEYS})`, 'policies.free.perid'],
  'bad-period.yaml': [`policies.free.period: ${PERIOD_RULE} (got "0s")`, 'policies.free.period'],
  'bad-limit.yaml': ['policies.free.limit: must be a non-negative safe integer (got "100")', 'policies.free.limit'],
  'bad-algorithm.yaml': [
    'policies.free.algorithm: must be one of token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency (got "leaky_queue")',
    'policies.free.algorithm',
  ],
  'bad-burst-window.yaml': [
    'policies.free.burst: burst applies to token_bucket and gcra only (got 200 for fixed_window, whose limit is 100); omit it',
    'policies.free.burst',
  ],
  'bad-exactness.yaml': [
    'policies.huge.limit: limit * period must be at most 2^63 - 1 = 9223372036854775807 for exact 64-bit math (got 9007199254740991 * 86400000 ms = 778222015609621622400000)',
    'policies.huge.limit',
  ],
  'bad-yaml-syntax.yaml': ['line 5, column 5: invalid YAML: Flow sequence in block collection must be sufficiently indented and end with a ]', undefined],
  'bad-duplicate-key.yaml': ['line 3, column 3: invalid YAML: Map keys must be unique', undefined],
  'bad-multiple-documents.yaml': ['line 3, column 1: invalid YAML: a policies file holds a single YAML document', undefined],
  'bad-alias.yaml': ['invalid YAML: Unresolved alias (the anchor must be set before the alias): base', undefined],
  'bad-empty.yaml': ['(root): must be a mapping with a top-level "policies" key (got null)', '(root)'],
  'bad-root-list.yaml': ['(root): must be a mapping with a top-level "policies" key (got an array)', '(root)'],
  'bad-missing-policies.yaml': ['policies: is required: a mapping of policy names to policies', 'policies'],
  'bad-policies-empty.yaml': ['policies: must define at least one policy (got an empty object)', 'policies'],
  'bad-policies-null.yaml': ['policies: must be an object mapping policy names to policies (got null)', 'policies'],
  'bad-policy-name.yaml': [`policies: invalid policy name "free tier": ${NAME_RULE}`, 'policies'],
  'bad-policy-not-mapping.yaml': ['policies.free: must be an object (got "token_bucket")', 'policies.free'],
  'bad-guard.yaml': ['policies.free.guard: no policy named "globl" in policies', 'policies.free.guard'],
  'bad-list-cidr.yaml': [
    'policies.per-ip.allow[2]: is not a valid CIDR range: the prefix length must be 0 to 32 for IPv4 (got "192.168.0.0/33")',
    'policies.per-ip.allow[2]',
  ],
  'bad-shadow-of.yaml': ['policies.candidate.shadowOf: no policy named "fre" in policies', 'policies.candidate.shadowOf'],
  'bad-guard-chain.yaml': [
    'policies.free.guard: policy "region" has a guard of its own ("global"); a guard cannot itself be guarded',
    'policies.free.guard',
  ],
  'bad-limits-mixed.yaml': [
    'policies.free.limits: cannot be combined with inline algorithm, limit, period: give one inline limit or a limits array, not both',
    'policies.free.limits',
  ],
  'bad-limits-entry.yaml': [`policies.api.limits[1].period: ${PERIOD_RULE} (got "1.5h")`, 'policies.api.limits[1].period'],
  'bad-limits-empty.yaml': ['policies.api.limits: must be an array of 1 to 8 limits (got 0 entries)', 'policies.api.limits'],
  'bad-descriptor-header.yaml': [
    'policies.free.descriptors[1].header: must be an HTTP header name such as "x-tenant-id" (got "x user")',
    'policies.free.descriptors[1].header',
  ],
  'bad-descriptor-duplicate.yaml': [
    'policies.free.descriptors[2]: duplicate descriptor "tenant" (also descriptors[0])',
    'policies.free.descriptors[2]',
  ],
  'bad-version.yaml': [
    'policies.free.version: must be an integer or a string of 1 to 64 visible ASCII characters (got 1.5)',
    'policies.free.version',
  ],
  'bad-engine-shards.yaml': ['engine.shards: must be an integer from 0 to 64 (got 65)', 'engine.shards'],
  'bad-engine-unknown-key.yaml': ['engine.shard: unknown key (accepted: shards, maxKeys, maxLogEntries, maxDelayed)', 'engine.shard'],
  'bad-engine-max-keys.yaml': ['engine.maxKeys: must be a positive safe integer (got 0)', 'engine.maxKeys'],
  'bad-engine-not-mapping.yaml': ['engine: must be a mapping (got 4)', 'engine'],
  'bad-server-port.yaml': ['server.port: must be an integer from 0 to 65535 (got 70000)', 'server.port'],
  'bad-server-host.yaml': ['server.host: must be a non-empty string (got "")', 'server.host'],
  'bad-server-max-body-bytes.yaml': ['server.maxBodyBytes: must be a positive safe integer (got 1.5)', 'server.maxBodyBytes'],
  'bad-server-auth-deny-status.yaml': ['server.authDenyStatus: must be 429 or 403 (got 401)', 'server.authDenyStatus'],
  'bad-server-unknown-key.yaml': [
    'server.tls: unknown key (accepted: port, host, maxBodyBytes, authDenyStatus, stream, admin, grpcPort, statusPage, threads, hotKeys)',
    'server.tls',
  ],
  'bad-server-status-page.yaml': ['server.statusPage: must be true or false (got "yes")', 'server.statusPage'],
  'bad-server-hot-keys.yaml': ['server.hotKeys.metrics: must be an integer from 0 to 1000 (got 5000)', 'server.hotKeys.metrics'],
  'bad-redis-sentinels.yaml': ['redis.sentinels[0]: must be host:port (got "10.0.0.1")', 'redis.sentinels[0]'],
  'bad-redis-unknown-key.yaml': ['redis.url: unknown key (accepted: sentinels, master)', 'redis.url'],
};

describe('loadConfigFile: one fixture per failure mode', () => {
  it('has an expectation for every bad-*.yaml fixture', () => {
    const files = readdirSync(FIXTURES).filter((f) => f.startsWith('bad-')).sort();
    expect(files).toEqual(Object.keys(BAD).sort());
  });

  it.each(Object.entries(BAD))('%s', async (name, [message, field]) => {
    const file = fixture(name);
    const err = await loadError(file);
    expect(err.message).toBe(`${file}: ${message}`);
    expect(err.field).toBe(field);
  });

  it('names a file it cannot read', async () => {
    const file = fixture('does-not-exist.yaml');
    const err = await loadError(file);
    expect(err.message).toBe(`${file}: cannot read: ENOENT: no such file or directory, open '${file}'`);
  });
});

describe('loadConfigFile: basic.yaml', () => {
  it('loads every section', async () => {
    const config = await loadConfigFile(fixture('basic.yaml'));
    expect([...config.policies.keys()]).toEqual(['free', 'paid', 'global']);
    expect(config.policies.get('free')).toEqual({
      name: 'free',
      version: expect.stringMatching(/^[0-9a-f]{8}$/),
      limits: [{ algorithm: 'token_bucket', algorithmCode: 0, limit: 100, periodMs: 60_000, burst: 50, name: 'free' }],
      descriptors: [
        { name: 'tenant', header: null, from: 'query' },
        { name: 'action', header: null, from: 'query' },
      ],
      guard: 'global',
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
    expect(config.policies.get('paid')).toEqual({
      name: 'paid',
      version: '7',
      limits: [
        { algorithm: 'gcra', algorithmCode: 1, limit: 10, periodMs: 1000, burst: 10, name: 'per-second' },
        { algorithm: 'sliding_window', algorithmCode: 3, limit: 10_000, periodMs: 3_600_000, burst: 10_000, name: 'paid#1' },
      ],
      descriptors: [
        { name: 'tenant', header: null, from: 'query' },
        { name: 'user', header: 'x-user-id', from: 'header' },
      ],
      guard: 'global',
      consistency: 'local',
      lease: null,
      onStoreError: 'local',
      versionGiven: true,
      carryOver: false,
      shadow: false,
      shadowOf: null,
      allow: [],
      deny: [],
      authCost: 1,
      rls: null,
      scope: 'local',
    });
    expect(config.policies.get('global')).toEqual({
      name: 'global',
      version: 'v1',
      limits: [{ algorithm: 'fixed_window', algorithmCode: 2, limit: 200_000, periodMs: 60_000, burst: 200_000, name: 'global' }],
      descriptors: [],
      guard: null,
      consistency: 'local',
      lease: null,
      onStoreError: 'local',
      versionGiven: true,
      carryOver: false,
      shadow: false,
      shadowOf: null,
      allow: [],
      deny: [],
      authCost: 1,
      rls: null,
      scope: 'local',
    });
    expect(config.engine).toEqual({ shards: 2, maxKeys: 1_000_000 });
    expect(config.server).toEqual({ port: 8080, host: '127.0.0.1', maxBodyBytes: 65_536, authDenyStatus: 403 });
    expect((config.raw as { policies: { free: { period: string } } }).policies.free.period).toBe('1m');
  });

  it('compiles the policies exactly as the library option would', async () => {
    const config = await loadConfigFile(fixture('basic.yaml'));
    const raw = config.raw as { policies: unknown };
    expect(config.policies).toEqual(compilePolicies(raw.policies));
  });
});

describe('parseConfig', () => {
  it('prefixes the file name and document path', () => {
    const err = parseError('policies:\n  free: { algorithm: token_bucket, limit: 100, period: -1000 }\n');
    expect(err.message).toBe(`policies.yaml: policies.free.period: ${PERIOD_RULE} (got -1000)`);
    expect(err.field).toBe('policies.free.period');
    expect(err.status).toBe(500);
  });

  it('quotes policy names that contain a dot in the path', () => {
    const err = parseError('policies:\n  a.b: { algorithm: gcra, limit: 1, period: 1s, burst: -1 }\n', 'p.yml');
    expect(err.message).toBe('p.yml: policies["a.b"].burst: must be a non-negative safe integer (got -1)');
  });

  it('reports an unknown policy key with an odd name as a quoted path', () => {
    const err = parseError('policies:\n  free: { algorithm: gcra, limit: 1, period: 1s, "x y": 1 }\n');
    expect(err.message).toBe(`policies.yaml: policies.free["x y"]: unknown key (a policy accepts ${POLICY_KEYS})`);
  });

  it('treats empty engine and server sections as empty mappings and leaves defaults to their owners', () => {
    const config = parseConfig('policies:\n  p: { algorithm: gcra, limit: 1, period: 1s }\nengine:\nserver:\n', 'x.yaml');
    expect(config.engine).toEqual({});
    expect(config.server).toEqual({});
    const bare = parseConfig('policies:\n  p: { algorithm: gcra, limit: 1, period: 1s }\n', 'x.yaml');
    expect(bare.engine).toEqual({});
    expect(bare.server).toEqual({});
  });

  it('accepts the edges of the engine and server ranges', () => {
    const config = parseConfig(
      [
        'policies: { p: { algorithm: gcra, limit: 1, period: 1s } }',
        'engine: { shards: 0, maxKeys: 1 }',
        'server: { port: 0, host: "::", maxBodyBytes: 1, authDenyStatus: 429 }',
      ].join('\n'),
      'x.yaml',
    );
    expect(config.engine).toEqual({ shards: 0, maxKeys: 1 });
    expect(config.server).toEqual({ port: 0, host: '::', maxBodyBytes: 1, authDenyStatus: 429 });
    expect(parseConfig('policies: { p: { algorithm: gcra, limit: 1, period: 1s } }\nengine: { shards: 64 }\nserver: { port: 65535 }', 'x').engine.shards).toBe(64);
  });

  it.each<[string, string]>([
    ['engine: { shards: -1 }', 'engine.shards: must be an integer from 0 to 64 (got -1)'],
    ['engine: { shards: "2" }', 'engine.shards: must be an integer from 0 to 64 (got "2")'],
    ['engine: { maxKeys: 9007199254740992 }', 'engine.maxKeys: must be a positive safe integer (got 9007199254740992)'],
    ['engine: [1]', 'engine: must be a mapping (got an array)'],
    ['server: { port: -1 }', 'server.port: must be an integer from 0 to 65535 (got -1)'],
    ['server: { port: 80.5 }', 'server.port: must be an integer from 0 to 65535 (got 80.5)'],
    ['server: { host: 1 }', 'server.host: must be a non-empty string (got 1)'],
    ['server: { authDenyStatus: "429" }', 'server.authDenyStatus: must be 429 or 403 (got "429")'],
    ['server: true', 'server: must be a mapping (got true)'],
  ])('rejects %s', (line, message) => {
    const err = parseError(`policies: { p: { algorithm: gcra, limit: 1, period: 1s } }\n${line}\n`, 'f.yaml');
    expect(err.message).toBe(`f.yaml: ${message}`);
  });

  it('ignores a leading byte-order mark', () => {
    expect(parseConfig('\uFEFFpolicies: { p: { algorithm: gcra, limit: 1, period: 1s } }\n', 'x').policies.size).toBe(1);
  });

  it('refuses documents that expand too many aliases', () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 6; i++) lines.push(`${'bcdefg'[i]}: &${'bcdefg'[i]} [${Array(10).fill(`*${'abcdef'[i]}`).join(', ')}]`);
    const err = parseError(lines.join('\n'), 'bomb.yaml');
    expect(err.message).toBe('bomb.yaml: invalid YAML: Excessive alias count indicates a resource exhaustion attack');
  });
});

describe('the built-in default', () => {
  it('parses to the reference policies', () => {
    const config = defaultConfig();
    const tb = (limit: number, burst: number, name: string) => ({
      algorithm: 'token_bucket',
      algorithmCode: 0,
      limit,
      periodMs: 60_000,
      burst,
      name,
    });
    const tenantAction = [
      { name: 'tenant', header: null, from: 'query' },
      { name: 'action', header: null, from: 'query' },
    ];
    const hex8 = expect.stringMatching(/^[0-9a-f]{8}$/);
    expect([...config.policies.values()]).toEqual([
      { name: 'free', version: hex8, limits: [tb(100, 100, 'free')], descriptors: tenantAction, guard: 'global', consistency: 'local', lease: null, onStoreError: 'local', versionGiven: false, carryOver: false, shadow: false, shadowOf: null, allow: [], deny: [], authCost: 1, rls: null, scope: 'local' },
      { name: 'paid', version: hex8, limits: [tb(10_000, 2000, 'paid')], descriptors: tenantAction, guard: 'global', consistency: 'local', lease: null, onStoreError: 'local', versionGiven: false, carryOver: false, shadow: false, shadowOf: null, allow: [], deny: [], authCost: 1, rls: null, scope: 'local' },
      { name: 'global', version: hex8, limits: [tb(200_000, 20_000, 'global')], descriptors: [], guard: null, consistency: 'local', lease: null, onStoreError: 'local', versionGiven: false, carryOver: false, shadow: false, shadowOf: null, allow: [], deny: [], authCost: 1, rls: null, scope: 'local' },
    ]);
    expect(config.engine).toEqual({});
    expect(config.server).toEqual({});
  });

  it('is commented YAML and gives a fresh copy each time', () => {
    expect(DEFAULT_CONFIG_YAML).toMatch(/^# /);
    expect(DEFAULT_CONFIG_FILE).toBe('<built-in default>');
    expect(defaultConfig().policies).not.toBe(defaultConfig().policies);
  });
});
