/**
 * `sluice serve --grpc-port` (and SLUICE_GRPC_PORT) on the example envoyproxy/ratelimit config: the built CLI
 * as a child process, called with a gRPC client; the file's top-level `domain` selects that format.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PROJECT_ROOT, spawnServe, type ServeProcess } from '../helpers/server.js';
import { rlsClient, type RlsClient } from '../helpers/grpc.js';

const CONFIG = path.join(PROJECT_ROOT, 'examples', 'gateways', 'envoy', 'ratelimit-config.yaml');
const running: Array<{ p: ServeProcess; c: RlsClient }> = [];
afterEach(async () => {
  for (const { p, c } of running.splice(0)) {
    c.close();
    await p.kill();
  }
});

async function serve(args: string[], env?: NodeJS.ProcessEnv, config = CONFIG): Promise<RlsClient> {
  const p = await spawnServe(['--config', config, ...args], { env });
  const line = p.logs().find((l) => l.msg === 'sluice serving')!;
  expect(typeof line.grpcPort).toBe('number');
  const c = rlsClient(line.grpcPort as number);
  running.push({ p, c });
  return c;
}

describe('sluice serve with a gRPC port', () => {
  it.each([
    ['--grpc-port 0', ['--grpc-port', '0'], undefined],
    ['SLUICE_GRPC_PORT=0', [], { SLUICE_GRPC_PORT: '0' }],
  ] as Array<[string, string[], NodeJS.ProcessEnv | undefined]>)('%s: the example rules, 5 logins an hour per client', async (_name, args, env) => {
    // the rule counts hour windows of the wall clock: do not start in the last seconds of one
    const into = Date.now() % 3_600_000;
    if (into > 3_590_000) await new Promise((r) => setTimeout(r, 3_600_000 - into + 50));
    const c = await serve(args, env);
    const login = { domain: 'edge', descriptors: [{ entries: [{ key: 'path', value: '/login' }, { key: 'remote_address', value: '192.0.2.7' }] }] };
    const remaining: number[] = [];
    for (let i = 0; i < 6; i++) remaining.push((await c.shouldRateLimit(login)).statuses[0].limit_remaining);
    expect(remaining).toStrictEqual([4, 3, 2, 1, 0, 0]);
    const over = await c.shouldRateLimit(login);
    // "/" is not allowed in a policy name: the rule's path, sanitised, and a hash of it
    expect([over.overall_code, over.statuses[0].current_limit])
      .toStrictEqual(['OVER_LIMIT', { name: expect.stringMatching(/^edge\.path__login\.remote_address-[0-9a-f]{8}$/), requests_per_unit: 5, unit: 'HOUR' }]);
    expect(await c.health()).toBe('SERVING');
  });

  it('server.grpcPort in a sluice config: domain = policy, entries = its descriptors', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-grpc-'));
    try {
      const file = path.join(dir, 'policies.yaml');
      await writeFile(file, 'server: { grpcPort: 0 }\npolicies:\n  api: { algorithm: fixed_window, limit: 2, period: 1d, descriptors: [tenant] }\n');
      const c = await serve([], undefined, file);
      const req = { domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }] };
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) codes.push((await c.shouldRateLimit(req)).overall_code);
      expect(codes).toStrictEqual(['OK', 'OK', 'OVER_LIMIT']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
