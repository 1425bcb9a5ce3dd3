/**
 * An extra HTTP front thread (src/server/threads.ts): its own limiter front, whose shards are reached through
 * this thread's channels, behind its own uWS app on the shared port. It decides under the main thread's policy
 * set and limit ids: the one in force at its start, then each one a reload hands it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createLimiter } from '../limiter.js';
import { adoptCompiled } from '../config/policies.js';
import { type CompiledPolicy } from '../config/policy-spec.js';
import type { FrontThreadLink, PolicySetUpdate } from '../shard/caller.js';
import { engineOf } from '../engine/handle.js';
import { startServer } from './http.js';
import type { FrontThreadData, FrontThreadMessage } from './threads.js';
import { shardFailed } from '../util/errors.js';

const d = workerData as FrontThreadData;
const port = parentPort!;

/** The set as structured clone delivered it, made a trusted compiled set again. */
function received(set: PolicySetUpdate<CompiledPolicy>): PolicySetUpdate<CompiledPolicy> {
  return { ...set, policies: adoptCompiled(set.policies as Map<string, CompiledPolicy>) };
}

try {
  const first = received(d.set);
  const link: FrontThreadLink = { channels: d.channels, thread: d.thread };
  const limiter = await createLimiter({ policies: first.policies, shards: d.channels.byShard.length, maxKeys: 1, maxDelayed: d.maxDelayed }, { frontThread: link });
  const src = engineOf(limiter)!.frontThreads!;
  // the shards know limits by id: this thread decides under the main thread's ids, not ids of its own planning
  src.adopt(first);
  // a scrape that lands on this thread is rendered by the main thread, which sums every thread's counters
  let scrapes = 0;
  const scraping = new Map<number, { resolve(text: string): void; reject(e: Error): void }>();
  const scrape = (): Promise<string> => new Promise<string>((resolve, reject) => {
    const seq = ++scrapes;
    scraping.set(seq, { resolve, reject });
    port.postMessage({ kind: 'scrape', seq } satisfies FrontThreadMessage);
  });
  const s = d.server;
  const server = await startServer({
    limiter, host: s.host, port: s.port, maxBodyBytes: s.maxBodyBytes, maxBatchItems: s.maxBatchItems,
    authDenyStatus: s.authDenyStatus, stream: s.stream ? undefined : false, statusPage: s.statusPage,
    activity: s.activity ? undefined : false, hotKeyMetrics: s.hotKeyMetrics, reusePort: true, scrape,
  });
  port.on('message', (m: FrontThreadMessage) => {
    if (m.kind === 'scraped') {
      const r = scraping.get(m.seq);
      scraping.delete(m.seq);
      if (m.text !== undefined) r?.resolve(m.text);
      else r?.reject(shardFailed(`the main thread could not render the metrics: ${m.message ?? 'no answer'}`));
    } else if (m.kind === 'policies') {
      try {
        src.adopt(received(m.set));
        port.postMessage({ kind: 'done', seq: m.seq } satisfies FrontThreadMessage);
      } catch (e) {
        port.postMessage({ kind: 'refused', seq: m.seq, message: (e as Error)?.message ?? String(e) } satisfies FrontThreadMessage);
      }
    } else if (m.kind === 'metrics') {
      // render first: it reads this thread's limiter stats (its front's counters) into the metrics
      void server.metrics.render().then(() => server.metrics.registry.getMetricsAsJSON()).then(
        (json) => port.postMessage({ kind: 'done', seq: m.seq, metrics: json } satisfies FrontThreadMessage),
        (e: Error) => port.postMessage({ kind: 'refused', seq: m.seq, message: e?.message ?? String(e) } satisfies FrontThreadMessage),
      );
    } else if (m.kind === 'close') {
      void server.close().then(() => limiter.close()).finally(() => {
        port.postMessage({ kind: 'closed' } satisfies FrontThreadMessage);
        port.close();
      });
    }
  });
  port.postMessage({ kind: 'listening' } satisfies FrontThreadMessage);
} catch (e) {
  port.postMessage({ kind: 'failed', message: (e as Error)?.message ?? String(e) } satisfies FrontThreadMessage);
}
