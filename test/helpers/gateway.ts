/**
 * Real gateways (nginx, Caddy) as child processes for the recipe tests: each in its own temp dir with its own
 * pid, log and temp paths, on free ports, killed and removed by `stop()`. Plus a backend that counts its hits
 * and a plain HTTP client that can pick its source address (127.0.0.x: one client address, one counter).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** The first of `candidates` that exists, or a name found on PATH; null when none. */
export function findBinary(name: string, candidates: string[]): string | null {
  for (const c of candidates) if (existsSync(c)) return c;
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() !== '' ? r.stdout.trim() : null;
}

/**
 * The recipes' documented substitution: each `${NAME}` of `vars` replaced by its value (what
 * `envsubst '${A} ${B}'` does); nginx's own `$variables` are left alone.
 */
export function substitute(text: string, vars: Record<string, string | number>): string {
  return text.replace(/\$\{([A-Z_]+)\}/g, (m, name: string) => (Object.hasOwn(vars, name) ? String(vars[name]) : m));
}

/** Resolves once something accepts TCP connections on 127.0.0.1:port; rejects after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs = 10_000, alive?: () => string | null): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const dead = alive?.();
    if (dead) throw new Error(dead);
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > end) throw new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface Gateway {
  dir: string;
  child: ChildProcess;
  /** Everything the process wrote, and its logs, for failure messages. */
  output(): Promise<string>;
  stop(): Promise<void>;
}

async function launch(dir: string, cmd: string, args: string[], env: NodeJS.ProcessEnv, ports: number[], logFiles: string[]): Promise<Gateway> {
  const child = spawn(cmd, args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (out += d));
  const exited = new Promise<void>((r) => child.once('close', () => r()));
  const output = async (): Promise<string> => {
    const logs = await Promise.all(logFiles.map((f) => readFile(path.join(dir, f), 'utf8').catch(() => '')));
    return [out, ...logs].join('\n');
  };
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const p of ports) {
      await waitForPort(p, 10_000, () => (child.exitCode !== null ? `${cmd} exited with ${child.exitCode}: ${out}` : null));
    }
  } catch (e) {
    const text = await output();
    await stop();
    throw new Error(`${(e as Error).message}\n${text}`);
  }
  return { dir, child, output, stop };
}

/**
 * Runs nginx (foreground, one worker) on a wrapper nginx.conf whose http {} block includes each of `sites`
 * (file contents, already substituted) as it is. `ports`: the ports the sites listen on (waited for).
 */
export async function startNginx(bin: string, sites: Record<string, string>, ports: number[]): Promise<Gateway> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-nginx-'));
  await chmod(dir, 0o755); // the worker may run as another user
  for (const [name, text] of Object.entries(sites)) await writeFile(path.join(dir, name), text);
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${path.join(dir, t)};`).join('\n');
  await writeFile(path.join(dir, 'nginx.conf'), `worker_processes 1;
daemon off;
pid ${path.join(dir, 'nginx.pid')};
error_log ${path.join(dir, 'error.log')} warn;
events { worker_connections 256; }
http {
  access_log ${path.join(dir, 'access.log')};
${temp}
${Object.keys(sites).map((n) => `  include ${path.join(dir, n)};`).join('\n')}
}
`);
  return launch(dir, bin, ['-p', dir, '-c', path.join(dir, 'nginx.conf')], process.env, ports, ['error.log']);
}

/** Runs `caddy run` on `caddyfile` (copied as is) with `env` (the Caddyfile's {$VARS}) and its own home. */
export async function startCaddy(bin: string, caddyfile: string, env: Record<string, string | number>, ports: number[]): Promise<Gateway> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sluice-caddy-'));
  await writeFile(path.join(dir, 'Caddyfile'), caddyfile);
  const vars = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
  return launch(dir, bin, ['run', '--config', path.join(dir, 'Caddyfile'), '--adapter', 'caddyfile'], {
    ...process.env, ...vars, HOME: dir, XDG_CONFIG_HOME: dir, XDG_DATA_HOME: dir,
  }, ports, []);
}

export interface Backend {
  port: number;
  /** Requests the backend answered. */
  hits: number;
  close(): Promise<void>;
}

/** An upstream that answers 200 `backend` to everything and counts its requests. */
export async function startBackend(): Promise<Backend> {
  const b = { port: 0, hits: 0, close: async () => {} };
  const server = http.createServer((req, res) => {
    b.hits++;
    req.resume();
    res.end('backend');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  b.port = (server.address() as net.AddressInfo).port;
  b.close = () => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  });
  return b;
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** Wall time to the full answer, in ms (reported in messages, never asserted). */
  ms: number;
}

/** GET http://127.0.0.1:port/path from source address `from`, on a new connection; rejects after `timeoutMs`. */
export function get(port: number, urlPath: string, from: string, timeoutMs = 10_000): Promise<Reply> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, localAddress: from, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body, ms: Date.now() - t0 }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from 127.0.0.1:${port}${urlPath} in ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}
