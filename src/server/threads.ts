/**
 * Extra HTTP front threads (`--threads N`, `server.threads`): each a worker thread running its own uWS app on
 * the same port (SO_REUSEPORT: the kernel spreads new connections over the listening sockets), with its own
 * limiter front (validation, key hashing, answers) whose checks go, through the synchronous shared-memory
 * channels of src/shard/channel.ts, to the shard that owns the key: the same kernels decide every thread's
 * checks, so decisions stay exact with any number of front threads.
 *
 * What stays on the main thread: the shards (started by its limiter), reloads, the admin API, Redis. So a
 * limiter with extra front threads needs shards (the shards own the keys' state) and local policies only. A
 * reload (file, SIGHUP, admin API, peer: all go through `limiter.reload`) is planned on the main thread, told
 * to the shards, then handed to every front thread (the set and its limit ids) and reported applied only when
 * each has switched; when one does not, the reload fails and every thread is put back on the previous set.
 * Between the main thread's switch and a front thread's (one message), that thread still decides under the
 * previous set, whose ids the shards keep until the reload is over. uWS's child-app
 * descriptors (one acceptor handing sockets to the threads) are not in the uWS build this project pins, hence
 * SO_REUSEPORT.
 */
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Limiter } from '../types.js';
import type { CompiledPolicy } from '../config/policy-spec.js';
import type { PolicySetUpdate } from '../shard/caller.js';
import { engineOf } from '../engine/handle.js';
import type { ChannelMemory } from '../shard/channel.js';
import { packageRoot } from '../util/paths.js';
import { closed, configError, shardFailed } from '../util/errors.js';

/** What an extra front thread is started with (structured-cloned; the channels and the module are shared). */
export interface FrontThreadData {
  thread: number;
  module: WebAssembly.Module;
  channels: ChannelMemory;
  /** The policy set in force, with the main thread's limit ids (the shards know limits by id). */
  set: PolicySetUpdate<CompiledPolicy>;
  /** The server's options that are plain data (no logger, no clock). */
  server: FrontThreadServer;
  /** onLimit: delay's bound on checks waiting (the main limiter's maxDelayed), held by each thread's front. */
  maxDelayed: number;
}

export interface FrontThreadServer {
  host: string;
  port: number;
  maxBodyBytes?: number;
  maxBatchItems?: number;
  authDenyStatus?: 429 | 403;
  stream: boolean;
  statusPage?: boolean;
  activity: boolean;
  hotKeyMetrics?: number;
}

/** Messages between the main thread and a front thread. */
export type FrontThreadMessage =
  | { kind: 'listening' } | { kind: 'failed'; message: string } | { kind: 'close' } | { kind: 'closed' }
  /** main → thread: adopt this policy set (answered `done` or `refused` with the same seq). */
  | { kind: 'policies'; seq: number; set: PolicySetUpdate<CompiledPolicy> }
  /** main → thread: this thread's metrics as prom-client JSON (answered `done` with `metrics`). */
  | { kind: 'metrics'; seq: number }
  /** thread → main: a scrape of `/metrics` landed here; main answers `scraped` with the summed text. */
  | { kind: 'scrape'; seq: number }
  | { kind: 'scraped'; seq: number; text?: string; message?: string }
  | { kind: 'done'; seq: number; metrics?: unknown }
  | { kind: 'refused'; seq: number; message: string };

/** Longest the main thread waits for a front thread to adopt a policy set or hand its metrics, in ms. */
export const FRONT_THREAD_REPLY_MS = 5000;

/** The running extra front threads of one server. */
export interface FrontThreads {
  readonly count: number;
  /** Every thread's metrics (prom-client `getMetricsAsJSON`), for the main thread to aggregate. */
  metrics(): Promise<unknown[]>;
  /** Closes every thread's server (requests in flight finish) and limiter front; the shards stay. */
  close(): Promise<void>;
}

/**
 * Starts `count` extra front threads on `server.port` for `limiter` (which must have shards). From then on,
 * every reload of `limiter` waits until each thread has adopted the new set (its limit ids included), and
 * fails (the previous set put back) when one does not within {@link FRONT_THREAD_REPLY_MS}.
 * `scrape`: the main thread's `/metrics` text (every thread's counters summed), for a scrape that lands on a
 * front thread.
 * @throws SluiceError CONFIG when the limiter has no shards, has a clock of its own, has a policy that is not
 *   `consistency: local` (a reload to such a set fails the same way), or a thread cannot fit a channel; the
 *   error of a thread that fails to start (its policies, its port).
 */
export async function startFrontThreads(limiter: Limiter, count: number, server: FrontThreadServer, scrape: () => Promise<string>): Promise<FrontThreads> {
  const src = engineOf(limiter)?.frontThreads ?? null;
  if (src === null) throw configError('server', 'threads', 'more than 1 front thread needs shards (engine.shards >= 1): the shards hold the keys\' state every thread decides on');
  if (!src.wallClock) throw configError('server', 'threads', 'more than 1 front thread needs a limiter on the wall clock (no clock option): each thread reads Date.now and the shard decides at that reading; a clock of your own cannot be shared with other threads');
  refuseStorePolicies(src.current().policies, 'server', 'threads');
  const room = src.channels.byShard[0]?.length ?? 0;
  if (count + 1 > room) throw configError('server', 'threads', `must be at most ${room} (the cores of this machine: one channel per thread and shard)`);
  const filename = import.meta.url.endsWith('.ts')
    ? pathToFileURL(join(packageRoot(), 'dist', 'src', 'server', 'front-thread.js'))
    : new URL('./front-thread.js', import.meta.url);
  const workers: Worker[] = [];
  /** Replies awaited, by seq. */
  const waiting = new Map<number, { resolve(m: unknown): void; reject(e: Error): void }>();
  let seq = 0;
  const ask = (w: Worker, thread: number, m: { kind: 'policies'; set: PolicySetUpdate<CompiledPolicy> } | { kind: 'metrics' }): Promise<unknown> => {
    const n = ++seq;
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(n);
        reject(shardFailed(`front thread ${thread} did not answer ${m.kind === 'policies' ? 'a policy reload' : 'for its metrics'} within ${FRONT_THREAD_REPLY_MS} ms`));
      }, FRONT_THREAD_REPLY_MS);
      waiting.set(n, {
        resolve: (v) => { clearTimeout(timer); resolve(v); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      });
      w.postMessage({ ...m, seq: n } satisfies FrontThreadMessage);
    });
  };
  const started = Array.from({ length: count }, (_, i) => {
    const data: FrontThreadData = {
      thread: i + 1, module: src.module, channels: src.channels, set: src.current(), server,
      maxDelayed: engineOf(limiter)!.delays.max,
    };
    const w = new Worker(filename, { workerData: data });
    workers.push(w);
    w.on('message', (m: FrontThreadMessage) => {
      if (m.kind === 'scrape') {
        scrape().then((text) => w.postMessage({ kind: 'scraped', seq: m.seq, text } satisfies FrontThreadMessage),
          (e: Error) => w.postMessage({ kind: 'scraped', seq: m.seq, message: e?.message ?? String(e) } satisfies FrontThreadMessage));
        return;
      }
      if (m.kind !== 'done' && m.kind !== 'refused') return;
      const r = waiting.get(m.seq);
      waiting.delete(m.seq);
      if (m.kind === 'done') r?.resolve(m.metrics);
      else r?.reject(shardFailed(`front thread ${i + 1} refused the policy set: ${m.message}`));
    });
    return new Promise<void>((resolve, reject) => {
      w.once('message', (m: FrontThreadMessage) => (m.kind === 'listening' ? resolve() : reject(shardFailed(`front thread ${i + 1}: ${m.kind === 'failed' ? m.message : m.kind}`))));
      w.once('error', reject);
      w.once('exit', (code) => reject(shardFailed(`front thread ${i + 1} exited with code ${code} while starting`)));
    });
  });
  // Registered before the threads start: a reload meanwhile reaches them too (a thread started from the older
  // set adopts the newer one when it is up).
  const unfollow = src.follow(async (set) => {
    refuseStorePolicies(set.policies, 'server', 'threads');
    await Promise.all(workers.map((w, i) => ask(w, i + 1, { kind: 'policies', set })));
  });
  const close = async (): Promise<void> => {
    unfollow();
    await Promise.all(workers.map((w) => new Promise<void>((resolve) => {
      w.once('exit', () => resolve());
      w.on('message', (m: FrontThreadMessage) => void (m.kind === 'closed' && w.terminate()));
      w.postMessage({ kind: 'close' } satisfies FrontThreadMessage);
    })));
    for (const r of waiting.values()) r.reject(closed('front threads'));
    waiting.clear();
  };
  try {
    await Promise.all(started);
  } catch (e) {
    unfollow();
    await Promise.all(workers.map((w) => w.terminate()));
    throw e;
  }
  return {
    count,
    metrics: () => Promise.all(workers.map((w, i) => ask(w, i + 1, { kind: 'metrics' }))),
    close,
  };
}

/**
 * Refuses a policy set with a policy decided with Redis (any consistency but `local`) for extra front threads:
 * the store is reached from the main thread only. `where` and `field` name the setting that asks for the
 * threads (`server` `threads`, or `sluice serve` `--threads`).
 * @throws SluiceError CONFIG naming `field` and the first such policy.
 */
export function refuseStorePolicies(policies: ReadonlyMap<string, CompiledPolicy>, where: string, field: string): void {
  for (const p of policies.values()) {
    if (p.consistency !== 'local') {
      throw configError(where, field, `more than 1 front thread needs local policies only (consistency: local; Redis is reached from the main thread only), and policy "${p.name}" has consistency ${p.consistency}: run 1 thread or make the policy local`);
    }
  }
}
