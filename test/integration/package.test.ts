/**
 * The package as a user gets it: `npm pack` of this checkout (built already: `npm test` builds first), the
 * tarball installed into a new project in a temporary folder, then the library imported from there (in-thread
 * and with a worker shard, so the packed dist/ and build/kernel.wasm are what load) and the installed
 * `sluice` command run (`--version`, `validate`, `serve` + `check`).
 *
 * The install takes the dependencies from the npm cache when it has them (`--prefer-offline`) and from the
 * registry otherwise, so the test needs the cache of `npm ci` or a reachable registry.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insideLocalWindow } from '../helpers/redis.js';
import { PROJECT_ROOT, runSluice, spawnServe, type ServeProcess } from '../helpers/server.js';

const run = promisify(execFile);
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const pkg = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { name: string; version: string };

let tmp: string;
let project: string;
let bin: string;
let packed: string[];

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-pack-'));
  // --ignore-scripts: `prepare` would rebuild what `npm test` has just built
  const { stdout } = await run(NPM, ['pack', '--ignore-scripts', '--json', '--pack-destination', tmp], { cwd: PROJECT_ROOT });
  const [info] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  packed = info.files.map((f) => f.path).sort();
  project = path.join(tmp, 'app');
  await run('mkdir', [project]);
  writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', type: 'module', private: true }));
  await run(NPM, ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', path.join(tmp, info.filename)], { cwd: project });
  bin = path.join(project, 'node_modules', pkg.name, 'bin', 'sluice.js');
}, 180_000);

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('npm pack', () => {
  it('ships the built library, the kernel, the Lua scripts, the command, the LICENSE and the README, and no sources or tests', () => {
    expect(packed).toEqual(expect.arrayContaining([
      'LICENSE', 'README.md', 'package.json', 'bin/sluice.js', 'build/kernel.wasm', 'lua/token_bucket.lua',
      'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/client/index.js', 'dist/src/shard/worker.js', 'dist/src/cli/index.js',
    ]));
    expect(packed.filter((p) => /^(src|test|assembly|bench|dist\/bench|node_modules)\//.test(p) || p.endsWith('.test.ts'))).toStrictEqual([]);
    expect(readFileSync(path.join(PROJECT_ROOT, 'LICENSE'), 'utf8')).toMatch(/^MIT License\n\nCopyright \(c\) \d{4} sluice contributors\n/);
  });
});

describe('installed into another project', () => {
  /** Runs an ES module in the installed project; resolves to its stdout, parsed as JSON. */
  async function inProject(code: string): Promise<unknown> {
    const file = path.join(project, `check-${Math.random().toString(36).slice(2)}.mjs`);
    writeFileSync(file, code);
    const { stdout } = await run(process.execPath, [file], { cwd: project });
    return JSON.parse(stdout);
  }

  it.each([0, 1])("`import { createLimiter } from 'sluice'` decides exactly, shards %i", async (shards) => {
    const out = await inProject(`
      import { createLimiter } from 'sluice';
      import { createClient } from 'sluice/client';
      const limiter = await createLimiter({
        policies: { p: { algorithm: 'token_bucket', limit: 2, period: 60000, burst: 2 } }, shards: ${shards}, clock: () => 120000,
      });
      const d = [];
      for (let i = 0; i < 3; i++) d.push(await limiter.check({ policy: 'p', key: 'k', cost: 1 }));
      await limiter.close();
      console.log(JSON.stringify({ client: typeof createClient, d: d.map((x) => [x.allowed, x.remaining, x.retryAfterMs]) }));
    `);
    expect(out).toStrictEqual({ client: 'function', d: [[true, 1, 0], [true, 0, 0], [false, 0, 30_000]] });
  }, 30_000);

  it('the sluice command: --version, validate, and serve + check', async () => {
    expect(await runSluice(['--version'], { bin, cwd: project })).toStrictEqual({ code: 0, signal: null, stdout: `sluice ${pkg.version}\n`, stderr: '' });
    const file = path.join(project, 'policies.yaml');
    writeFileSync(file, 'policies:\n  api:\n    algorithm: fixed_window\n    limit: 1\n    period: 1h\n');
    expect(await runSluice(['validate', file], { bin, cwd: project })).toStrictEqual({ code: 0, signal: null, stdout: `${file}: ok (1 policy)\n`, stderr: '' });
    let serve: ServeProcess | undefined;
    // 1 an hour in a fixed window on the server's wall clock (epoch-aligned): both checks (a command each) in
    // one hour, or the second is admitted in the next
    await insideLocalWindow(3_600_000, 10_000);
    try {
      serve = await spawnServe(['--config', file], { bin, cwd: project });
      const first = await runSluice(['check', '--url', serve.url, '--policy', 'api', '--key', 'k'], { bin, cwd: project });
      const second = await runSluice(['check', '--url', serve.url, '--policy', 'api', '--key', 'k'], { bin, cwd: project });
      expect([first.code, JSON.parse(first.stdout).allowed, second.code, JSON.parse(second.stdout).allowed]).toStrictEqual([0, true, 3, false]);
    } finally {
      await serve?.kill();
    }
  }, 60_000 + 10_000); // and insideLocalWindow's longest wait
});
