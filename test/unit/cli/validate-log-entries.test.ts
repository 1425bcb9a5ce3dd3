/**
 * `sluice validate` reports what the limiter refuses when it starts, as `serve` does: a sliding_log whose worst
 * case, min(limit, period in ms) entries, exceeds the file's engine.maxLogEntries (default 64) (the loader
 * alone admits up to 1,024: src/config/limits.ts checkLogEntries).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { validateFile } from '../../../src/cli/validate.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-validate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const f = path.join(dir, name);
  writeFileSync(f, text);
  return f;
}

describe('validate: sliding_log against maxLogEntries', () => {
  it('reports each policy over the bound with its path', async () => {
    const f = file('slog.yaml', [
      'policies:',
      '  slog: { algorithm: sliding_log, limit: 1000, period: 1h }',
      '  listed: { limits: [{ algorithm: token_bucket, limit: 5, period: 1s }, { algorithm: sliding_log, limit: 100, period: 1h }] }',
      '  fine: { algorithm: sliding_log, limit: 64, period: 1h }',
      '',
    ].join('\n'));
    const why = (limit: number) => `sliding_log keeps up to min(limit, period in ms) entries per key, at most 64 (got min(${limit}, 3600000) = ${limit}); ` +
      'use sliding_window or a smaller limit, or raise maxLogEntries (up to 1024)';
    expect(await validateFile(f)).toStrictEqual({
      errors: [`${f}: policies.slog.limit: ${why(1000)}`, `${f}: policies.listed.limits[1].limit: ${why(100)}`],
      policies: 0,
    });
  });

  it('takes the file\'s engine.maxLogEntries', async () => {
    const f = file('raised.yaml', 'engine: { maxLogEntries: 1024 }\npolicies:\n  slog: { algorithm: sliding_log, limit: 1000, period: 1h }\n');
    expect(await validateFile(f)).toStrictEqual({ errors: [], policies: 1 });
  });
});
