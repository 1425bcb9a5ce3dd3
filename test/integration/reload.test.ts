/**
 * Hot reload in `sluice serve` (the built CLI as child processes; `npm run build` first): the policies file
 * changed under a server in mid-load, invalid files rejected with the reason logged, SIGHUP, two instances
 * sharing a Redis (a reload on one reaches the other within a second), and the version on /readyz and
 * /metrics.
 *
 * The numbers refill one token a day (limit L per L days), so over a test's few seconds no token comes back
 * and every `remaining` is exact on the real clock.
 */
import os from 'node:os';
import path from 'node:path';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { policySetVersion } from '../../src/config/policy-version.js';
import { send, spawnServe, type Answer, type ServeProcess } from '../helpers/server.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';
import { ManualClock } from '../helpers/clock.js';
import { createLimiter, type Limiter } from '../../src/index.js';
import { startServer } from '../../src/server/http.js';
import { bindEngine, engineOf } from '../../src/engine/handle.js';

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-reload-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const running: ServeProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.kill()));
});

async function serve(args: string[]): Promise<ServeProcess> {
  const p = await spawnServe(args, { timeoutMs: 30_000 });
  running.push(p);
  return p;
}

/** `api` (L tokens per L days, guarded by `global`): one token a day whatever L is. */
function policies(l: number): string {
  return [
    'policies:',
    '  api:',
    '    algorithm: token_bucket',
    `    limit: ${l}`,
    `    period: ${l}d`,
    '    guard: global',
    '  global:',
    '    algorithm: token_bucket',
    `    limit: ${100 * l}`,
    `    period: ${100 * l}d`,
    '',
  ].join('\n');
}
const OLD = policies(1000);
const NEW = policies(2000);
/** The RateLimit-Policy header of `api` under each set (w in seconds). */
const HEADER = {
  1000: '"api";q=1000;w=86400000;sluice-burst=1000, "global";q=100000;w=8640000000;sluice-burst=100000',
  2000: '"api";q=2000;w=172800000;sluice-burst=2000, "global";q=200000;w=17280000000;sluice-burst=200000',
} as const;

function versionOf(text: string): string {
  return policySetVersion(parseConfig(text, 'test').policies);
}

let files = 0;
function configFile(text: string): string {
  const file = path.join(tmp, `policies-${++files}.yaml`);
  writeFileSync(file, text);
  return file;
}

/** Replaces the file's content: in place (truncate + write) or as editors do (write a temp file, rename it over). */
function rewrite(file: string, text: string, how: 'in-place' | 'rename'): void {
  if (how === 'in-place') return writeFileSync(file, text);
  const temp = `${file}.tmp-${process.pid}`;
  writeFileSync(temp, text);
  renameSync(temp, file);
}

async function until<T>(read: () => Promise<T> | T, ok: (v: T) => boolean, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${JSON.stringify(v)})`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function readyVersion(p: ServeProcess): Promise<string> {
  return ((await send(`${p.url}/readyz`)).json as { policies: string }).policies;
}

function check(p: ServeProcess, key: string): Promise<Answer> {
  return send(`${p.url}/v1/check?policy=api&key=${encodeURIComponent(key)}`);
}

/** Metric lines `name{labels} value` whose name is `name`. */
async function metricLines(p: ServeProcess, name: string): Promise<string[]> {
  const text = (await send(`${p.url}/metrics`)).text;
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

async function reloads(p: ServeProcess): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const l of await metricLines(p, 'sluice_policy_reloads_total')) {
    const m = /source="(\w+)",result="(\w+)"\} (\d+)/.exec(l)!;
    if (Number(m[3]) !== 0) out[`${m[1]}/${m[2]}`] = Number(m[3]);
  }
  return out;
}

function logsWith(p: ServeProcess, msg: string): Array<Record<string, any>> {
  return p.logs().filter((l) => l.msg === msg);
}

describe.each([
  { shards: 0, how: 'in-place' as const },
  { shards: 2, how: 'rename' as const },
])('the policies file changed under load (shards $shards, written $how)', ({ shards, how }) => {
  it('no check fails or mixes rule sets, and checks after the change follow the new numbers exactly', async () => {
    const file = configFile(OLD);
    const p = await serve(['--config', file, '--shards', String(shards)]);
    expect(await readyVersion(p)).toBe(versionOf(OLD));

    // Clients, each on its own key, checking one after another until each has seen 60 answers under the new set.
    const CLIENTS = 6;
    type Seen = { status: number; header: string | null; body: any };
    const seen: Seen[][] = Array.from({ length: CLIENTS }, () => []);
    let changed = false;
    const client = async (i: number): Promise<void> => {
      let newer = 0;
      while (newer < 60) {
        const a = await check(p, `client-${i}`);
        seen[i].push({ status: a.status, header: a.headers.get('ratelimit-policy'), body: a.json });
        if (a.json?.limit === 2000) newer++;
        if (seen[i].length > 900) throw new Error('the reload was not seen after 900 checks');
      }
    };
    const load = Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
    // Change the file once every client is under way.
    await until(() => seen.every((s) => s.length >= 20), (v) => v, 10_000, 'clients under way');
    rewrite(file, NEW, how);
    changed = true;
    await load;

    for (const answers of seen) {
      // Every answer is a 200 with a decision; its header and its numbers are the old set's or the new set's.
      const firstNew = answers.findIndex((a) => a.body?.limit === 2000);
      expect(firstNew).toBeGreaterThan(0);
      answers.forEach((a, n) => {
        const l = n < firstNew ? 1000 : 2000;
        // Before the change the key spends from the old bucket; after it, a fresh bucket of the new numbers.
        const spent = n < firstNew ? n + 1 : n - firstNew + 1;
        // resetAfterMs is what `spent` tokens take to come back (a day each) less the time since the bucket's
        // first check: the real clock runs, by less than this test's own time limit.
        const full = spent * 86_400_000;
        const reset = a.body?.resetAfterMs;
        expect({ n, status: a.status, header: a.header, body: a.body }).toStrictEqual({
          n, status: 200, header: HEADER[l],
          body: { allowed: true, limit: l, remaining: l - spent, resetAfterMs: reset > full - 120_000 && reset <= full ? reset : `${full} less under 120000 (got ${reset})`, retryAfterMs: 0, policy: 'api' },
        });
      });
    }
    expect(await readyVersion(p)).toBe(versionOf(NEW));
    expect(logsWith(p, 'policies reloaded').map((l) => [l.source, l.version, l.previous, l.added, l.removed, l.changed]))
      .toStrictEqual([['file', versionOf(NEW), versionOf(OLD), [], [], ['api', 'global']]]);
    expect(await reloads(p)).toStrictEqual({ 'file/ok': 1 });
  });
});

describe.each([0, 2])('a check in flight across a reload (shards %i, in-process server)', (shards) => {
  it('is answered whole under the set it was issued under: its decision and its RateLimit-Policy header', async () => {
    const clock = new ManualClock();
    const real = await createLimiter({ policies: parseConfig(OLD, 'old').policies, shards, clock: clock.now, maxKeys: 1024 });
    // The reload happens right after the first check is issued, before it is decided and answered: the window
    // the load test above can only hit by chance (a check in flight at the moment of the reload), made certain.
    let reloading: Promise<unknown> | null = null;
    // With shards 0 the server decides in uWS's callback through the limiter's synchronous checkNow (its
    // engine handle, bound to the wrapper too); the reload then comes after the decision, before the answer is written.
    const handle = engineOf(real)!;
    const now = handle.checkNow;
    const limiter = Object.assign(Object.create(real) as Limiter, {
      check(req: Parameters<Limiter['check']>[0]) {
        const decided = real.check(req);
        reloading ??= real.reload(parseConfig(NEW, 'new').policies);
        return decided;
      },
    });
    bindEngine(limiter, {
      ...handle,
      checkNow: now === null ? null : (req) => {
        const decided = now(req);
        reloading ??= real.reload(parseConfig(NEW, 'new').policies);
        return decided;
      },
    });
    const server = await startServer({ limiter, host: '127.0.0.1', port: 0, stream: false });
    try {
      const url = `http://127.0.0.1:${server.port}/v1/check?policy=api&key=k`;
      const first = await send(url);
      expect([first.status, first.headers.get('ratelimit-policy'), first.json]).toStrictEqual([200, HEADER[1000], {
        allowed: true, limit: 1000, remaining: 999, resetAfterMs: 86_400_000, retryAfterMs: 0, policy: 'api',
      }]);
      await reloading;
      const second = await send(url);
      expect([second.status, second.headers.get('ratelimit-policy'), second.json]).toStrictEqual([200, HEADER[2000], {
        allowed: true, limit: 2000, remaining: 1999, resetAfterMs: 86_400_000, retryAfterMs: 0, policy: 'api',
      }]);
    } finally {
      await server.close();
      await real.close();
    }
  });
});

describe('invalid files and signals', () => {
  it('an invalid file (bad YAML; valid YAML with a bad period) leaves the old rules in force and logs why', async () => {
    const file = configFile(OLD);
    const p = await serve(['--config', file]);
    expect((await check(p, 'k')).json.remaining).toBe(999);

    const rejected = async (n: number): Promise<Record<string, any>> =>
      (await until(() => logsWith(p, 'policy reload rejected'), (ls) => ls.length >= n, 5000, `rejection ${n}`))[n - 1];

    rewrite(file, 'policies:\n  api: [unclosed\n', 'rename');
    const bad = await rejected(1);
    expect({ level: bad.level, file: bad.file, source: bad.source, code: bad.err.code }).toStrictEqual({ level: 50, file, source: 'file', code: 'CONFIG' });
    expect(bad.err.message).toMatch(new RegExp(`^${escape(file)}: line \\d+, column \\d+: invalid YAML: `));

    rewrite(file, OLD.replace('period: 1000d', 'period: 10x'), 'in-place');
    const period = await rejected(2);
    expect({ level: period.level, file: period.file, message: period.err.message, field: period.err.field }).toStrictEqual({
      level: 50, file,
      message: `${file}: policies.api.period: must be a positive integer of ms or a duration string such as "1m" (got "10x")`,
      field: 'policies.api.period',
    });

    // The old rules, and the key's state, are still in force.
    expect(await readyVersion(p)).toBe(versionOf(OLD));
    const a = await check(p, 'k');
    expect([a.headers.get('ratelimit-policy'), a.json.remaining]).toStrictEqual([HEADER[1000], 998]);
    expect(await reloads(p)).toStrictEqual({ 'file/rejected': 2 });

    // Fixing the file applies it.
    rewrite(file, NEW, 'rename');
    await until(() => readyVersion(p), (v) => v === versionOf(NEW), 5000, 'the fixed file in force');
    // A fresh bucket of the new numbers: its first check is exact to the ms.
    expect((await check(p, 'k')).json).toStrictEqual({
      allowed: true, limit: 2000, remaining: 1999, resetAfterMs: 86_400_000, retryAfterMs: 0, policy: 'api',
    });
    expect(await reloads(p)).toStrictEqual({ 'file/rejected': 2, 'file/ok': 1 });
  });

  it('a Kubernetes ConfigMap update (the ..data symlink swapped to a new directory) is seen, and the next one too', async () => {
    // <dir>/policies.yaml -> ..data/policies.yaml, ..data -> ..v1: what kubelet lays out for a mounted ConfigMap.
    const dir = mkdtempSync(path.join(tmp, 'configmap-'));
    const version = (name: string, text: string): void => {
      mkdirSync(path.join(dir, name));
      writeFileSync(path.join(dir, name, 'policies.yaml'), text);
    };
    const swap = (name: string): void => {
      symlinkSync(name, path.join(dir, '..data_tmp'));
      renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
    };
    version('..v1', OLD);
    symlinkSync('..v1', path.join(dir, '..data'));
    symlinkSync('..data/policies.yaml', path.join(dir, 'policies.yaml'));
    const p = await serve(['--config', path.join(dir, 'policies.yaml')]);
    expect(await readyVersion(p)).toBe(versionOf(OLD));
    version('..v2', NEW);
    swap('..v2');
    rmSync(path.join(dir, '..v1'), { recursive: true });
    await until(() => readyVersion(p), (v) => v === versionOf(NEW), 5000, 'the first swap');
    version('..v3', OLD);
    swap('..v3');
    rmSync(path.join(dir, '..v2'), { recursive: true });
    await until(() => readyVersion(p), (v) => v === versionOf(OLD), 5000, 'the second swap');
    expect(await reloads(p)).toStrictEqual({ 'file/ok': 2 });
  });

  it('SIGHUP re-reads the file (the same rules: nothing reloaded, counted as a signal); a missing file keeps the rules', async () => {
    const file = configFile(OLD);
    const p = await serve(['--config', file]);
    expect((await check(p, 'k')).json.remaining).toBe(999);
    p.child.kill('SIGHUP');
    const line = (await until(() => logsWith(p, 'policies unchanged'), (ls) => ls.length === 1, 5000, 'the signal handled'))[0];
    expect([line.source, line.file, line.version]).toStrictEqual(['signal', file, versionOf(OLD)]);
    expect(await reloads(p)).toStrictEqual({ 'signal/ok': 1 });
    expect((await check(p, 'k')).json.remaining).toBe(998);
    expect(p.child.exitCode).toBe(null);

    // A file that is gone: the watch only warns (an editor may be renaming); SIGHUP is a rejected reload.
    rmSync(file);
    await until(() => logsWith(p, 'policies file missing; the rules in force stay'), (ls) => ls.length === 1, 5000, 'the warning');
    p.child.kill('SIGHUP');
    const gone = (await until(() => logsWith(p, 'policy reload rejected'), (ls) => ls.length === 1, 5000, 'the rejection'))[0];
    expect([gone.source, gone.err.code]).toStrictEqual(['signal', 'CONFIG']);
    expect(gone.err.message).toMatch(new RegExp(`^${escape(file)}: cannot read: ENOENT`));
    expect(await reloads(p)).toStrictEqual({ 'signal/ok': 1, 'signal/rejected': 1 });
    expect([await readyVersion(p), (await check(p, 'k')).json.remaining]).toStrictEqual([versionOf(OLD), 997]);
  });

  it('/readyz and /metrics report the version in force, and only that one', async () => {
    const file = configFile(OLD);
    const p = await serve(['--config', file]);
    const r = await send(`${p.url}/readyz`);
    expect([r.status, r.json]).toStrictEqual([200, { status: 'ready', policies: versionOf(OLD) }]);
    expect(await metricLines(p, 'sluice_policies_info')).toStrictEqual([`sluice_policies_info{version="${versionOf(OLD)}"} 1`]);
    expect(await reloads(p)).toStrictEqual({});
    rewrite(file, NEW, 'rename');
    await until(() => readyVersion(p), (v) => v === versionOf(NEW), 5000, 'the new version');
    expect(await metricLines(p, 'sluice_policies_info')).toStrictEqual([`sluice_policies_info{version="${versionOf(NEW)}"} 1`]);
    // Decisions of a policy are counted across the reload.
    await check(p, 'k');
    expect(await metricLines(p, 'sluice_decisions_total')).toContain('sluice_decisions_total{policy="api",result="allowed"} 1');
  });
});

describe('two instances sharing a Redis', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('a reload on one reaches the other within a second; SIGHUP makes an instance re-read its own file', async () => {
    const fileA = configFile(OLD);
    const fileB = configFile(OLD);
    // the instances share an announce secret: a file for one, the environment's for the other is the same text
    const secret = path.join(tmp, 'announce-secret');
    writeFileSync(secret, 'a shared secret of 32 bytes.....\n');
    const [a, b] = await Promise.all([
      serve(['--config', fileA, '--redis', redis.url, '--announce-secret-file', secret]),
      serve(['--config', fileB, '--redis', redis.url, '--announce-secret', 'a shared secret of 32 bytes.....']),
    ]);
    // Both listen on the channel before the change.
    for (const p of [a, b]) {
      await until(() => logsWith(p, 'listening for policy reloads'), (ls) => ls.length === 1, 5000, 'subscribed');
    }
    expect([await readyVersion(a), await readyVersion(b)]).toStrictEqual([versionOf(OLD), versionOf(OLD)]);
    expect((await check(b, 'k')).json.remaining).toBe(999);

    rewrite(fileA, NEW, 'rename');
    await until(() => readyVersion(a), (v) => v === versionOf(NEW), 5000, 'A reloaded');
    // From the moment A enforces the new version, B has one second.
    await until(() => readyVersion(b), (v) => v === versionOf(NEW), 1000, 'B following A');

    const d = await check(b, 'k');
    expect([d.headers.get('ratelimit-policy'), d.json]).toStrictEqual([HEADER[2000], {
      allowed: true, limit: 2000, remaining: 1999, resetAfterMs: 86_400_000, retryAfterMs: 0, policy: 'api',
    }]);
    const heard = logsWith(b, 'policies reloaded');
    expect(heard.map((l) => [l.source, l.version, l.changed])).toStrictEqual([['peer', versionOf(NEW), ['api', 'global']]]);
    expect(heard[0].file).toMatch(/^<peer .+\/\d+\/[0-9a-f]{8}>$/);
    expect(await reloads(a)).toStrictEqual({ 'file/ok': 1 });
    expect(await reloads(b)).toStrictEqual({ 'peer/ok': 1 });

    // B's own file still holds the old rules: SIGHUP applies them, and A follows.
    b.child.kill('SIGHUP');
    await until(() => readyVersion(b), (v) => v === versionOf(OLD), 5000, 'B re-reading its file');
    await until(() => readyVersion(a), (v) => v === versionOf(OLD), 1000, 'A following B');
    expect(await reloads(b)).toStrictEqual({ 'peer/ok': 1, 'signal/ok': 1 });
    expect(await reloads(a)).toStrictEqual({ 'file/ok': 1, 'peer/ok': 1 });
    expect((await check(a, 'k')).json.limit).toBe(1000);
  });
});

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
