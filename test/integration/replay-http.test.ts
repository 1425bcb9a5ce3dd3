/**
 * The recorded access trace (../shared/data/access-trace.csv, 9,999 requests whose timestamps step backwards
 * about half the time) replayed through the HTTP endpoint, the clock set to each row's ts_ms before its
 * request, against `replay()` on the same config (examples/trace-per-client.yaml): the same admitted and
 * denied counts (8,509 / 1,490), and the same most-limited clients.
 *
 * Each replay is 9,999 requests one after another on one keep-alive connection (test/helpers/http-conn.ts: fetch
 * cost several times the server's CPU per request, and was most of this file's time).
 */
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { parse } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../src/config/load.js';
import type { SluiceConfig } from '../../src/config/schema.js';
import { replay, type PolicyReplay } from '../../src/cli/replay.js';
import type { Decision } from '../../src/types/decision.js';
import { HttpConn } from '../helpers/http-conn.js';
import { PROJECT_ROOT, ServerPool, TRACE_PATH } from '../helpers/server.js';

const CONFIG_PATH = path.join(PROJECT_ROOT, 'examples', 'trace-per-client.yaml');

interface Row {
  t: number;
  client: string;
}

let config: SluiceConfig;
let csv: string;
let rows: Row[];
let reference: PolicyReplay;
const pool = new ServerPool();

beforeAll(async () => {
  config = await loadConfigFile(CONFIG_PATH);
  csv = readFileSync(TRACE_PATH, 'utf8');
  rows = (parse(csv, { columns: true, skip_empty_lines: true, trim: true }) as Array<Record<string, string>>)
    .map((r) => ({ t: Number(r.ts_ms), client: r.client }));
  const results = await replay({ csv, file: TRACE_PATH, policies: config.policies });
  expect(results.map((r) => r.policy)).toStrictEqual(['per-client']);
  reference = results[0];
});
afterAll(() => pool.closeAll());

/** Counts like replay(): totals, then the 10 keys with the most denials (most first, ties in key order). */
function summarize(perKey: Map<string, { admitted: number; denied: number }>): Omit<PolicyReplay, 'policy'> {
  let admitted = 0;
  let denied = 0;
  for (const c of perKey.values()) {
    admitted += c.admitted;
    denied += c.denied;
  }
  const mostLimited = [...perKey.entries()]
    .filter(([, c]) => c.denied > 0)
    .sort((a, b) => b[1].denied - a[1].denied || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, 10)
    .map(([key, c]) => ({ key, ...c }));
  return { admitted, denied, mostLimited };
}

function count(perKey: Map<string, { admitted: number; denied: number }>, key: string, allowed: boolean): void {
  const c = perKey.get(key) ?? { admitted: 0, denied: 0 };
  if (allowed) c.admitted++;
  else c.denied++;
  perKey.set(key, c);
}

describe('access trace through HTTP', () => {
  it('the reference replay() gives 8509 admitted / 1490 denied over 9999 rows, time stepping backwards', () => {
    expect(rows.length).toBe(9999);
    expect(rows.filter((r, i) => i > 0 && r.t < rows[i - 1].t).length).toBeGreaterThan(1000);
    expect({ admitted: reference.admitted, denied: reference.denied }).toStrictEqual({ admitted: 8509, denied: 1490 });
  });

  it('GET /v1/check one row at a time (shards 0): the same counts and most-limited clients as replay()', async () => {
    const s = await pool.start({ policies: config.policies });
    const conn = await HttpConn.open(s.port);
    const perKey = new Map<string, { admitted: number; denied: number }>();
    for (const [i, r] of rows.entries()) {
      s.clock.set(r.t);
      const a = await conn.get(`/v1/check?policy=per-client&key=${encodeURIComponent(r.client)}`);
      if (a.status !== 200) throw new Error(`row ${i + 2}: HTTP ${a.status} ${a.text}`);
      const d = a.json as Decision;
      if (d.remaining < 0 || (d.allowed ? d.retryAfterMs !== 0 : !(d.retryAfterMs! >= 1))) {
        throw new Error(`row ${i + 2}: impossible decision ${a.text}`);
      }
      count(perKey, r.client, d.allowed);
    }
    conn.close();
    expect(summarize(perKey)).toStrictEqual({ admitted: 8509, denied: 1490, mostLimited: reference.mostLimited });
  }, 180_000);

  it('POST batches of the rows that share a timestamp (shards 2), descriptors in the body: the same counts', async () => {
    const s = await pool.start({ policies: config.policies, shards: 2, maxBatchItems: 1000 });
    const conn = await HttpConn.open(s.port);
    const perKey = new Map<string, { admitted: number; denied: number }>();
    for (let i = 0; i < rows.length;) {
      let j = i;
      while (j < rows.length && rows[j].t === rows[i].t) j++;
      s.clock.set(rows[i].t);
      const group = rows.slice(i, j);
      const a = await conn.postJson('/v1/check', { checks: group.map((r) => ({ policy: 'per-client', descriptors: { client: r.client } })) });
      if (a.status !== 200) throw new Error(`rows ${i + 2}..${j + 1}: HTTP ${a.status} ${a.text}`);
      const results = a.json.results as Decision[];
      expect(results.length).toBe(group.length);
      results.forEach((d, k) => count(perKey, group[k].client, d.allowed));
      i = j;
    }
    conn.close();
    expect(summarize(perKey)).toStrictEqual({ admitted: 8509, denied: 1490, mostLimited: reference.mostLimited });
  }, 180_000);
});
