/**
 * Child processes for the bench: a measurement runs in its own `node` process (fresh heap, fresh JIT, its own
 * event loop), talks to the runner over the IPC channel, and is killed if it overruns its time budget.
 *
 * Two kinds of child:
 * - a job: `runJob(file, spec)` forks `file --bench-child <json spec>`; the file calls `jobMain(handler)`, which
 *   runs the handler once, sends its result and exits.
 * - a server: `startServerChild(file, spec)` forks the same way; the file calls `serverMain(start)`, which
 *   listens on 127.0.0.1, reports its port, answers CPU-usage probes and stops on request (or when the runner
 *   goes away).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const CHILD_FLAG = '--bench-child';

/** Extra node flags for every bench child: `BENCH_NODE_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/prof"` profiles them. */
export function benchNodeFlags(): string[] {
  const f = process.env.BENCH_NODE_FLAGS?.trim();
  return f ? f.split(/\s+/) : [];
}

/** True when `moduleUrl` is the entry point of this process, started by the runner as a child. */
export function isChildEntry(moduleUrl: string): boolean {
  const entry = process.argv[1];
  return entry !== undefined && process.argv[2] === CHILD_FLAG && resolve(entry) === fileURLToPath(moduleUrl);
}

function childSpec<T>(): T {
  return JSON.parse(process.argv[3] ?? '{}') as T;
}

/** The package root (holds package.json): bench files run from bench/ (tsc --noEmit) or dist/bench/ (built). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('bench: package.json not found');
    dir = up;
  }
  return dir;
}

interface JobReply {
  type: 'result' | 'error';
  result?: unknown;
  error?: string;
}

export interface JobOptions {
  /** Kill the child and reject after this long. */
  timeoutMs: number;
  /** Extra node flags, e.g. ['--expose-gc']. */
  execArgv?: string[];
}

/** Runs `file` as a child job with `spec`; resolves with what its handler returned. */
export function runJob<R>(file: string, spec: unknown, o: JobOptions): Promise<R> {
  return new Promise<R>((resolveJob, reject) => {
    const child = fork(file, [CHILD_FLAG, JSON.stringify(spec)], {
      execArgv: [...(o.execArgv ?? []), ...benchNodeFlags()],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let reply: JobReply | undefined;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`bench job ${file} timed out after ${o.timeoutMs} ms`));
    }, o.timeoutMs);
    child.on('message', (m: JobReply) => {
      reply = m;
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (reply?.type === 'result') resolveJob(reply.result as R);
      else if (reply?.type === 'error') reject(new Error(reply.error));
      else reject(new Error(`bench job ${file} exited (code ${code}, signal ${signal}) without a result`));
    });
  });
}

/** In a job child: runs `handler(spec)` once, sends the result to the runner, exits. */
export function jobMain<S, R>(handler: (spec: S) => Promise<R> | R): void {
  const send = (m: JobReply): void => {
    process.send!(m, () => process.exit(m.type === 'result' ? 0 : 1));
  };
  Promise.resolve()
    .then(() => handler(childSpec<S>()))
    .then(
      (result) => send({ type: 'result', result }),
      (e: unknown) => send({ type: 'error', error: e instanceof Error ? e.stack ?? e.message : String(e) }),
    );
}

/** Process CPU time (all threads), µs. */
export interface Cpu {
  user: number;
  system: number;
}

export interface ServerChild {
  port: number;
  pid: number;
  /** The server process's CPU time so far (all its threads). */
  cpu(): Promise<Cpu>;
  /** Asks the server to stop, then kills it if it has not exited within 3 s. */
  stop(): Promise<void>;
}

type ServerMsg = { type: 'ready'; port: number } | { type: 'cpu'; cpu: Cpu } | { type: 'error'; error: string };

/** Starts `file` as a server child and waits (at most `timeoutMs`) until it listens. */
export function startServerChild(file: string, spec: unknown, timeoutMs = 15_000): Promise<ServerChild> {
  return new Promise<ServerChild>((resolveStart, reject) => {
    const child: ChildProcess = fork(file, [CHILD_FLAG, JSON.stringify(spec)], {
      execArgv: benchNodeFlags(),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let exited = false;
    const exit = new Promise<void>((r) => child.once('exit', () => {
      exited = true;
      r();
    }));
    const cpuWaiters: Array<(c: Cpu) => void> = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server ${file} did not start within ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('message', (m: ServerMsg) => {
      if (m.type === 'ready') {
        clearTimeout(timer);
        resolveStart({
          port: m.port,
          pid: child.pid!,
          cpu: () => new Promise<Cpu>((r) => {
            cpuWaiters.push(r);
            child.send({ type: 'cpu' });
          }),
          async stop() {
            if (exited) return;
            if (child.connected) child.send({ type: 'stop' });
            const killer = setTimeout(() => child.kill('SIGKILL'), 3_000);
            await exit;
            clearTimeout(killer);
          },
        });
      } else if (m.type === 'cpu') {
        cpuWaiters.shift()?.(m.cpu);
      } else if (m.type === 'error') {
        clearTimeout(timer);
        reject(new Error(`server ${file} failed: ${m.error}`));
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server ${file} exited early (code ${code}, signal ${signal})`));
    });
  });
}

/** A started server, as a server child reports it. */
export interface Listening {
  port: number;
  close(): Promise<void> | void;
}

/**
 * In a server child: starts the server, reports its port, answers CPU probes, stops on request. Started by
 * hand (no IPC channel), e.g. `node dist/bench/baselines/bare-uws.js --bench-child '{"port":8081}'`, it prints
 * its address and stops on SIGINT/SIGTERM, so a figure can be reproduced with any load generator.
 */
export function serverMain<S>(start: (spec: S) => Promise<Listening>): void {
  start(childSpec<S>()).then(
    (srv) => {
      let stopping = false;
      const stop = (): void => {
        if (stopping) return;
        stopping = true;
        Promise.resolve(srv.close()).finally(() => process.exit(0));
        setTimeout(() => process.exit(0), 2_000).unref();
      };
      if (process.send === undefined) {
        process.stdout.write(`listening on http://127.0.0.1:${srv.port}/ (Ctrl-C stops)\n`);
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        return;
      }
      process.on('message', (m: { type: string }) => {
        if (m.type === 'cpu') process.send!({ type: 'cpu', cpu: process.cpuUsage() });
        else if (m.type === 'stop') stop();
      });
      // If the runner dies, do not linger as an orphan server.
      process.on('disconnect', stop);
      process.send!({ type: 'ready', port: srv.port });
    },
    (e: unknown) => {
      const error = e instanceof Error ? e.message : String(e);
      if (process.send === undefined) {
        process.stderr.write(`server failed: ${error}\n`);
        process.exit(1);
      }
      process.send({ type: 'error', error }, () => process.exit(1));
    },
  );
}
