/**
 * A/B interleaving: the subjects of one case run **alternately** inside one invocation (A, B, C, A, B, C…, the
 * order rotated every round: ABC, BCA, CAB), so drift in the machine's load hits every subject alike and the
 * ratio of their medians is stable even when absolute figures move by 30% between runs minutes apart.
 *
 * A subject is a resident child process (`startRoundChild`): it does its set-up once (fill a key set, connect,
 * listen), then waits; the runner asks it for one timed round at a time (`round(q)`), so only one subject
 * loads the machine at any moment and the idle ones cost nothing but memory.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { benchNodeFlags } from './harness.js';
import type { Ctx } from './types.js';

const CHILD_FLAG = '--bench-child';

type ToChild = { type: 'round'; q: unknown } | { type: 'stop' };
type FromChild =
  | { type: 'ready'; info?: unknown }
  | { type: 'round'; result: unknown }
  | { type: 'error'; error: string };

export interface RoundChild<Q, R> {
  readonly pid: number;
  /** What the child's set-up reported (e.g. a port). */
  readonly info: unknown;
  /** Runs one round in the child; rejects if the child fails or overruns `timeoutMs`. */
  round(q: Q, timeoutMs: number): Promise<R>;
  /** Asks the child to close and exit; kills it after 3 s. */
  stop(): Promise<void>;
}

export interface RoundChildOptions {
  /** Bound on the child's set-up. */
  setupTimeoutMs: number;
  execArgv?: string[];
}


/** Forks `file --bench-child <spec>` (which calls {@link roundMain}) and waits until its set-up is done. */
export function startRoundChild<Q, R>(file: string, spec: unknown, o: RoundChildOptions): Promise<RoundChild<Q, R>> {
  return new Promise((resolveStart, reject) => {
    const child: ChildProcess = fork(file, [CHILD_FLAG, JSON.stringify(spec)], {
      execArgv: [...(o.execArgv ?? []), ...benchNodeFlags()],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let waiter: { resolve(v: unknown): void; reject(e: Error): void; timer: NodeJS.Timeout } | null = null;
    let dead: Error | null = null;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    const setupTimer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file}: set-up did not finish within ${o.setupTimeoutMs} ms`));
    }, o.setupTimeoutMs);
    const fail = (e: Error): void => {
      dead = e;
      clearTimeout(setupTimer);
      reject(e);
      if (waiter) {
        clearTimeout(waiter.timer);
        waiter.reject(e);
        waiter = null;
      }
    };
    child.on('message', (m: FromChild) => {
      if (m.type === 'ready') {
        clearTimeout(setupTimer);
        resolveStart({
          pid: child.pid!,
          info: m.info,
          round(q: Q, timeoutMs: number): Promise<R> {
            if (dead) return Promise.reject(dead);
            return new Promise<R>((res, rej) => {
              const timer = setTimeout(() => {
                child.kill('SIGKILL');
                fail(new Error(`${file}: round overran ${timeoutMs} ms`));
              }, timeoutMs);
              waiter = { resolve: res as (v: unknown) => void, reject: rej, timer };
              child.send({ type: 'round', q } satisfies ToChild);
            });
          },
          async stop() {
            if (child.exitCode !== null || child.signalCode !== null) return;
            if (child.connected) child.send({ type: 'stop' } satisfies ToChild);
            const killer = setTimeout(() => child.kill('SIGKILL'), 3_000);
            await exited;
            clearTimeout(killer);
          },
        });
      } else if (m.type === 'round') {
        const w = waiter;
        waiter = null;
        if (w) {
          clearTimeout(w.timer);
          w.resolve(m.result);
        }
      } else if (m.type === 'error') {
        fail(new Error(m.error.split('\n')[0]));
      }
    });
    child.once('exit', (code, signal) => {
      if (!dead) fail(new Error(`${file} exited (code ${code}, signal ${signal})`));
    });
  });
}

/** What a round child's set-up returns. */
export interface RoundSubject<Q, R> {
  info?: unknown;
  round(q: Q): Promise<R> | R;
  close?(): Promise<void> | void;
}

/** In a round child: set up once, then answer rounds until told to stop (or the runner goes away). */
export function roundMain<S, Q, R>(setup: (spec: S) => Promise<RoundSubject<Q, R>>): void {
  const spec = JSON.parse(process.argv[3] ?? '{}') as S;
  const send = (m: FromChild, then: () => void = () => {}): void => {
    process.send!(m, then);
  };
  const errText = (e: unknown): string => (e instanceof Error ? e.stack ?? e.message : String(e));
  setup(spec).then(
    (subject) => {
      let stopping = false;
      const stop = (): void => {
        if (stopping) return;
        stopping = true;
        setTimeout(() => process.exit(0), 2_000).unref();
        Promise.resolve(subject.close?.()).finally(() => process.exit(0));
      };
      process.on('disconnect', stop);
      // Rounds run one after another: the runner never sends a second before the first is answered.
      process.on('message', (m: ToChild) => {
        if (m.type === 'stop') return stop();
        Promise.resolve()
          .then(() => subject.round(m.q as Q))
          .then(
            (result) => send({ type: 'round', result }),
            (e: unknown) => send({ type: 'error', error: errText(e) }, () => process.exit(1)),
          );
      });
      send({ type: 'ready', info: subject.info });
    },
    (e: unknown) => send({ type: 'error', error: errText(e) }, () => process.exit(1)),
  );
}

/**
 * Runs `rounds` rounds of every subject alternately, rotating the order each round, after one warm-up round
 * each (if `warmup`). A subject whose round fails is dropped from the rest (a note says so); the others go on.
 * @returns per subject (by index) its results in the order they ran.
 */
export async function alternate<T, R>(ctx: Ctx, subjects: T[], rounds: number, label: (s: T) => string,
  run: (s: T, round: number, warmup: boolean) => Promise<R>, notes: string[], warmup = true): Promise<R[][]> {
  const out: R[][] = subjects.map(() => []);
  const failed = new Set<number>();
  const n = subjects.length;
  for (let r = warmup ? -1 : 0; r < rounds; r++) {
    for (let k = 0; k < n; k++) {
      const i = (k + Math.max(0, r)) % n;
      if (failed.has(i)) continue;
      try {
        const res = await run(subjects[i], r, r < 0);
        if (r >= 0) out[i].push(res);
      } catch (e) {
        failed.add(i);
        const msg = (e as Error).message.split('\n')[0];
        notes.push(`${label(subjects[i])} failed: (${r < 0 ? 'warm-up' : `round ${r + 1}`}) ${msg}`);
        ctx.progress(`  FAILED: ${label(subjects[i])}: ${msg}`);
      }
    }
  }
  return out;
}

/**
 * Starts the children of a case, all at once (their set-ups overlap; none is timed), dropping any that fail.
 */
export async function startAll<T, Q, R>(ctx: Ctx, subjects: T[], label: (s: T) => string,
  start: (s: T) => Promise<RoundChild<Q, R>>, notes: string[]): Promise<Array<{ s: T; child: RoundChild<Q, R> }>> {
  const got = await Promise.allSettled(subjects.map((s) => start(s)));
  const out: Array<{ s: T; child: RoundChild<Q, R> }> = [];
  got.forEach((g, i) => {
    if (g.status === 'fulfilled') out.push({ s: subjects[i], child: g.value });
    else {
      const msg = (g.reason as Error).message.split('\n')[0];
      notes.push(`${label(subjects[i])} failed: ${msg}`);
      ctx.progress(`  FAILED: ${label(subjects[i])}: ${msg}`);
    }
  });
  return out;
}

export async function stopAll(children: Array<{ child: { stop(): Promise<void> } }>): Promise<void> {
  await Promise.all(children.map(({ child }) => child.stop()));
}
