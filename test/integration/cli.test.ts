/**
 * The built CLI (`node bin/sluice.js`, which runs dist/: `npm run build` first) as child processes:
 * `serve` on port 0 (the chosen port read from its "sluice serving" JSON log line), `check` against it
 * (exit 0 admitted, 3 denied, 1 error), SIGTERM draining, `replay` of the shared trace, and bad config files.
 */
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT, runSluice, send, spawnServe, type ServeProcess } from '../helpers/server.js';
import { sharedFileFromRoot } from '../helpers/shared.js';
import { commandHelp } from '../../src/cli/usage.js';

/** The shared access trace as `sluice replay` is given it, from the project root (the CLI's cwd here). */
const TRACE = sharedFileFromRoot('data/access-trace.csv');

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-cli-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const running: ServeProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.kill()));
});

async function serve(extra: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const p = await spawnServe(extra, { env });
  running.push(p);
  return p;
}

function writeTmp(name: string, text: string): string {
  const file = path.join(tmp, name);
  writeFileSync(file, text);
  return file;
}

/** Resolves with the exit, or with 'timeout' after `ms`. */
function exitWithin(p: ServeProcess, ms: number): Promise<{ code: number | null; signal: NodeJS.Signals | null } | 'timeout'> {
  return Promise.race([p.exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), ms))]);
}

describe('sluice --help, --version and usage errors', () => {
  it('--help prints every command\'s usage and exits 0', async () => {
    const r = await runSluice(['--help']);
    expect({ code: r.code, stderr: r.stderr }).toStrictEqual({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^usage:\n  sluice serve .*\n(?: {16}.*\n)*  sluice check .*\n  sluice replay .*\n  sluice validate .*\n  sluice --version\n/);
    expect(/^environment: (.*)$/m.exec(r.stdout)?.[1].split(', ')).toEqual(expect.arrayContaining([
      'SLUICE_THREADS', 'SLUICE_DRAIN_TIMEOUT_MS', 'SLUICE_ANNOUNCE_SECRET', 'SLUICE_ANNOUNCE_SECRET_FILE', 'SLUICE_GRPC_PORT', 'REDIS_SENTINELS', 'REDIS_MASTER',
    ]));
  });

  it('serve --help lists every flag serve accepts, each with its environment variable (the table in src/cli/usage.ts)', async () => {
    const r = await runSluice(['serve', '--help']);
    expect(r.stdout).toBe(commandHelp('serve') + '\n');
    for (const line of ['--drain-timeout MS', '--announce-secret S', '--announce-secret-file FILE', '[env SLUICE_THREADS]', '[env SLUICE_DRAIN_TIMEOUT_MS]',
      '[env SLUICE_ANNOUNCE_SECRET]', '[env SLUICE_ANNOUNCE_SECRET_FILE]']) expect(r.stdout).toContain(line);
  });

  it.each([['check', '--help'], ['serve', '-h'], ['replay', '--help'], ['validate', '--help']])('%s %s prints that command\'s usage only', async (cmd, flag) => {
    const r = await runSluice([cmd, flag]);
    expect({ code: r.code, stderr: r.stderr }).toStrictEqual({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(new RegExp(`^usage:\\n  sluice ${cmd} `));
    expect(r.stdout.match(/ {2}sluice [a-z]+ /g)).toStrictEqual([`  sluice ${cmd} `]);
  });

  it('--version prints the package.json version', async () => {
    const { version } = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(await runSluice(['--version'])).toStrictEqual({ code: 0, signal: null, stdout: `sluice ${version}\n`, stderr: '' });
  });

  it('every usage error exits 2 with the message and the command\'s usage on stderr', async () => {
    const cases: Array<[string[], string]> = [
      [[], 'usage:\n'],
      [['frobnicate'], 'sluice: unknown command "frobnicate"\n'],
      [['check', '--bogus'], "sluice check: Unknown option '--bogus'"],
      [['check', '--key', 'k'], 'sluice check: needs --policy\n'],
      [['check', '--policy', 'free', '--cost', '1.5'], 'sluice check: --cost must be an integer'],
      [['check', '--policy', 'free', '--cost', '-1'], 'sluice check: --cost must be an integer in [0, 9007199254740991] (got "-1")\n'],
      [['check', '--policy', 'free', '--cost=-1'], 'sluice check: --cost must be an integer in [0, 9007199254740991] (got "-1")\n'],
      [['check', '--policy', 'free', '--key', 'k', '--url', 'notaurl'], 'sluice check: --url must be an http:// or https:// URL (got "notaurl")\n'],
      [['check', '--policy', 'free', '--key', 'a', '--key', 'b'], 'sluice check: --key given 2 times ("a", "b"): give it once\n'],
      [['check', '--policy', 'free', '--key', 'k', '--url', 'http://127.0.0.1:1', '--url', 'http://127.0.0.1:2'],
        'sluice check: --url given 2 times ("http://127.0.0.1:1", "http://127.0.0.1:2"): give it once\n'],
      [['check', '--policy', 'free', '--descriptor', 'tenant=a', '--descriptor', 'tenant=b'],
        'sluice check: --descriptor: tenant given twice ("a", "b"): give each descriptor name once\n'],
      [['serve', '--port', '1', '--port', '2'], 'sluice serve: --port given 2 times ("1", "2"): give it once\n'],
      [['check', '--policy', 'free', '--descriptor', 'x'], 'sluice check: --descriptor must be name=value (got "x")\n'],
      [['replay'], 'sluice replay: takes one trace file (got 0)\n'],
      [['replay', 'a.csv', '--top', 'x'], 'sluice replay: --top must be an integer'],
      [['serve', '--port', '70000'], 'sluice serve: --port must be an integer in [0, 65535]'],
      [['serve', '--redis', 'redis://x', '--redis-cluster', 'a:1'], 'sluice serve: --redis and --redis-cluster: give one\n'],
      [['validate'], 'sluice validate: takes one or more policies files\n'],
    ];
    // one process each, all at once: each is a Node start-up, and nothing they do depends on another
    const runs = await Promise.all(cases.map(([args]) => runSluice(args)));
    cases.forEach(([args, start], i) => {
      const r = runs[i];
      expect({ args, code: r.code, stdout: r.stdout, start: r.stderr.startsWith(start), usage: r.stderr.includes('usage:\n') })
        .toStrictEqual({ args, code: 2, stdout: '', start: true, usage: true });
    });
  });

  it('a malformed SLUICE_URL is a usage error naming the variable', async () => {
    const r = await runSluice(['check', '--policy', 'free', '--key', 'k'], { env: { SLUICE_URL: 'notaurl' } });
    expect({ code: r.code, stdout: r.stdout, first: r.stderr.split('\n')[0] })
      .toStrictEqual({ code: 2, stdout: '', first: 'sluice check: SLUICE_URL must be an http:// or https:// URL (got "notaurl")' });
  });
});

describe('sluice serve + sluice check', () => {
  it('serve --port 0 logs the chosen port; check exits 0 and prints the decision as JSON', async () => {
    const p = await serve();
    const line = p.logs().find((l) => l.msg === 'sluice serving')!;
    expect({ host: line.host, port: line.port, shards: line.shards, policies: line.policies, name: line.name, level: line.level })
      .toStrictEqual({ host: '127.0.0.1', port: p.port, shards: 0, policies: ['free', 'paid', 'global'], name: 'sluice', level: 30 });
    expect(p.port).toBeGreaterThan(0);
    expect((await send(`${p.url}/healthz`)).json).toStrictEqual({ status: 'ok' });

    const r = await runSluice(['check', '--url', p.url, '--policy', 'free', '--key', 'k']);
    expect(r).toStrictEqual({
      code: 0, signal: null, stderr: '',
      stdout: '{"allowed":true,"limit":100,"remaining":99,"resetAfterMs":600,"retryAfterMs":0,"policy":"free"}\n',
    });
    const viaEnv = await runSluice(['check', '--policy', 'free', '--descriptor', 'tenant=acme', '--descriptor', 'action=read', '--cost', '2'],
      { env: { SLUICE_URL: p.url } });
    expect({ code: viaEnv.code, body: JSON.parse(viaEnv.stdout) }).toStrictEqual({
      code: 0, body: { allowed: true, limit: 100, remaining: 98, resetAfterMs: 1200, retryAfterMs: 0, policy: 'free' },
    });
  });

  it('a denied check exits 3 and still prints the decision', async () => {
    const p = await serve();
    const spend = await runSluice(['check', '--url', p.url, '--policy', 'free', '--key', 'd', '--cost', '100']);
    expect({ code: spend.code, body: JSON.parse(spend.stdout) }).toStrictEqual({
      code: 0, body: { allowed: true, limit: 100, remaining: 0, resetAfterMs: 60_000, retryAfterMs: 0, policy: 'free' },
    });
    // 100 tokens take a minute to come back: the next cost-100 check is denied whatever the real clock did meanwhile.
    const again = await runSluice(['check', '--url', p.url, '--policy', 'free', '--key', 'd', '--cost', '100']);
    const body = JSON.parse(again.stdout) as Record<string, unknown>;
    expect({ code: again.code, allowed: body.allowed, policy: body.policy, stderr: again.stderr })
      .toStrictEqual({ code: 3, allowed: false, policy: 'free', stderr: '' });
    expect(body.retryAfterMs).toBeGreaterThan(30_000);
    const never = await runSluice(['check', '--url', p.url, '--policy', 'free', '--key', 'n', '--cost', '101']);
    expect({ code: never.code, body: JSON.parse(never.stdout) }).toStrictEqual({
      code: 3,
      body: { allowed: false, limit: 100, remaining: 100, resetAfterMs: 0, retryAfterMs: null, policy: 'free', reason: "cost exceeds the limit's capacity" },
    });
  });

  it('an error answer exits 1 and prints the problem; a usage error exits 2', async () => {
    const p = await serve();
    const r = await runSluice(['check', '--url', p.url, '--policy', 'nope', '--key', 'k']);
    expect({ code: r.code, body: JSON.parse(r.stdout) }).toStrictEqual({
      code: 1,
      body: { type: 'about:blank', title: 'Bad Request', status: 400, detail: 'policy: unknown policy "nope"', field: 'policy', code: 'UNKNOWN_POLICY' },
    });
    const noPolicy = await runSluice(['check', '--url', p.url, '--key', 'k']);
    expect({ code: noPolicy.code, stdout: noPolicy.stdout, first: noPolicy.stderr.split('\n')[0] })
      .toStrictEqual({ code: 2, stdout: '', first: 'sluice check: needs --policy' });
  });

  it('SIGTERM drains: logs draining and stopped, exits 0 within a few seconds, and nothing listens afterwards', async () => {
    const p = await serve();
    expect((await send(`${p.url}/v1/check?policy=free&key=k`)).status).toBe(200);
    p.child.kill('SIGTERM');
    const exit = await exitWithin(p, 5000);
    expect(exit).toStrictEqual({ code: 0, signal: null });
    const msgs = p.logs().map((l) => l.msg);
    expect(msgs.slice(msgs.indexOf('sluice serving'))).toStrictEqual(['sluice serving', 'draining', 'stopped']);
    expect(p.logs().find((l) => l.msg === 'draining')!.signal).toBe('SIGTERM');
    expect(p.stderr()).toBe('');
    await expect(send(`${p.url}/healthz`)).rejects.toThrow();
  });

  it('SIGTERM with a request in flight: the request is answered, then the process exits 0', async () => {
    const p = await serve();
    const body = '{"policy":"free","key":"late"}';
    let received = '';
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect(p.port, '127.0.0.1', () => resolve(s));
      s.once('error', reject);
    });
    socket.on('error', () => undefined);
    socket.setEncoding('utf8').on('data', (d: string) => (received += d));
    socket.write(`POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 8)}`);
    await new Promise((r) => setTimeout(r, 250));
    p.child.kill('SIGTERM');
    expect(await exitWithin(p, 300)).toBe('timeout'); // still draining: one request in flight
    socket.write(body.slice(8));
    expect(await exitWithin(p, 5000)).toStrictEqual({ code: 0, signal: null });
    expect(received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(received.endsWith('{"allowed":true,"limit":100,"remaining":99,"resetAfterMs":600,"retryAfterMs":0,"policy":"free"}')).toBe(true);
    socket.destroy();
  });

  it('serve --shards 2 with a config file: answers from worker shards, drains on SIGINT', async () => {
    // A token bucket refilling one token per 30 min: no window boundary can fall between the three checks.
    const file = writeTmp('two.yaml', 'policies:\n  p: { algorithm: token_bucket, limit: 2, period: 1h }\n');
    const p = await serve(['--config', file, '--shards', '2']);
    const line = p.logs().find((l) => l.msg === 'sluice serving')!;
    expect({ shards: line.shards, policies: line.policies }).toStrictEqual({ shards: 2, policies: ['p'] });
    const got = [];
    for (let i = 0; i < 3; i++) {
      const r = await runSluice(['check', '--url', p.url, '--policy', 'p', '--key', 'k']);
      got.push([r.code, (JSON.parse(r.stdout) as { remaining: number }).remaining]);
    }
    expect(got).toStrictEqual([[0, 1], [0, 0], [3, 0]]);
    p.child.kill('SIGINT');
    expect(await exitWithin(p, 5000)).toStrictEqual({ code: 0, signal: null });
  });
});

describe('sluice replay', () => {
  it('--json on the shared trace with examples/trace-per-client.yaml: 8509 admitted, 1490 denied', async () => {
    const r = await runSluice(['replay', TRACE, '--config', 'examples/trace-per-client.yaml', '--json'], { timeoutMs: 60_000 });
    expect({ code: r.code, stderr: r.stderr }).toStrictEqual({ code: 0, stderr: '' });
    const out = JSON.parse(r.stdout) as Array<{ policy: string; admitted: number; denied: number; mostLimited: unknown[] }>;
    expect(out.map((p) => ({ policy: p.policy, admitted: p.admitted, denied: p.denied, top: p.mostLimited.length })))
      .toStrictEqual([{ policy: 'per-client', admitted: 8509, denied: 1490, top: 10 }]);
    expect(out[0].mostLimited[0]).toStrictEqual({ key: 'c1162', admitted: 86, denied: 271 });
  }, 60_000);

  it('the text report', async () => {
    const r = await runSluice(['replay', TRACE, '--config', 'examples/trace-per-client.yaml', '--top', '2'], { timeoutMs: 60_000 });
    expect(r).toStrictEqual({
      code: 0, signal: null, stderr: '',
      stdout: [
        `replay of ${TRACE}`,
        '',
        'policy per-client: 9999 checks, 8509 admitted, 1490 denied (14.9% denied)',
        '  most-limited keys:',
        '    c1162                    denied    271  admitted     86',
        '    c0097                    denied    209  admitted     64',
        '',
      ].join('\n'),
    });
  }, 60_000);

  it('--compare FILE --json: both configs per policy and the difference', async () => {
    const r = await runSluice(['replay', TRACE, '--config', 'examples/trace-per-client.yaml',
      '--compare', 'examples/trace-per-client-candidate.yaml', '--json'], { timeoutMs: 60_000 });
    expect({ code: r.code, stderr: r.stderr }).toStrictEqual({ code: 0, stderr: '' });
    const out = JSON.parse(r.stdout) as { trace: string; a: string; b: string; policies: Array<Record<string, any>> };
    expect(out).toMatchObject({ trace: TRACE, a: 'examples/trace-per-client.yaml', b: 'examples/trace-per-client-candidate.yaml' });
    expect(out.policies.map((p) => [p.policy, p.a.admitted, p.a.denied, p.b.admitted, p.b.denied, p.diff.admitted, p.diff.denied]))
      .toStrictEqual([['per-client', 8509, 1490, 8626, 1373, 117, -117]]);
  }, 60_000);
});

describe('sluice validate', () => {
  it('exits 0 for good files, naming each with its number of policies', async () => {
    const one = writeTmp('one.yaml', 'policies:\n  a: { algorithm: fixed_window, limit: 1, period: 1s }\n');
    const r = await runSluice(['validate', one, 'examples/trace-per-client.yaml']);
    expect(r).toStrictEqual({ code: 0, signal: null, stdout: `${one}: ok (1 policy)\nexamples/trace-per-client.yaml: ok (1 policy)\n`, stderr: '' });
  });

  it('prints every error with the file and the path inside it, and exits 1', async () => {
    const bad = writeTmp('many-errors.yaml', [
      'policies:',
      '  a: { algorithm: token_bucket, limit: -1, period: 1m }',
      '  b: { algorithm: fixed_window, limit: 5, period: 0s, guard: a }', // a guard that is itself invalid: no cascade
      '  c: { algorithm: nope, limit: 5, period: 1s }',
      '  d: { algorithm: fixed_window, limit: 5, period: 1s, guard: zz }',
      'server: { port: 99999, bogus: 1 }',
      '',
    ].join('\n'));
    const good = writeTmp('fine.yaml', 'policies:\n  a: { algorithm: fixed_window, limit: 1, period: 1s }\n');
    const r = await runSluice(['validate', bad, good]);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr.split('\n') }).toStrictEqual({
      code: 1,
      stdout: `${good}: ok (1 policy)\n`,
      stderr: [
        `${bad}: server.port: must be an integer from 0 to 65535 (got 99999)`,
        expect.stringMatching(/: server\.bogus: unknown key \(accepted: port, host, maxBodyBytes, authDenyStatus, stream, admin\b/),
        `${bad}: policies.a.limit: must be a non-negative safe integer (got -1)`,
        `${bad}: policies.b.period: must be a positive integer of ms or a duration string such as "1m" (got "0s")`,
        `${bad}: policies.c.algorithm: must be one of token_bucket, gcra, fixed_window, sliding_window, sliding_log, concurrency (got "nope")`,
        expect.stringMatching(new RegExp(`^${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: policies\\.d\\.guard: .*"zz"`)),
        '',
      ],
    });
  });

  it("a file in envoyproxy/ratelimit's format: every error, nested descriptors included, with its path", async () => {
    const bad = writeTmp('envoy-errors.yaml', [
      'domain: edge',
      'descriptors:',
      '  - key: remote_address',
      '    rate_limit: { unit: fortnight, requests_per_unit: 5 }',
      '    descriptors:',
      '      - { key: path, value: /login, rate_limit: { unit: minute, requests_per_unit: -1 } }',
      '  - { key: user, rate_limit: { unit: minute, requests_per_unit: 10, replaces: [x] } }',
      '  - { key: ok, rate_limit: { unit: hour, requests_per_unit: 10 }, shadow_mode: maybe }',
      '',
    ].join('\n'));
    const r = await runSluice(['validate', bad, 'examples/gateways/envoy/ratelimit-config.yaml']);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr.split('\n') }).toStrictEqual({
      code: 1,
      stdout: 'examples/gateways/envoy/ratelimit-config.yaml: ok (2 policies)\n',
      stderr: [
        `${bad}: descriptors[0].rate_limit.unit: must be one of second, minute, hour, day, week, month, year (got "fortnight")`,
        `${bad}: descriptors[0].descriptors[0].rate_limit.requests_per_unit: must be an integer from 0 to 4294967295 (got -1)`,
        `${bad}: descriptors[1].rate_limit.replaces: is not supported by sluice (every matched rule applies; none replaces another)`,
        `${bad}: descriptors[2].shadow_mode: must be true or false (got "maybe")`,
        '',
      ],
    });
  });

  it('a YAML syntax error or a missing file is one error naming the file', async () => {
    const broken = writeTmp('broken.yaml', 'policies:\n  a: { algorithm: token_bucket\n');
    const missing = path.join(tmp, 'absent.yaml');
    const r = await runSluice(['validate', broken, missing]);
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')).toStrictEqual([
      expect.stringMatching(/: line \d+, column \d+: invalid YAML: /),
      `${missing}: cannot read: ENOENT: no such file or directory, open '${missing}'`,
      '',
    ]);
  });
});

describe('bad config files', () => {
  const BAD_PERIOD = 'policies:\n  free:\n    algorithm: token_bucket\n    limit: 100\n    period: 0s\n';

  it('serve exits 1 naming the file and the path inside it', async () => {
    const file = writeTmp('bad-period.yaml', BAD_PERIOD);
    const r = await runSluice(['serve', '--config', file, '--host', '127.0.0.1', '--port', '0']);
    expect(r).toStrictEqual({
      code: 1, signal: null, stdout: '',
      stderr: `sluice: ${file}: policies.free.period: must be a positive integer of ms or a duration string such as "1m" (got "0s")\n`,
    });
  });

  it('serve --region without regions.names in the file, and a region not listed, exit 1 naming the flag', async () => {
    const plain = writeTmp('no-regions.yaml', 'policies:\n  free: { algorithm: token_bucket, limit: 1, period: 1s }\n');
    const r = await runSluice(['serve', '--config', plain, '--host', '127.0.0.1', '--port', '0', '--region', 'eu']);
    expect(r).toStrictEqual({ code: 1, signal: null, stdout: '', stderr: 'sluice: sluice serve: --region: needs regions.names in the policies file: the list of every region\n' });
    const listed = writeTmp('regions.yaml', 'policies:\n  free: { algorithm: token_bucket, limit: 1, period: 1s }\nregions: { names: [eu, us] }\n');
    const bad = await runSluice(['serve', '--config', listed, '--host', '127.0.0.1', '--port', '0'], { env: { SLUICE_REGION: 'ap' } });
    expect(bad).toStrictEqual({ code: 1, signal: null, stdout: '', stderr: 'sluice: sluice serve: SLUICE_REGION: must be one of the region names eu, us (got "ap")\n' });
  });

  it('serve --threads 2 with a policy decided in Redis exits 1 before starting, naming --threads and the policy (not "give the redis option")', async () => {
    const file = writeTmp('strict.yaml', 'policies:\n  tb: { algorithm: token_bucket, limit: 10, period: 1s, consistency: strict }\n');
    const why = 'more than 1 front thread needs local policies only (consistency: local; Redis is reached from the main thread only), and policy "tb" has consistency strict: run 1 thread or make the policy local';
    // nothing listens on port 1: the refusal comes before any connection
    const args = ['serve', '--config', file, '--host', '127.0.0.1', '--port', '0', '--redis', 'redis://127.0.0.1:1', '--shards', '2'];
    const [flag, viaEnv] = await Promise.all([runSluice([...args, '--threads', '2']), runSluice(args, { env: { SLUICE_THREADS: '3' } })]);
    expect(flag).toStrictEqual({ code: 1, signal: null, stdout: '', stderr: `sluice: sluice serve: --threads 2: ${why}\n` });
    expect(viaEnv).toStrictEqual({ code: 1, signal: null, stdout: '', stderr: `sluice: sluice serve: SLUICE_THREADS 3: ${why}\n` });
  });

  it('replay exits 1 naming the file and the path; SLUICE_CONFIG is read the same way', async () => {
    const file = writeTmp('bad-burst.yaml', 'policies:\n  w:\n    algorithm: fixed_window\n    limit: 5\n    period: 1m\n    burst: 9\n');
    const r = await runSluice(['replay', TRACE, '--config', file]);
    expect({ code: r.code, stdout: r.stdout }).toStrictEqual({ code: 1, stdout: '' });
    expect(r.stderr.startsWith(`sluice: ${file}: policies.w.burst: `)).toBe(true);
    const viaEnv = await runSluice(['serve', '--host', '127.0.0.1', '--port', '0'], { env: { SLUICE_CONFIG: file } });
    expect({ code: viaEnv.code, stderr: viaEnv.stderr }).toStrictEqual({ code: 1, stderr: r.stderr });
  });

  it('YAML syntax errors name the file, line and column; a missing file names the file', async () => {
    const file = writeTmp('bad-syntax.yaml', 'policies:\n  free: { algorithm: token_bucket\n');
    const r = await runSluice(['serve', '--config', file, '--port', '0']);
    expect({ code: r.code, stderr: r.stderr }).toStrictEqual({ code: 1, stderr: expect.stringMatching(new RegExp(`^sluice: ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: line \\d+, column \\d+: invalid YAML: `)) });
    const missing = path.join(tmp, 'missing.yaml');
    const m = await runSluice(['serve', '--config', missing, '--port', '0']);
    expect({ code: m.code, stderr: m.stderr }).toStrictEqual({ code: 1, stderr: `sluice: ${missing}: cannot read: ENOENT: no such file or directory, open '${missing}'\n` });
  });
});
