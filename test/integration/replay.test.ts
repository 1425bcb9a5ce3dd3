import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatCompare, formatReplay, replay, replayCompare } from '../../src/cli/replay.js';
import { parseConfig } from '../../src/config/load.js';
import { ReferenceModel } from '../helpers/model.js';
import { sharedFile } from '../helpers/shared.js';

const TRACE = sharedFile('data/access-trace.csv');
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

  it('reads the file as a stream when no text is given: the same counts; a missing file is named', async () => {
    const [r] = await replay({ file: TRACE, policies: config.policies, top: 1 });
    expect([r.admitted, r.denied, r.mostLimited, r.evictions]).toStrictEqual([8509, 1490, [{ key: 'c1162', admitted: 86, denied: 271 }], undefined]);
    await expect(replay({ file: 'no-such-trace.csv', policies: config.policies }))
      .rejects.toThrow("no-such-trace.csv: cannot read: ENOENT: no such file or directory, open 'no-such-trace.csv'");
  });

  it('a key table smaller than the trace\'s keys says how many it evicted, and the text report warns', async () => {
    const many = 'ts_ms,client\n' + Array.from({ length: 50 }, (_, i) => `${i},k${i}`).join('\n') + '\n';
    const results = await replay({ csv: many, file: 'many.csv', policies: config.policies, maxKeys: 8 });
    expect(results[0]).toMatchObject({ admitted: 50, denied: 0, evictions: 42 });
    expect(formatReplay(results, 'many.csv')).toContain('  warning: 42 keys evicted (more distinct keys than --max-keys): counts may be inexact');
  });

  it('splits a long run of one timestamp into batches without changing a decision', async () => {
    const same = 'ts_ms,client\n' + Array.from({ length: 3000 }, (_, i) => `7,k${i % 3}`).join('\n') + '\n';
    const [r] = await replay({ csv: same, file: 'same.csv', policies: config.policies });
    // burst 10 per client, nothing refills within one ms: 10 admitted for each of the 3 clients
    expect([r.admitted, r.denied]).toStrictEqual([30, 2970]);
  });

  it('refuses a header without a ts_ms column, naming the columns it has', async () => {
    const why = 'the header row has no ts_ms column (each row\'s time, integer Unix ms); its columns: "time", "client"';
    await expect(replay({ csv: 'time,client\n12,a\n', file: 'no-ts.csv', policies: config.policies })).rejects.toThrow(`no-ts.csv: ${why}`);
    // a header alone too: nothing to replay, but not a trace
    await expect(replay({ csv: 'time,client\n', file: 'no-ts.csv', policies: config.policies })).rejects.toThrow(`no-ts.csv: ${why}`);
  });

  it('refuses a row whose ts_ms is not integer ms, naming the row', async () => {
    await expect(replay({ csv: 'ts_ms,client\n12,a\n1.5,b\n', file: 'bad.csv', policies: config.policies }))
      .rejects.toThrow('bad.csv: row 3: ts_ms must be integer Unix ms (got "1.5")');
  });
});

describe('sluice replay --compare: two configs side by side', () => {
  // a: 3 checks at 0 and one at 100 ms, then one each at 1 s (a, b) and 2 s (a); b: one at 100 ms and one at 1 s
  const small = 'ts_ms,client\n0,a\n0,a\n0,a\n100,b\n100,a\n1000,a\n1000,b\n2000,a\n';
  const A = parseConfig('policies:\n  w: { algorithm: fixed_window, limit: 2, period: 1s, descriptors: [client] }\n', 'a.yaml').policies;
  const B = parseConfig([
    'policies:',
    '  w: { algorithm: fixed_window, limit: 3, period: 1s, descriptors: [client] }',
    '  strict: { algorithm: fixed_window, limit: 1, period: 1m, descriptors: [client] }',
  ].join('\n') + '\n', 'b.yaml').policies;

  for (const shards of [0, 2]) {
    it(`gives each side's exact counts and the difference (shards ${shards})`, async () => {
      const rows = await replayCompare({ csv: small, file: 'small.csv', a: A, b: B, shards });
      expect(rows).toEqual([
        // A: window [0, 1 s): a admits 2 of 4, b 1 of 1; then 3 of 3. B: a admits 3 of 4; then 3 of 3.
        { policy: 'w', a: { admitted: 6, denied: 2, denyRate: 0.25 }, b: { admitted: 7, denied: 1, denyRate: 0.125 }, diff: { admitted: 1, denied: -1, denyRate: -0.125 } },
        // only in B: one per client a minute, a 1 of 6, b 1 of 2
        { policy: 'strict', a: null, b: { admitted: 2, denied: 6, denyRate: 0.75 }, diff: null },
      ]);
    });
  }

  it('prints them side by side', async () => {
    const rows = await replayCompare({ csv: small, file: 'small.csv', a: A, b: B });
    expect(formatCompare(rows, 'small.csv', 'a.yaml', 'b.yaml')).toBe([
      'replay of small.csv',
      'A: a.yaml',
      'B: b.yaml',
      '',
      'policy  A admitted  A denied  A deny  B admitted  B denied  B deny  B-A admitted  B-A denied   B-A deny',
      'w                6         2   25.0%           7         1   12.5%            +1          -1  -12.5 pts',
      'strict           -         -       -           2         6   75.0%             -           -          -',
    ].join('\n'));
  });

  it('on the shared trace, each side equals the reference model', async () => {
    const model = (limit: number, burst: number): { admitted: number; denied: number } => {
      const m = new ReferenceModel({ 'per-client': { algorithm: 'token_bucket', limit, period: 60_000, burst } });
      let admitted = 0, denied = 0;
      for (const line of csv.trim().split('\n').slice(1)) {
        const [ts, client] = line.split(',');
        if (m.check('per-client', client, 1, Number(ts)).allowed) admitted++;
        else denied++;
      }
      return { admitted, denied };
    };
    const candidate = parseConfig(readFileSync(resolve(process.cwd(), 'examples/trace-per-client-candidate.yaml'), 'utf8'), 'candidate.yaml');
    const [row] = await replayCompare({ csv, file: 'access-trace.csv', a: config.policies, b: candidate.policies });
    expect(row.a).toMatchObject(model(10, 10));
    expect(row.b).toMatchObject(model(20, 10));
    expect(row).toMatchObject({ policy: 'per-client', a: { admitted: 8509, denied: 1490 }, b: { admitted: 8626, denied: 1373 }, diff: { admitted: 117, denied: -117 } });
  });

  it('counts a shadow policy by its evaluation (would-denies as denied)', async () => {
    const shadowed = parseConfig('policies:\n  w: { algorithm: fixed_window, limit: 2, period: 1s, descriptors: [client], shadow: true }\n', 's.yaml').policies;
    const [row] = await replayCompare({ csv: small, file: 'small.csv', a: A, b: shadowed });
    expect(row.b).toEqual(row.a);
  });

  it('refuses a policy neither config has', async () => {
    await expect(replayCompare({ csv: small, file: 'small.csv', a: A, b: B, only: ['nope'] }))
      .rejects.toThrow('policy: unknown policy "nope" (in neither config)');
  });
});
