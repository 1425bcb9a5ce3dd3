/**
 * Redis Sentinel (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/): sluice asks the
 * sentinels where the master named `name` is, connects to it, and after a failover (the sentinels promote a
 * replica) reconnects to the new master. Through ioredis's Sentinel support: it resolves the master with
 * SENTINEL get-master-addr-by-name, checks the node's role, and with `failoverDetector` listens for
 * `+switch-master` on the sentinels, so the switch is followed as soon as the sentinels announce it rather than
 * when the old connection times out. While the master is away, calls fail at once (no offline queue) and each
 * policy's onStoreError decides, as with one Redis.
 */
import type { RedisOptions as IORedisOptions } from 'ioredis';
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

/**
 * The ioredis options that make a client follow `target`'s master; merge the client's own options over them.
 * `backoff(n)`: ms before the n-th attempt to reach a sentinel again when none answered.
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
    sentinelCommandTimeout: 1000,
    failoverDetector: true,
  };
}
