/**
 * Every code example of the README is a file in examples/ that this test runs: a fenced block in JavaScript or
 * TypeScript must say which file it is (```js file=examples/NAME.mjs) and be that file's text exactly, and each
 * such file runs to exit 0 with `node` (its assertions pass). Examples that need a running sluice or Redis get
 * SLUICE_URL (a `sluice serve` on a free port) and REDIS_URL (a redis-server of their own). Every YAML block is
 * loaded by the configuration loader, as `sluice serve --config` would.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { configFromDocument } from '../../src/config/schema.js';
import { PROJECT_ROOT, spawnServe, type ServeProcess } from '../helpers/server.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';

const run = promisify(execFile);
const README = readFileSync(path.join(PROJECT_ROOT, 'README.md'), 'utf8');

interface Block {
  line: number;
  lang: string;
  file: string | undefined;
  text: string;
}

function blocks(md: string): Block[] {
  const out: Block[] = [];
  const re = /^```(\w*)([^\n]*)\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(md); m !== null; m = re.exec(md)) {
    out.push({ line: md.slice(0, m.index).split('\n').length, lang: m[1], file: /\bfile=(\S+)/.exec(m[2])?.[1], text: m[3] });
  }
  return out;
}

const code = blocks(README).filter((b) => /^(js|ts|javascript|typescript|mjs)$/.test(b.lang));
const yamlBlocks = blocks(README).filter((b) => b.lang === 'yaml');

let serve: ServeProcess;
let redis: TestRedis;
beforeAll(async () => {
  [serve, redis] = await Promise.all([spawnServe(), startRedis()]);
}, 30_000);
afterAll(async () => {
  await Promise.all([serve?.kill(), redis?.stop()]);
});

describe('README code examples', () => {
  it('every JavaScript/TypeScript block names its examples/ file and is exactly that file', () => {
    expect(code.length).toBeGreaterThanOrEqual(4);
    for (const b of code) {
      expect(b.file, `README line ${b.line}: a code block without file=examples/...`).toMatch(/^examples\/[\w.-]+\.mjs$/);
      expect(b.text, `README line ${b.line} differs from ${b.file}`).toBe(readFileSync(path.join(PROJECT_ROOT, b.file!), 'utf8'));
    }
  });

  it('every YAML block is a configuration the loader accepts (a fragment without policies gets a one-policy stand-in)', () => {
    expect(yamlBlocks.length).toBeGreaterThanOrEqual(7);
    for (const b of yamlBlocks) {
      const doc = parse(b.text) as Record<string, unknown>;
      const whole = doc.policies === undefined && doc.domain === undefined
        ? { ...doc, policies: { p: { algorithm: 'fixed_window', limit: 1, period: 1000 } } }
        : doc;
      const config = configFromDocument(whole, `README line ${b.line}`);
      expect(config.policies.size, `README line ${b.line}`).toBeGreaterThanOrEqual(1);
    }
  });

  it.each([...new Set(code.map((b) => b.file).filter((f) => f !== undefined))])('%s runs and its assertions hold', async (file) => {
    const { stdout } = await run(process.execPath, [file], {
      cwd: PROJECT_ROOT, timeout: 30_000, env: { ...process.env, SLUICE_URL: serve.url.replace(/^http/, 'ws'), REDIS_URL: redis.url },
    });
    if (file === 'examples/express.mjs') {
      expect(stdout).toBe([
        'k1 200 "api";r=1;t=30', 'k1 200 "api";r=0;t=30', 'k1 429 "api";r=0;t=30',
        '(no key) 200 "api";r=1;t=30', '(no key) 200 "api";r=0;t=30', '(no key) 429 "api";r=0;t=30', '',
      ].join('\n'));
    }
    if (file === 'examples/client.mjs') expect(stdout).toMatch(/^denied: retry in \d+ ms\nready: 1 token\(s\)\n$/);
  }, 40_000);
});
