import { execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { createLimiter, type Limiter, type LimiterOptions } from '../../src/index.js';
import { connected, exited, freePort, launchRedis, portTaken } from './redis.js';

const run = promisify(execFile);

/** A Redis Cluster of the test's own: three masters, no replicas, no persistence, in a temp dir. */
export interface TestCluster {
  ports: number[];
  /** Seed nodes as `createLimiter({ redis: { cluster } })` and `--redis-cluster` take them: `127.0.0.1:port`. */
  nodes: string[];
  /** A plain client per master (same order as `ports`), for inspecting the keys each one holds. */
  clients: Redis[];
  /** Every key on every master whose name starts with `prefix`, sorted, each with its master's index. */
  keysUnder(prefix: string): Promise<Array<{ key: string; node: number }>>;
  /** SIGKILL master `i` and wait for its exit (its slots stay assigned to it: no replica takes over). */
  kill(i: number): Promise<void>;
  /** Starts master `i` again on its port and nodes file (same identity and slots, no data), then waits for `cluster_state:ok` on all. */
  restart(i: number): Promise<void>;
  stop(): Promise<void>;
}

/** A cluster bus listens on port + 10000: take a free port whose bus port is free too. */
async function freeClusterPort(taken: Set<number>): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const p = await freePort();
    if (p + 10000 > 65535 || taken.has(p)) continue;
    const busFree = await new Promise<boolean>((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(p + 10000, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (busFree) return p;
  }
  throw new Error('no free port pair for a cluster node');
}

/** A cluster-enabled redis-server on `port`, its nodes file in `dir`. */
function launch(port: number, dir: string): Promise<ChildProcess> {
  return launchRedis(port, [
    '--dir', dir, '--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, `nodes-${port}.conf`),
    '--cluster-node-timeout', '5000',
  ]);
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits (up to 20 s) until every node reports `cluster_state:ok`, all 16,384 slots served, and sees three connected masters. */
async function ok(clients: Redis[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const infos = await Promise.all(clients.map((c) => c.cluster('INFO') as Promise<string>));
      const masters = await Promise.all(clients.map(async (c) =>
        ((await c.cluster('NODES')) as string).split('\n').filter((l) => /\bmaster\b/.test(l) && !/\bfail\??\b/.test(l) && / connected\b/.test(l)).length));
      if (infos.every((i) => i.includes('cluster_state:ok') && i.includes('cluster_slots_ok:16384')) && masters.every((m) => m === 3)) return;
      if (Date.now() > deadline) throw new Error(`cluster not ok within 20 s: ${infos.join(' | ')}`);
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    await pause(50);
  }
}

/**
 * Starts three cluster-enabled masters on free ports, joins them with `redis-cli --cluster create` (the
 * 16,384 slots split three ways, no replicas) and waits until every node reports `cluster_state:ok` and
 * knows all three masters. `stop()` kills them and removes the temp dir.
 */
export async function startCluster(): Promise<TestCluster> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-cluster-'));
  const children: ChildProcess[] = [];
  const clients: Redis[] = [];
  const stop = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    for (const c of children) c.kill('SIGKILL');
    await Promise.all(children.map(exited));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const ports: number[] = [];
    const taken = new Set<number>();
    for (let i = 0; i < 3; i++) {
      const p = await freeClusterPort(taken);
      taken.add(p);
      ports.push(p);
    }
    for (let i = 0; i < ports.length; i++) {
      // another free port pair when this one was taken before the node bound it (portTaken)
      for (let attempt = 1; ; attempt++) {
        try {
          children.push(await launch(ports[i], dir));
          break;
        } catch (e) {
          if (!portTaken(e) || attempt === 5) throw e;
          ports[i] = await freeClusterPort(taken);
          taken.add(ports[i]);
        }
      }
    }
    const nodes = ports.map((p) => `127.0.0.1:${p}`);
    await run('redis-cli', ['--cluster', 'create', ...nodes, '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 });
    for (const p of ports) {
      const c = new Redis(p, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
      c.on('error', () => undefined);
      clients.push(c);
    }
    await ok(clients);
    return {
      ports,
      nodes,
      clients,
      async keysUnder(prefix: string) {
        const out: Array<{ key: string; node: number }> = [];
        for (const [node, c] of clients.entries()) {
          let cursor = '0';
          do {
            const [next, batch] = await c.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
            for (const key of batch) out.push({ key, node });
            cursor = next;
          } while (cursor !== '0');
        }
        return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      },
      async kill(i: number) {
        children[i].kill('SIGKILL');
        await exited(children[i]);
      },
      async restart(i: number) {
        children[i] = await launch(ports[i], dir);
        await ok(clients);
      },
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/**
 * A {@link TestCluster} for the enclosing describe block: started before its tests (60 s allowed), stopped after
 * them, once the limiters `limiter` made are closed (and `cleanup`, if given, has run: a process to resume, say).
 * `cluster()` gives it inside a test; `limiter(opts)` makes a limiter on it (`opts.redis` without the seed
 * nodes, which are the cluster's) and waits until it is connected.
 */
export function clusterSuite(cleanup?: () => void): {
  cluster: () => TestCluster;
  limiter: (opts: Omit<LimiterOptions, 'redis'> & { redis: Omit<NonNullable<LimiterOptions['redis']>, 'cluster' | 'url'> }) => Promise<Limiter>;
} {
  let c: TestCluster | undefined;
  const limiters: Limiter[] = [];
  beforeAll(async () => {
    c = await startCluster();
  }, 60_000);
  afterAll(async () => {
    cleanup?.();
    await Promise.all(limiters.splice(0).map((l) => l.close()));
    await c?.stop();
  });
  return {
    cluster: () => c!,
    async limiter(opts) {
      const l = await createLimiter({ ...opts, redis: { ...opts.redis, cluster: c!.nodes } });
      limiters.push(l);
      await connected(l);
      return l;
    },
  };
}

/**
 * Spends 1 on keys `k0`…`k{n-1}` of `policy` (their Redis keys under `prefix`) and gives the keys each master
 * holds, by the master's index: a test that freezes or flushes one master picks its keys, and the others', here.
 * Fails unless every master holds two keys or more.
 */
export async function keysByMaster(c: TestCluster, l: Limiter, policy: string, prefix: string, n = 30): Promise<string[][]> {
  for (let i = 0; i < n; i++) await l.check({ policy, key: `k${i}`, cost: 1 });
  const byNode: string[][] = c.ports.map(() => []);
  for (const { key, node } of await c.keysUnder(prefix)) {
    const m = /:(k\d+)\}/.exec(key);
    // once per key: a policy of several limits stores a state per limit, all under the key's hash tag
    if (m && !byNode[node].includes(m[1])) byNode[node].push(m[1]);
  }
  if (!byNode.every((ks) => ks.length > 1)) throw new Error(`keysByMaster: a master holds fewer than 2 of ${n} keys: ${JSON.stringify(byNode)}`);
  return byNode;
}

/** The process id of master `i` (INFO server), to freeze it with SIGSTOP. */
export async function masterPid(c: TestCluster, i: number): Promise<number> {
  const pid = Number(/process_id:(\d+)/.exec(await c.clients[i].info('server'))?.[1]);
  if (!(pid > 1)) throw new Error(`masterPid: no process id for master ${i}`);
  return pid;
}

/**
 * Makes master `i` announce `port` (CONFIG SET cluster-announce-port: a proxy to it, test/helpers/hold-proxy.ts)
 * and waits (up to 20 s) until every node's slot map gives that port for it: a client that connects after
 * reaches that master only through the proxy. The test's own clients (`clients`) still reach it directly.
 */
export async function announcePort(c: TestCluster, i: number, port: number): Promise<void> {
  await c.clients[i].config('SET', 'cluster-announce-port', String(port));
  const deadline = Date.now() + 20_000;
  for (;;) {
    const maps = await Promise.all(c.clients.map((x) => x.cluster('SLOTS')));
    if (maps.every((m) => m.some((range) => range[2][1] === port) && !m.some((range) => range[2][1] === c.ports[i]))) return;
    if (Date.now() > deadline) throw new Error(`announcePort: master ${i} not announced at ${port} within 20 s`);
    await pause(50);
  }
}

/**
 * Moves hash slot `slot` from master `from` to master `to` as a resharding does (CLUSTER SETSLOT IMPORTING and
 * MIGRATING, MIGRATE of every key in it, then SETSLOT NODE on every master). A client learns it from a MOVED
 * or its next read of the slot map.
 */
/**
 * A resharding half-way: `slot` set migrating from `src` and importing into `dst` (CLUSTER SETSLOT), and `keys`
 * moved (MIGRATE); the slot's other keys stay on `src`, which answers ASK for those moved.
 */
export async function migrateHalfWay(src: Redis, dst: { client: Redis; port: number }, slot: number, keys: string[]): Promise<void> {
  const [fromId, toId] = await Promise.all([src.cluster('MYID'), dst.client.cluster('MYID')]) as string[];
  await dst.client.cluster('SETSLOT', slot, 'IMPORTING', fromId);
  await src.cluster('SETSLOT', slot, 'MIGRATING', toId);
  await src.call('MIGRATE', '127.0.0.1', String(dst.port), '', '0', '5000', 'KEYS', ...keys);
}

export async function moveSlot(c: TestCluster, slot: number, from: number, to: number): Promise<void> {
  const [src, dst] = [c.clients[from], c.clients[to]];
  const [fromId, toId] = await Promise.all([src.cluster('MYID'), dst.cluster('MYID')]) as string[];
  await dst.cluster('SETSLOT', slot, 'IMPORTING', fromId);
  await src.cluster('SETSLOT', slot, 'MIGRATING', toId);
  for (;;) {
    const keys = await src.cluster('GETKEYSINSLOT', slot, 100) as string[];
    if (keys.length === 0) break;
    await src.call('MIGRATE', '127.0.0.1', String(c.ports[to]), '', '0', '5000', 'KEYS', ...keys);
  }
  for (const x of c.clients) await x.cluster('SETSLOT', slot, 'NODE', toId);
}

/** A master joined to a {@link TestCluster} after it started ({@link addMaster}). */
export interface AddedMaster {
  port: number;
  /** A plain client of it. */
  client: Redis;
  /** Makes every node of the cluster forget it (CLUSTER FORGET), then kills it and removes its directory. */
  remove(): Promise<void>;
}

/**
 * Starts one more cluster-enabled redis-server and joins it to `c` (CLUSTER MEET) as a master that serves no
 * slot yet, as an operator adds a node before resharding onto it, then waits (up to 20 s) until every node sees
 * it connected and it sees every slot served (`cluster_state:ok`). A client that read the slot map before knows
 * nothing of it until a redirection names it.
 */
export async function addMaster(c: TestCluster): Promise<AddedMaster> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-cluster-add-'));
  const port = await freeClusterPort(new Set(c.ports));
  const child = await launch(port, dir);
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => undefined);
  const remove = async (): Promise<void> => {
    const id = await client.cluster('MYID') as string;
    client.disconnect();
    child.kill('SIGKILL');
    await exited(child);
    for (const x of c.clients) await x.cluster('FORGET', id);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await client.cluster('MEET', '127.0.0.1', String(c.ports[0]));
    const id = await client.cluster('MYID') as string;
    const deadline = Date.now() + 20_000;
    for (;;) {
      const views = await Promise.all([...c.clients, client].map((x) => x.cluster('NODES') as Promise<string>));
      if (views.every((v) => v.split('\n').some((l) => l.startsWith(id) && / connected\b/.test(l)))
        && views.every((v) => v.split('\n').filter((l) => / connected\b/.test(l)).length === c.ports.length + 1)
        && (await client.cluster('INFO') as string).includes('cluster_state:ok')) break;
      if (Date.now() > deadline) throw new Error('addMaster: the new node not seen by every node within 20 s');
      await pause(50);
    }
    return { port, client, remove };
  } catch (e) {
    await remove();
    throw e;
  }
}

/**
 * A key's next check made while its slot moves: `first` (made already) is held on master `from`'s connection
 * (`held` settles once it is), the slot moves to master `to` (moveSlot), and once the limiter has read the slot
 * map again (it does every second: 3 s allowed) `second()` is made and given 1 s to be decided, as it would be
 * had it gone out at once, before `proxy` lets the first go. Gives both outcomes, in the order made.
 */
export async function checksAcrossMove<T>(c: TestCluster, proxy: { release(): void }, held: Promise<void>, first: Promise<T>, slot: number,
  from: number, to: number, second: () => Promise<T>): Promise<[T, T]> {
  await held;
  let next: Promise<T> | undefined;
  try {
    await moveSlot(c, slot, from, to);
    await pause(3000);
    next = second();
    await Promise.race([next, pause(1000)]);
  } finally {
    proxy.release();
  }
  return [await first, await next];
}
