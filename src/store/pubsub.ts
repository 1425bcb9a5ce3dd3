/**
 * Pub/sub channels on Redis (one server, Sentinel or Cluster): the reloader's policy announcements
 * (src/reload/reloader.ts) go through {@link openChannel}, reached through the store (`Store.channel`, src/store/contract.ts).
 *
 * A channel holds two connections of its own: a subscriber (a connection in subscribe mode runs nothing
 * else) and a publisher. The publisher has no offline queue: a publish while Redis is away fails at once, and
 * the caller sends it again on {@link StoreChannel.onReady}. The subscriber queues its SUBSCRIBE until
 * connected, and ioredis subscribes again on every reconnect. Both reconnect as the store does
 * (src/store/backoff.ts).
 */
import { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { StoreChannel } from './contract.js';
import { closed, storeFailed } from '../util/errors.js';
import { reconnectBackoff } from './backoff.js';
import { followSwitches, hostPorts, sentinelOptions, type SentinelTarget } from './sentinel.js';

/** Where a channel connects: the store's own target. */
export type ChannelTarget = { url: string } | { cluster: readonly string[] } | { sentinel: SentinelTarget };

/** How long close() waits for Redis to answer QUIT, in ms. */
const QUIT_MS = 500;

/**
 * KEYS[1] the kept HASH (m message, o order, t tie); ARGV: message, ms to keep it, its order, its tie, the
 * channel. Keeps the message unless the one kept comes later (a higher order, or an equal order and a tie
 * after it byte by byte: Lua's own string comparison follows the server's locale), then publishes it; returns
 * PUBLISH's count.
 */
const KEEP_AND_PUBLISH = `local k = redis.call('HMGET', KEYS[1], 'o', 't')
local o, n = tonumber(k[1]), tonumber(ARGV[3])
local keep = not o or o < n
if o == n then
  local a, b = k[2] or '', ARGV[4]
  local i, m = 1, math.min(#a, #b)
  while i <= m and string.byte(a, i) == string.byte(b, i) do i = i + 1 end
  if i > m then keep = #a <= #b else keep = string.byte(a, i) < string.byte(b, i) end
end
if keep then
  redis.call('HSET', KEYS[1], 'm', ARGV[1], 'o', ARGV[3], 't', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('PUBLISH', ARGV[5], ARGV[1])`;

/** Opens `name` on `target` (see the file's comment); `onMessage` receives every message published on it. */
export function openChannel(target: ChannelTarget, name: string, onMessage: (message: string) => void, log?: Logger): StoreChannel {
  const backoff = reconnectBackoff;
  const make = (offlineQueue: boolean): Redis | Cluster => {
    const c = 'cluster' in target
      ? new Cluster(hostPorts(target.cluster, 'redis.cluster'), {
        enableOfflineQueue: offlineQueue, clusterRetryStrategy: backoff, redisOptions: { connectTimeout: 1000, maxRetriesPerRequest: 1 },
      })
      : 'sentinel' in target
        ? new Redis({ enableOfflineQueue: offlineQueue, connectTimeout: 1000, maxRetriesPerRequest: 1, ...sentinelOptions(target.sentinel, backoff) })
        : new Redis(target.url, { enableOfflineQueue: offlineQueue, connectTimeout: 1000, maxRetriesPerRequest: 1, retryStrategy: backoff });
    // ioredis emits 'error' on every failed reconnect; unhandled, it would crash the process
    c.on('error', (e: Error) => log?.debug({ err: e.message, channel: name }, 'pub/sub channel: redis error'));
    if ('sentinel' in target) followSwitches(c as Redis, target.sentinel);
    return c;
  };
  let pub: Redis | Cluster | null = make(false);
  let sub: Redis | Cluster | null = make(true);
  sub.on('message', (channel: string, message: string) => {
    if (channel === name) onMessage(message);
  });
  const subscribed = sub.subscribe(name).then(() => undefined);
  // a failed subscription is reported through `subscribed`; it must not be an unhandled rejection meanwhile
  subscribed.catch(() => undefined);
  // the kept message (publish with keep): a HASH beside the channel, `m` the message and `o` its order (on a
  // Cluster the script runs on its slot's master, and a PUBLISH reaches every node's subscribers)
  const keptKey = `${name}:kept`;
  const resubscribed: Array<(kept: string | null) => void> = [];
  // The kept message, read on the publisher once it is connected (it has no offline queue); null once closed.
  const readKept = async (): Promise<string | null> => {
    for (;;) {
      const p = pub;
      if (p === null) return null;
      try {
        return await p.hget(keptKey, 'm');
      } catch (e) {
        // connected, yet refused (a key of another type under that name): there is no kept message to read
        if (p.status === 'ready') {
          log?.debug({ err: e, channel: name }, 'pub/sub channel: the kept message cannot be read');
          return null;
        }
        await new Promise<void>((resolve) => {
          if (pub === null) resolve();
          else pub.once('ready', () => resolve());
        });
      }
    }
  };
  let connects = 0;
  sub.on('ready', () => {
    // the first 'ready' is the first connection; later ones follow a lost connection, whose messages are gone
    if (++connects === 1 || resubscribed.length === 0) return;
    const s = sub;
    if (s === null) return;
    // ioredis has sent the SUBSCRIBE again; this one resolves once Redis confirmed it, so the kept message is
    // read after the subscription is in force (see StoreChannel.onResubscribed)
    s.subscribe(name).then(readKept).then((kept) => {
      if (sub === null) return;
      for (const fn of resubscribed) fn(kept);
    }, (e: unknown) => log?.debug({ err: e, channel: name }, 'pub/sub channel: catching up after a reconnect failed (the next reconnect tries again)'));
  });
  return {
    subscribed,
    publish: (message, keep) => {
      if (pub === null) return Promise.reject(closed('pub/sub channel'));
      if (keep === undefined) return pub.publish(name, message);
      // kept (unless a later one is), then published, in one script step: a subscriber that reads the kept
      // message after subscribing cannot miss a message published before its subscription (onResubscribed)
      return (pub.eval(KEEP_AND_PUBLISH, 1, keptKey, message, keep.ms, keep.order, keep.tie, name) as Promise<number>)
        .catch((e: unknown) => {
          throw storeFailed(e);
        });
    },
    onReady: (fn) => pub?.on('ready', fn),
    onResubscribed: (fn) => {
      resubscribed.push(fn);
    },
    async close() {
      const conns = [sub, pub].filter((c): c is Redis | Cluster => c !== null);
      sub = pub = null;
      // QUIT waits for Redis's answer, which a frozen Redis never sends: past QUIT_MS the connection is dropped
      await Promise.all(conns.map((c) => quitWithin(c, QUIT_MS)));
    },
  };
}

/** QUIT, or after `ms` (or on an error) a plain disconnect; resolves either way. */
async function quitWithin(c: Redis | Cluster, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((r) => { timer = setTimeout(() => r('late'), ms); });
  const done = await Promise.race([c.quit().then(() => 'ok' as const, () => 'failed' as const), late]);
  clearTimeout(timer);
  if (done !== 'ok') c.disconnect();
}
