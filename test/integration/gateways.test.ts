/**
 * The gateway recipes in examples/gateways/, run as written: the real nginx (auth_request) and Caddy
 * (forward_auth) with those exact files (placeholders replaced as their headers say), in front of a backend,
 * asking a real `sluice serve` child process started on the example sluice configs. Checked at the client:
 * 200 through with RateLimit fields; 429 with Retry-After, RateLimit and RateLimit-Policy (the backend not
 * called); and with sluice frozen (SIGSTOP) and stopped, what the fail-closed (503, Retry-After: 1) and the
 * fail-open (the backend, unchecked) variants do. nginx and Caddy are Debian packages (`.ci/run` installs
 * both); when one is missing its tests fail saying so.
 *
 * Each scenario is a client of its own (source address 127.0.0.x), so it has a counter of its own.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, insideLocalWindow } from '../helpers/redis.js';
import { PROJECT_ROOT, spawnServe, type ServeProcess } from '../helpers/server.js';
import { findBinary, get, startBackend, startCaddy, startNginx, substitute, type Backend, type Gateway, type Reply } from '../helpers/gateway.js';

const EXAMPLES = path.join(PROJECT_ROOT, 'examples', 'gateways');
const NGINX = findBinary('nginx', ['/usr/sbin/nginx']);
const CADDY = findBinary('caddy', ['/usr/bin/caddy']);
const POLICY = '"per-ip";q=5;w=60';

/** `"per-ip";r=<r>;t=<t>` → t, checking r. */
function windowLeft(h: string | string[] | undefined, r: number): number {
  const m = /^"per-ip";r=(\d+);t=(\d+)$/.exec(String(h));
  expect(m, `RateLimit: ${String(h)}`).not.toBeNull();
  expect(Number(m![1])).toBe(r);
  return Number(m![2]);
}

/** Five admitted (200 from the backend, RateLimit r=4..0), then 429 with Retry-After = the window left. */
async function admitsFiveThenDenies(port: number, from: string, backend: Backend): Promise<void> {
  // fixed windows are aligned to the minute (the sluice child's wall clock): start well inside one
  await insideLocalWindow(60_000, 10_000);
  const before = backend.hits;
  for (let i = 0; i < 5; i++) {
    // the client's own query and headers do not choose the key (the gateway sets X-Forwarded-For)
    const a = await get(port, `/api/items?client=203.0.113.${i}&key=k${i}&cost=0`, from);
    expect([a.status, a.body, a.headers['ratelimit-policy']], `request ${i + 1}`).toStrictEqual([200, 'backend', POLICY]);
    windowLeft(a.headers.ratelimit, 4 - i);
  }
  const d = await get(port, '/api/items', from);
  expect([d.status, d.headers['ratelimit-policy']]).toStrictEqual([429, POLICY]);
  const t = windowLeft(d.headers.ratelimit, 0);
  expect(d.headers['retry-after']).toBe(String(t));
  expect(backend.hits - before).toBe(5);
}

function expectUnavailable(r: Reply): void {
  expect([r.status, r.headers['retry-after'], r.headers.ratelimit], `after ${r.ms} ms`).toStrictEqual([503, '1', undefined]);
}

function expectUnchecked(r: Reply): void {
  expect([r.status, r.body, r.headers.ratelimit], `after ${r.ms} ms`).toStrictEqual([200, 'backend', undefined]);
}

interface Rig {
  sluice: ServeProcess;
  backend: Backend;
  gateway: Gateway;
  closed: number;
  open: number;
}

/** Runs the shared scenarios against one gateway's fail-closed and fail-open entry points. */
function scenarios(name: string, rig: () => Rig): void {
  it(`${name}: admitted requests reach the backend with RateLimit; the 6th gets 429 with Retry-After and RateLimit`, async () => {
    const r = rig();
    await admitsFiveThenDenies(r.closed, '127.0.0.11', r.backend);
    await admitsFiveThenDenies(r.open, '127.0.0.12', r.backend);
  });

  it(`${name}: sluice frozen (SIGSTOP): fail-closed answers 503 + Retry-After: 1, fail-open serves the backend unchecked`, async () => {
    const r = rig();
    r.sluice.child.kill('SIGSTOP');
    try {
      expectUnavailable(await get(r.closed, '/api/items', '127.0.0.13'));
      expectUnchecked(await get(r.open, '/api/items', '127.0.0.14'));
    } finally {
      r.sluice.child.kill('SIGCONT');
    }
    // thawed: checked again
    const again = await get(r.closed, '/api/items', '127.0.0.15');
    expect(again.status).toBe(200);
    windowLeft(again.headers.ratelimit, 4);
  });

  it(`${name}: sluice stopped: fail-closed answers 503 + Retry-After: 1, fail-open serves the backend unchecked`, async () => {
    const r = rig();
    await r.sluice.kill();
    expectUnavailable(await get(r.closed, '/api/items', '127.0.0.16'));
    expectUnchecked(await get(r.open, '/api/items', '127.0.0.17'));
  });
}

/**
 * One gateway's tests: a backend, `sluice serve` on `config`, and the gateway started by `start` on two free
 * ports (fail-closed, fail-open); or, when its binary is missing, one failing test saying so.
 */
function gateway(title: string, name: string, bin: string | null, config: string,
  start: (bin: string, o: { sluice: string; backend: string; closed: number; open: number }) => Promise<Gateway>): void {
  describe(title, () => {
    let rig: Rig | undefined;
    beforeAll(async () => {
      if (bin === null) return;
      const [closed, open] = [await freePort(), await freePort()];
      const backend = await startBackend();
      const sluice = await spawnServe(['--config', path.join(EXAMPLES, config)]);
      const gw = await start(bin, { sluice: `127.0.0.1:${sluice.port}`, backend: `127.0.0.1:${backend.port}`, closed, open });
      rig = { sluice, backend, gateway: gw, closed, open };
    }, 30_000);
    afterAll(async () => {
      await rig?.gateway.stop();
      await rig?.sluice.kill();
      await rig?.backend.close();
    });

    it(`${name} is installed`, () => {
      expect(bin, `${name} not found (/usr/sbin/${name}, /usr/bin/${name} or PATH): apt-get install ${name} (.ci/run installs it)`).not.toBeNull();
    });
    if (bin !== null) scenarios(name, () => rig!);
  });
}

gateway('nginx auth_request (examples/gateways/nginx/)', 'nginx', NGINX, 'sluice-nginx.yaml', async (bin, o) => {
  const site = async (file: string, port: number): Promise<string> => substitute(await readFile(path.join(EXAMPLES, 'nginx', file), 'utf8'),
    { SLUICE_ADDR: o.sluice, BACKEND_ADDR: o.backend, LISTEN_PORT: port });
  return startNginx(bin, { 'fail-closed.conf': await site('fail-closed.conf', o.closed), 'fail-open.conf': await site('fail-open.conf', o.open) }, [o.closed, o.open]);
});

gateway('Caddy forward_auth (examples/gateways/caddy/Caddyfile)', 'caddy', CADDY, 'sluice.yaml', async (bin, o) =>
  startCaddy(bin, await readFile(path.join(EXAMPLES, 'caddy', 'Caddyfile'), 'utf8'), {
    SLUICE_ADDR: o.sluice, BACKEND_ADDR: o.backend, CLOSED_PORT: o.closed, OPEN_PORT: o.open,
  }, [o.closed, o.open]));
