import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { replay } from '../../src/cli/replay.js';
import { parseConfig } from '../../src/config/load.js';
import { ReferenceModel } from '../helpers/model.js';

const TRACE = resolve(process.cwd(), '../shared/data/access-trace.csv');
const csv = readFileSync(TRACE, 'utf8');
const config = parseConfig(readFileSync(resolve(process.cwd(), 'examples/trace-per-client.yaml'), 'utf8'), 'trace-per-client.yaml');

/** The trace's rows through the reference model, one check per row, in the file's order. */
function modelCounts(): { admitted: number; denied: number; perClient: Map<string, number> } {
  const model = new ReferenceModel({ 'per-client': { algorithm: 'token_bucket', limit: 10, period: 60_000, burst: 10 } });
  const perClient = new Map<string, number>();
  let admitted = 0, denied = 0;
  for (const line of csv.trim().split('\n').slice(1)) {
    const [ts, client] = line.split(',');
    if (model.check('per-client', client, 1, Number(ts)).allowed) admitted++;
    else {
      denied++;
      perClient.set(client, (perClient.get(client) ?? 0) + 1);
    }
  }
  return { admitted, denied, perClient };
}

describe('sluice replay on the shared access trace (token bucket 10/min, burst 10, per client)', () => {
  const expected = modelCounts();

  it('the reference model gives the pinned counts', () => {
    expect(expected).toMatchObject({ admitted: 8509, denied: 1490 });
  });

  for (const shards of [0, 2]) {
    it(`engine counts equal the reference model's (shards ${shards})`, async () => {
      const [r] = await replay({ csv, file: 'access-trace.csv', policies: config.policies, top: 3, shards });
      expect(r.policy).toBe('per-client');
      expect(r.admitted).toBe(expected.admitted);
      expect(r.denied).toBe(expected.denied);
      const top = [...expected.perClient.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 3);
      expect(r.mostLimited.map((k) => [k.key, k.denied])).toEqual(top);
      expect(r.mostLimited[0]).toEqual({ key: 'c1162', admitted: 86, denied: 271 });
    });
  }

  it('names the missing column when a policy needs one the trace lacks', async () => {
    const cfg = parseConfig('policies:\n  t:\n    algorithm: fixed_window\n    limit: 1\n    period: 1s\n    descriptors: [tenant]\n', 'x.yaml');
    await expect(replay({ csv, file: 'trace.csv', policies: cfg.policies })).rejects.toThrow(/needs column "tenant"/);
  });

  it('refuses a row whose ts_ms is not integer ms, naming the row', async () => {
    await expect(replay({ csv: 'ts_ms,client\n12,a\n1.5,b\n', file: 'bad.csv', policies: config.policies }))
      .rejects.toThrow('bad.csv: row 3: ts_ms must be integer Unix ms (got "1.5")');
  });
});
