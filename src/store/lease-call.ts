import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { deadline, Liveness } from './deadline.js';
import { leaseScript, scriptMissing } from './scripts.js';

/**
 * The call that runs lua/concurrency.lua on one key (RedisStore.lease): EVALSHA, and EVAL once after a
 * NOSCRIPT (restart, failover, SCRIPT FLUSH). One key per call, so on a Redis Cluster the client routes it to
 * the key's slot. Each call has the deadline of src/store/deadline.ts (slow is not down); `late` sees the reply
 * of a call given up on at its deadline that Redis ran afterwards (its caller has taken the failure rule).
 */
export function leaseCaller(redis: Redis | Cluster, timeoutMs: number,
  late?: (key: string, args: Array<string | number>, reply: number[]) => void): (key: string, args: Array<string | number>) => Promise<number[]> {
  const lua = leaseScript();
  const sha = createHash('sha1').update(lua).digest('hex');
  const live = new Liveness();
  const run = async (key: string, args: Array<string | number>): Promise<number[]> => {
    try {
      return (await redis.evalsha(sha, 1, key, ...args)) as number[];
    } catch (e) {
      if (!scriptMissing(e)) throw e;
      return (await redis.eval(lua, 1, key, ...args)) as number[];
    }
  };
  return (key, args) => deadline(run(key, args), timeoutMs, live, late === undefined ? undefined : (r) => late(key, args, r));
}
