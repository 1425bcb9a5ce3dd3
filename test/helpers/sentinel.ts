/**
 * A Redis Sentinel set of the test's own on loopback: a master, one replica and three sentinels (quorum 2), each
 * redis-server on a free port, with small timings so a failover takes about a second or two
 * (down-after-milliseconds 500, failover-timeout 2000). For failover tests: {@link SentinelSet.killMaster}.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { exited, freePort, launchRedis, spawnRedisServer } from './redis.js';

export interface SentinelSet {
  /** The master's name, as the sentinels monitor it. */
  name: string;
  /** `127.0.0.1:<port>` of each sentinel. */
  sentinels: string[];
  /** The ports of the master and the replica at start. */
  masterPort: number;
  replicaPort: number;
  /** A client on the node at `port` (closed by stop()). */
  client(port: number): Redis;
  /** The master's port as the first sentinel reports it now. */
  currentMaster(): Promise<number>;
  /** SIGKILL the master at start; resolves once it has exited. */
  killMaster(): Promise<void>;
  /** Waits (up to `timeoutMs`) until the sentinels report the replica as master, and it says it is one. */
  promoted(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(what: string, timeoutMs: number, test: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await test()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`sentinel set: timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Starts the set and waits until the replica is in sync and every sentinel knows the replica and the other two. */
export async function startSentinelSet(name = 'sluice-test'): Promise<SentinelSet> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sluice-sentinel-'));
  const procs: ChildProcess[] = [];
  const clients: Redis[] = [];
  const client = (port: number): Redis => {
    const c = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, retryStrategy: () => 100, lazyConnect: false });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };
  const stop = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    await Promise.all(procs.map((p) => {
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
      return exited(p);
    }));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const masterPort = await freePort();
    const replicaPort = await freePort();
    // --dir: a replica writes the RDB of its full sync to dump.rdb in its working directory (--save '' or
    // not), and so may a master on failover: the set's temporary folder, never the project root (vitest's cwd)
    // --repl-diskless-sync-delay 0: Redis 7 waits 5 s by default before a diskless full sync, for more replicas
    // to join it; there is one
    const master = await launchRedis(masterPort, ['--dir', dir, '--repl-diskless-sync-delay', '0']);
    procs.push(master);
    procs.push(await launchRedis(replicaPort, ['--dir', dir, '--replicaof', '127.0.0.1', String(masterPort)]));
    const r = client(replicaPort);
    await until('the replica to sync', 10_000, async () => /master_link_status:up/.test(await r.info('replication')));
    const sentinelPorts: number[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const conf = path.join(dir, `sentinel-${port}.conf`);
      writeFileSync(conf, [
        `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2`,
        `sentinel down-after-milliseconds ${name} 500`,
        `sentinel failover-timeout ${name} 2000`,
        `sentinel parallel-syncs ${name} 1`,
        '',
      ].join('\n'));
      procs.push(await launchSentinel(conf));
      sentinelPorts.push(port);
    }
    const sentinels = sentinelPorts.map((p) => client(p));
    await until('the sentinels to know the replica and each other', 20_000, async () => {
      for (const s of sentinels) {
        const replicas = (await s.call('SENTINEL', 'REPLICAS', name)) as unknown[];
        const others = (await s.call('SENTINEL', 'SENTINELS', name)) as unknown[];
        if (replicas.length !== 1 || others.length !== 2) return false;
      }
      return true;
    });
    const currentMaster = async (): Promise<number> => {
      const [, port] = (await sentinels[0].call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as [string, string];
      return Number(port);
    };
    return {
      name,
      sentinels: sentinelPorts.map((p) => `127.0.0.1:${p}`),
      masterPort,
      replicaPort,
      client,
      currentMaster,
      async killMaster() {
        master.kill('SIGKILL');
        await exited(master);
      },
      async promoted(timeoutMs = 15_000) {
        await until('the replica to be promoted', timeoutMs, async () =>
          (await currentMaster()) === replicaPort && /role:master/.test(await r.info('replication')));
      },
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** A redis-server in sentinel mode on `conf` (which it rewrites), resolved once it monitors its master. */
function launchSentinel(conf: string): Promise<ChildProcess> {
  return spawnRedisServer([conf, '--sentinel'], '+monitor master', 'redis sentinel');
}
