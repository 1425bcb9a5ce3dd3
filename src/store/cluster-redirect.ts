/**
 * The MOVED and ASK redirections ioredis leaves unfollowed on an auto-pipelined Redis Cluster, followed.
 *
 * Every command sluice sends to a Cluster goes in a pipeline (`enableAutoPipelining`: one per master and turn,
 * whatever the slots). ioredis follows a redirection there only when every command of the pipeline failed with
 * the same one (its Pipeline's fillResult resends a pipeline whole), which a master serving many slots rarely
 * gives: during a resharding the slot on its way answers ASK for the keys already moved while the master's other
 * slots are decided, and after a slot moved the old master answers MOVED until the slot map is read again (1 s:
 * src/store/redis.ts slotsRefreshInterval). The redirection then reaches the command as its error (ioredis#2075),
 * and every such check took its failure rule, every such sync merge failed until the next
 * (test/fault/redis-cluster-redirect.test.ts). And an ASK to a master added for a resharding, which serves no
 * slot yet and so is in no slot map, is not followed by ioredis's pipelines at all: they look the node up in the
 * pool built from the slot map (its commands sent alone add it first: ioredis#341; redix#319 is the same fault
 * in another client).
 *
 * {@link redirectOf} reads such an error, and {@link sendRedirected} sends the command where it names, on that
 * node's own connection: after ASKING for an ASK, and with the slot map read again after a MOVED. The caller
 * keeps each slot's order and bounds the hops (src/store/cluster-calls.ts).
 */
import type { Cluster, Redis } from 'ioredis';

/** Where a MOVED or ASK reply sends a command: `node` as `host:port`, ASKING first for an ASK. */
export interface Redirect {
  ask: boolean;
  slot: number;
  node: string;
}

/**
 * Whether `e` is Redis's TRYAGAIN: a command of several keys in a slot being migrated, some of them moved and
 * some not yet (a check of several limits, a guarded check, a merge with its marker), refused until the rest
 * have moved. ioredis retries it, like a redirection, only for a pipeline whose commands all got it.
 */
export function splitByMigration(e: unknown): boolean {
  return String((e as Error | null)?.message).startsWith('TRYAGAIN ');
}

/** `MOVED|ASK <slot> <host:port>` */
const REDIRECT = /^(MOVED|ASK) (\d+) (\S+)$/;

/** The redirection `e` is (a MOVED or ASK reply delivered as a command's error), else null. */
export function redirectOf(e: unknown): Redirect | null {
  const m = REDIRECT.exec(String((e as Error | null)?.message));
  return m === null ? null : { ask: m[1] === 'ASK', slot: Number(m[2]), node: m[3] };
}

/** The parts of an ioredis Cluster reached here (ioredis 5: private members, used as its own ASK path uses them). */
interface ClusterInternals {
  natMapper(nodeKey: string): object;
  connectionPool: { findOrCreate(node: object, readOnly?: boolean): Redis };
}

/**
 * Sends `command` to the master `r` names, on that master's own client from `c`'s pool (made, lazily connected,
 * as ioredis's own ASK path makes it when the pool has none: `natMapper`, then `findOrCreate`). Nothing is
 * auto-pipelined on such a client, so the command is written now, in the order of these calls: an ASK's ASKING
 * just ahead of it, nothing between them (ASKING holds for the next command only). After a MOVED the slot map is
 * read again, so the slot's next calls go there by it. `command` makes the call on that client.
 * @throws TypeError when `c` lacks those members (an ioredis whose internals moved)
 */
export function sendRedirected<T>(c: Cluster, r: Redirect, command: (node: Redis) => Promise<T>): Promise<T> {
  const inner = c as unknown as ClusterInternals;
  if (typeof inner.natMapper !== 'function' || typeof inner.connectionPool?.findOrCreate !== 'function') {
    throw new TypeError('sendRedirected: this ioredis Cluster has no natMapper or connectionPool.findOrCreate');
  }
  const node = inner.connectionPool.findOrCreate(inner.natMapper(r.node));
  // its answer is OK, or the error the command after it meets too
  if (r.ask) node.asking().catch(() => undefined);
  else c.refreshSlotsCache();
  return command(node);
}

/**
 * `send(r)`: a command on `r`. On a Cluster, when it fails with a redirection ioredis left unfollowed,
 * `send(node)` on the master that redirection names ({@link sendRedirected}), up to `hops` times. For commands
 * whose order nothing else keeps (an admin read or delete, a sync merge, a lease call): a check's redirections go
 * in its slot's order (src/store/cluster-calls.ts). Rejects with the last failure.
 */
export function followed<T>(r: Redis | Cluster, send: (to: Redis | Cluster) => Promise<T>, hops = 3): Promise<T> {
  if (!isCluster(r)) return send(r);
  const go = async (c: Cluster): Promise<T> => {
    let to: Redirect | null = null;
    for (let hop = 0; ; hop++) {
      try {
        return await (to === null ? send(c) : sendRedirected(c, to, send));
      } catch (e) {
        const next = redirectOf(e);
        if (next === null || hop >= hops) throw e;
        to = next;
      }
    }
  };
  return go(r);
}

/** Whether `r` is a Cluster (ioredis marks its Cluster with `isCluster`; its Redis has it false). */
function isCluster(r: Redis | Cluster): r is Cluster {
  return (r as { isCluster?: boolean }).isCluster === true;
}
