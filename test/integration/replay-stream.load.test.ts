/**
 * `sluice replay` on a long trace: a 2,000,000-row trace generated into a temporary folder (40 MB, not in the
 * repository), replayed by the built CLI as a child process. The file is read as a stream, so the process's
 * peak RSS (read by a preloaded module from process.resourceUsage() at exit) stays under 100 MB, and the
 * counts are exact: 1,000 clients × 8 requests in each of 250 seconds against a fixed window of 5 per second
 * admit 5 and deny 3 per client-second. Also: the progress line on a terminal (through script(1)'s
 * pseudo-terminal), none with --quiet or when stderr is not a terminal, and the line's format.
 */
import { spawnSync } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatProgress, ProgressLine } from '../../src/cli/progress.js';
import { PROJECT_ROOT, runSluice, SLUICE_BIN } from '../helpers/server.js';

const CLIENTS = 1000;
const SECONDS = 250;
const PER_SECOND = 8;
const ROWS = CLIENTS * SECONDS * PER_SECOND;
const LIMIT = 5;
/** Prints the process's peak RSS (KiB) on stderr at exit. */
const PEAK_RSS = 'data:text/javascript,process.on("exit",()=>process.stderr.write("maxrss="+process.resourceUsage().maxRSS+"\\n"))';

let tmp: string;
let trace: string;
let config: string;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'sluice-replay-'));
  trace = path.join(tmp, 'big.csv');
  config = path.join(tmp, 'policies.yaml');
  writeFileSync(config, `policies:\n  per-client:\n    algorithm: fixed_window\n    limit: ${LIMIT}\n    period: 1s\n`);
  const out = createWriteStream(trace);
  const base = 1_431_857_103_000;
  let chunk = 'ts_ms,client\n';
  for (let s = 0; s < SECONDS; s++) {
    for (let j = 0; j < PER_SECOND; j++) {
      const t = base + s * 1000 + j;
      for (let c = 0; c < CLIENTS; c++) chunk += `${t},c${String(c).padStart(4, '0')}\n`;
    }
    if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
    chunk = '';
  }
  await new Promise<void>((resolve, reject) => out.end(() => resolve()).on('error', reject));
}, 60_000);

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('sluice replay of a 2 M-row trace', () => {
  it('exact counts, under 100 MB peak RSS, nothing on stderr when it is not a terminal', () => {
    const r = spawnSync(process.execPath, ['--import', PEAK_RSS, SLUICE_BIN, 'replay', trace, '--config', config, '--json', '--top', '2'], {
      cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 170_000,
    });
    expect({ status: r.status, stderr: r.stderr.replace(/^maxrss=\d+\n$/, '') }).toStrictEqual({ status: 0, stderr: '' });
    const perClient = { admitted: SECONDS * LIMIT, denied: SECONDS * (PER_SECOND - LIMIT) };
    expect(JSON.parse(r.stdout)).toStrictEqual([{
      policy: 'per-client', admitted: ROWS / PER_SECOND * LIMIT, denied: ROWS / PER_SECOND * (PER_SECOND - LIMIT),
      mostLimited: [{ key: 'c0000', ...perClient }, { key: 'c0001', ...perClient }],
    }]);
    const peakMB = (Number(/maxrss=(\d+)/.exec(r.stderr)![1]) * 1024) / 1e6;
    console.log(`replay of ${ROWS} rows: peak RSS ${peakMB.toFixed(1)} MB (load ${os.loadavg()[0].toFixed(1)})`);
    expect(peakMB).toBeLessThan(100);
  }, 180_000);

  const script = spawnSync('script', ['--version'], { encoding: 'utf8' });
  it.skipIf(script.error !== undefined)('on a terminal: a progress line with rows, rows/s and ETA; none with --quiet', () => {
    const run = (extra: string): string => spawnSync('script', ['-qec',
      `${process.execPath} ${SLUICE_BIN} replay ${trace} --config ${config} --json ${extra} >/dev/null`, '/dev/null'], {
      cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 170_000,
    }).stdout;
    const shown = run('');
    expect(shown).toMatch(/\rreplay per-client: [\d,]+ rows, [\d,]+ rows\/s, ETA \d+ s\x1b\[K/);
    expect(shown.endsWith('\r\x1b[K')).toBe(true); // the line is cleared at the end
    expect(run('--quiet')).toBe('');
  }, 180_000);
});

describe('the progress line', () => {
  it('formats rows, rate and ETA from the bytes read of every pass', () => {
    expect(formatProgress({ policy: 'p', pass: 1, passes: 1, rows: 1_200_000, bytes: 25 }, 4000, 4000, 100))
      .toBe('replay p: 1,200,000 rows, 300,000 rows/s, ETA 12 s');
    expect(formatProgress({ policy: 'q', pass: 2, passes: 2, rows: 500, bytes: 50 }, 1000, 9000, 100))
      .toBe('replay q (2/2): 500 rows, 500 rows/s, ETA 3 s');
    expect(formatProgress({ policy: 'r', pass: 1, passes: 1, rows: 10, bytes: 0 }, 0, 0, 0)).toBe('replay r: 10 rows');
  });

  it('shows nothing in the first second, then at most one line per 250 ms, and clears it at the end', () => {
    let t = 0;
    const out: string[] = [];
    const line = new ProgressLine({ write: (s) => out.push(s), totalBytes: 100, now: () => t });
    const p = { policy: 'p', pass: 1, passes: 1, rows: 0, bytes: 0 };
    // half the bytes read after 1 s: 1 s to go; 62.5 % after 1.25 s: 0.75 s (rounds to 1); 75 % after 1.5 s: 0.5 s
    for (t = 0; t <= 1500; t += 50) line.update({ ...p, rows: t, bytes: t / 20 });
    line.end();
    expect(out).toStrictEqual([
      '\rreplay p: 1,000 rows, 1,000 rows/s, ETA 1 s\x1b[K',
      '\rreplay p: 1,250 rows, 1,000 rows/s, ETA 1 s\x1b[K',
      '\rreplay p: 1,500 rows, 1,000 rows/s, ETA 1 s\x1b[K',
      '\r\x1b[K',
    ]);
  });
});
