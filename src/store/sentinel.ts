/**
 * Redis Sentinel (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/): sluice asks the
 * sentinels where the master named `name` is, connects to it, and after a failover (the sentinels promote a
 * replica) reconnects to the new master. Through ioredis's Sentinel support: each connection attempt resolves the
 * master with SENTINEL get-master-addr-by-name and checks the node's role. While the master is away, calls fail
 * at once (no offline queue) and each policy's onStoreError decides, as with one Redis, and the client retries
 * every 50 ms doubling to 250 ms, so it finds the promoted replica within about that long.
 *
 * A failover that leaves the old master up (`SENTINEL FAILOVER`, a partition) is followed through
 * {@link followSwitches}: it listens for `+switch-master` on every sentinel and reconnects the client at once, so
 * it does not go on writing to the old master (which accepts writes until the sentinels reconfigure it, up to
 * ~10 s later, and then drops them when it resyncs from the new master). A write answered READONLY (a demoted
 * master) reconnects too. ioredis's own `failoverDetector` does the same but is left off: seen here (ioredis
 * 5.11), its disconnect landing while a reconnection is resolving the master leaves the client never
 * reconnecting; {@link followSwitches} reconnects only a client that is connected.
 */
import { Redis, type RedisOptions as IORedisOptions } from 'ioredis';
import { configError } from '../util/errors.js';

/** Where the sentinels are and which master they watch (`--redis-sentinel host:port,... --redis-master NAME`). */
export interface SentinelTarget {
  /** Sentinel addresses, each `host:port` (an IPv6 host in brackets); one reachable sentinel is enough. */
  sentinels: readonly string[];
  /** The master's name, as the sentinels' `sentinel monitor <name> ...` gives it. */
  name: string;
}

/**
 * `host:port` strings as ioredis node addresses.
 * @throws SluiceError CONFIG naming `field` for an empty list or a malformed entry.
 */
export function hostPorts(nodes: readonly string[], field: string): Array<{ host: string; port: number }> {
  if (!Array.isArray(nodes) || nodes.length === 0) throw configError('redis', field, 'must be a non-empty list of host:port');
  return nodes.map((n) => {
    const m = typeof n === 'string' ? /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(n.trim()) : null;
    const port = m ? Number(m[2]) : 0;
    if (!m || port < 1 || port > 65535) {
      throw configError('redis', field, `each node must be host:port with a port in 1..65535 (got ${JSON.stringify(n)})`);
    }
    return { host: m[1].startsWith('[') ? m[1].slice(1, -1) : m[1], port };
  });
}

/** Longest wait between attempts to reach the master, in ms: each attempt asks the sentinels where it is now. */
export const SENTINEL_RECONNECT_MAX_MS = 250;

/**
 * The ioredis options that make a client follow `target`'s master; spread them over the client's own options
 * (they set its `retryStrategy`). `backoff(n)`: ms before the n-th attempt to reach a sentinel again when none
 * answered. The master is retried every 50 ms doubling to {@link SENTINEL_RECONNECT_MAX_MS}, not the seconds a
 * single Redis gets: an attempt is cheap (one sentinel query, then a refused connection until the failover), and a
 * long wait would keep decisions degraded well after a replica was promoted.
 * @throws SluiceError CONFIG naming `redis.sentinel.sentinels` or `redis.sentinel.name`.
 */
export function sentinelOptions(target: SentinelTarget, backoff: (n: number) => number): IORedisOptions {
  const sentinels = hostPorts(target.sentinels, 'redis.sentinel.sentinels');
  if (typeof target.name !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(target.name)) {
    throw configError('redis', 'redis.sentinel.name', `must be the master's name, 1 to 128 visible ASCII characters (got ${JSON.stringify(target.name)})`);
  }
  return {
    sentinels,
    name: target.name,
    role: 'master', // the scripts write
    sentinelRetryStrategy: backoff,
    retryStrategy: (n: number) => Math.min(50 * 2 ** Math.max(0, n - 1), SENTINEL_RECONNECT_MAX_MS),
    sentinelCommandTimeout: 1000,
    failoverDetector: false,
    reconnectOnError: (e: Error) => (e.message.startsWith('READONLY') ? 1 : false),
  };
}

/**
 * Reconnects `client` (made with {@link sentinelOptions}) whenever a sentinel announces `+switch-master` for
 * `target.name`, if it is connected then (a client reconnecting asks the sentinels anyway). One subscriber
 * connection per sentinel, closed when `client` ends (disconnect() without reconnecting).
 */
export function followSwitches(client: Redis, target: SentinelTarget): void {
  const subscribers = hostPorts(target.sentinels, 'redis.sentinel.sentinels').map(({ host, port }) => {
    const s = new Redis(port, host, {
      connectTimeout: 1000, maxRetriesPerRequest: null, retryStrategy: (n: number) => Math.min(100 * 2 ** n, 2000),
    });
    s.on('error', () => undefined); // a sentinel down: the others announce the switch
    s.on('message', (_channel: string, message: string) => {
      // "<name> <old ip> <old port> <new ip> <new port>"
      if (message.split(' ')[0] === target.name && client.status === 'ready') client.disconnect(true);
    });
    void s.subscribe('+switch-master').catch(() => undefined);
    return s;
  });
  client.once('end', () => {
    for (const s of subscribers) s.disconnect();
  });
}
