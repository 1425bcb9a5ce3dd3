/**
 * An extra HTTP front thread (src/server/threads.ts): its own limiter front, whose shards are reached through
 * this thread's channels, behind its own uWS app on the shared port.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createLimiter } from '../limiter.js';
import { adoptCompiled, type CompiledPolicy } from '../config/policies.js';
import { FRONT_THREAD, FRONT_THREADS, type FrontThreadLink, type FrontThreadSource } from '../shard/caller.js';
import type { LimiterOptions } from '../types.js';
import { startServer } from './http.js';
import type { FrontThreadData, FrontThreadMessage } from './threads.js';
import { configError } from '../util/errors.js';

const d = workerData as FrontThreadData;
const port = parentPort!;

try {
  const policies = adoptCompiled(d.policies as Map<string, CompiledPolicy>);
  const link: FrontThreadLink = { channels: d.channels, thread: d.thread };
  const limiter = await createLimiter({
    policies, shards: d.channels.byShard.length, maxKeys: 1, [FRONT_THREAD]: link,
  } as LimiterOptions);
  // the shards know limits by id: this thread's ids must be the main thread's
  const ids = (limiter as unknown as { [FRONT_THREADS]: FrontThreadSource })[FRONT_THREADS].limitIds();
  for (const [name, own] of ids) {
    const main = d.limitIds.get(name);
    if (main === undefined || main.length !== own.length || main.some((id, j) => id !== own[j])) {
      throw configError('server', 'threads', `policy "${name}": this front thread numbers its limits unlike the shards (the policies were reloaded before the server started)`);
    }
  }
  const s = d.server;
  const server = await startServer({
    limiter, host: s.host, port: s.port, maxBodyBytes: s.maxBodyBytes, maxBatchItems: s.maxBatchItems,
    authDenyStatus: s.authDenyStatus, stream: s.stream ? undefined : false, statusPage: s.statusPage,
    activity: s.activity ? undefined : false, hotKeyMetrics: s.hotKeyMetrics, reusePort: true,
  });
  port.on('message', (m: FrontThreadMessage) => {
    if (m.kind !== 'close') return;
    void server.close().then(() => limiter.close()).finally(() => {
      port.postMessage({ kind: 'closed' } satisfies FrontThreadMessage);
      port.close();
    });
  });
  port.postMessage({ kind: 'listening' } satisfies FrontThreadMessage);
} catch (e) {
  port.postMessage({ kind: 'failed', message: (e as Error)?.message ?? String(e) } satisfies FrontThreadMessage);
}
