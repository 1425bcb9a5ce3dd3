/**
 * Strict mode is exact under load, with the default store timeout (200 ms) and the default failure rule
 * (`local`): 4 `sluice serve` instances on one Redis, 200 concurrent HTTP clients (50 per instance) sending
 * 3,000 checks on one key of a strict token bucket of 1,000 a day (burst 1,000), released together. Every one
 * of 10 repetitions (a fresh key each) admits exactly 1,000 and denies 2,000, and no answer is degraded: a
 * Redis that is busy working through the burst is slow, not down (src/store/deadline.ts), so no call is given
 * up on and decided again by an instance's own kernel.
 *
 * A load test (issue #13's repro, which over-admitted 1,059 to 1,498 before): it runs the BUILT CLI (dist/),
 * so `npm run build` first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../helpers/redis.js';
import { hammerOneKey, serveStrict, type ServeProcess } from '../helpers/server.js';

const INSTANCES = 4;
const CLIENTS_PER_INSTANCE = 50;
const CHECKS = 3000;
const LIMIT = 1000;
const REPETITIONS = 10;

describe('strict: 4 instances, 200 clients, 3,000 checks on a limit of 1,000, default timeout', () => {
  let r: TestRedis;
  let dir: string;
  let procs: ServeProcess[] = [];

  beforeAll(async () => {
    r = await startRedis();
    dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-exact-'));
    const file = path.join(dir, 'policies.yaml');
    writeFileSync(file, JSON.stringify({
      policies: {
        day: { algorithm: 'token_bucket', limit: LIMIT, period: '1d', burst: LIMIT, consistency: 'strict' },
        warm: { algorithm: 'token_bucket', limit: 1_000_000, period: '1s', consistency: 'strict' },
      },
    }));
    procs = await serveStrict(INSTANCES, ['--config', file, '--redis', r.url]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    await r?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`admits exactly ${LIMIT} in each of ${REPETITIONS} repetitions, none degraded`, async () => {
    const runs: string[] = [];
    for (let rep = 0; rep < REPETITIONS; rep++) {
      const t = await hammerOneKey(procs, { policy: 'day', key: `k${rep}`, checks: CHECKS, clientsPerInstance: CLIENTS_PER_INSTANCE });
      runs.push(JSON.stringify(t));
      expect(t, `repetition ${rep + 1}: ${runs.join(' | ')}`).toStrictEqual({ admitted: LIMIT, denied: CHECKS - LIMIT, degraded: 0, other: 0 });
    }
  }, 240_000);
});
