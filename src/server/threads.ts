/**
 * Extra HTTP front threads (`--threads N`, `server.threads`): each a worker thread running its own uWS app on
 * the same port (SO_REUSEPORT: the kernel spreads new connections over the listening sockets), with its own
 * limiter front (validation, key hashing, answers) whose checks go, through the synchronous shared-memory
 * channels of src/shard/channel.ts, to the shard that owns the key: the same kernels decide every thread's
 * checks, so decisions stay exact with any number of front threads.
 *
 * What stays on the main thread: the shards (started by its limiter), reloads, the admin API, Redis. So a
 * limiter with extra front threads needs shards (the shards own the keys' state) and local policies only, and
 * its policy set is the one in force when the server starts (a reload is refused while front threads run:
 * each thread would have to switch with the shards' limit ids, which is not built yet). uWS's child-app
 * descriptors (one acceptor handing sockets to the threads) are not in the uWS build this project pins, hence
 * SO_REUSEPORT.
 */
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Limiter } from '../types.js';
import type { CompiledPolicy } from '../config/policies.js';
import { FRONT_THREADS, type FrontThreadSource } from '../shard/caller.js';
import type { ChannelMemory } from '../shard/channel.js';
import { packageRoot } from '../util/paths.js';
import { configError, shardFailed } from '../util/errors.js';

/** What an extra front thread is started with (structured-cloned; the channels and the module are shared). */
export interface FrontThreadData {
  thread: number;
  module: WebAssembly.Module;
  channels: ChannelMemory;
  policies: ReadonlyMap<string, CompiledPolicy>;
  limitIds: ReadonlyMap<string, readonly number[]>;
  /** The server's options that are plain data (no logger, no clock). */
  server: FrontThreadServer;
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
export type FrontThreadMessage = { kind: 'listening' } | { kind: 'failed'; message: string } | { kind: 'close' } | { kind: 'closed' };

/** The running extra front threads of one server. */
export interface FrontThreads {
  readonly count: number;
  /** Closes every thread's server (requests in flight finish) and limiter front; the shards stay. */
  close(): Promise<void>;
}

/**
 * Starts `count` extra front threads on `server.port` for `limiter` (which must have shards).
 * @throws SluiceError CONFIG when the limiter has no shards or a thread cannot fit a channel; the error of a
 *   thread that fails to start (its policies, its port).
 */
export async function startFrontThreads(limiter: Limiter, count: number, server: FrontThreadServer): Promise<FrontThreads> {
  const src = (limiter as unknown as { [FRONT_THREADS]?: FrontThreadSource })[FRONT_THREADS];
  if (src === undefined) throw configError('server', 'threads', 'more than 1 front thread needs shards (engine.shards >= 1): the shards hold the keys\' state every thread decides on');
  const room = src.channels.byShard[0]?.length ?? 0;
  if (count + 1 > room) throw configError('server', 'threads', `must be at most ${room} (the cores of this machine: one channel per thread and shard)`);
  const filename = import.meta.url.endsWith('.ts')
    ? pathToFileURL(join(packageRoot(), 'dist', 'src', 'server', 'front-thread.js'))
    : new URL('./front-thread.js', import.meta.url);
  const workers: Worker[] = [];
  const started = Array.from({ length: count }, (_, i) => {
    const data: FrontThreadData = {
      thread: i + 1, module: src.module, channels: src.channels, policies: limiter.policies, limitIds: src.limitIds(), server,
    };
    const w = new Worker(filename, { workerData: data });
    workers.push(w);
    return new Promise<void>((resolve, reject) => {
      w.once('message', (m: FrontThreadMessage) => (m.kind === 'listening' ? resolve() : reject(shardFailed(`front thread ${i + 1}: ${m.kind === 'failed' ? m.message : m.kind}`))));
      w.once('error', reject);
      w.once('exit', (code) => reject(shardFailed(`front thread ${i + 1} exited with code ${code} while starting`)));
    });
  });
  const close = async (): Promise<void> => {
    await Promise.all(workers.map((w) => new Promise<void>((resolve) => {
      w.once('exit', () => resolve());
      w.once('message', () => void w.terminate());
      w.postMessage({ kind: 'close' } satisfies FrontThreadMessage);
    })));
  };
  try {
    await Promise.all(started);
  } catch (e) {
    await Promise.all(workers.map((w) => w.terminate()));
    throw e;
  }
  return { count, close };
}
