/**
 * lua/check.lua's legs as the tests send them: packed (ARGV[4], 6 little-endian doubles per leg) and marked as
 * the strict decider (UNIQUE_KEY, src/engine/deciders/strict.ts) and the packer (runs, src/store/leg-runs.ts)
 * mark and pack them; and a frozen redis-server with the check library loaded, to send them to.
 */
import { afterAll, beforeAll } from 'vitest';
import type { Redis } from 'ioredis';
import { UNIQUE_KEY } from '../../src/store/contract.js';
import { packRuns } from '../../src/store/leg-runs.js';
import { checkLibrary, type CheckLibrary } from '../../src/store/scripts.js';
import { startFrozenRedis, type FrozenRedis } from './redis.js';

/** The legs as lua/check.lua reads them: 6 little-endian doubles each. */
export function packed(args: ArrayLike<number>): Buffer {
  const b = Buffer.alloc(args.length * 8);
  for (let i = 0; i < args.length; i++) b.writeDoubleLE(args[i], i * 8);
  return b;
}

/** `args` with UNIQUE_KEY added to each check of one leg (group length 1) whose key no other leg names. */
export function marked(keys: readonly string[], args: readonly number[]): number[] {
  const count = new Map<string, number>();
  for (const k of keys) count.set(k, (count.get(k) ?? 0) + 1);
  return args.map((v, i) => (i % 6 === 0 && args[i + 5] === 1 && count.get(keys[i / 6]) === 1 ? v + UNIQUE_KEY : v));
}

/** {@link marked}, then packed as the packer packs runs: each run's head marked, its later legs left out. */
export function markedRuns(keys: readonly string[], args: readonly number[]): Float64Array {
  const f = Float64Array.from(marked(keys, args));
  return f.slice(0, packRuns(f, keys.length));
}

/**
 * A redis-server whose clock stands still (test/helpers/redis.ts startFrozenRedis) with the check library
 * (src/store/scripts.ts checkLibrary) loaded, started before the calling file's tests and stopped after them.
 * `client` is its connection once started.
 */
export function frozenCheckRedis(): { readonly lib: CheckLibrary; readonly client: Redis } {
  const lib = checkLibrary();
  let redis: FrozenRedis | undefined;
  beforeAll(async () => {
    redis = await startFrozenRedis();
    await redis.client.call('FUNCTION', 'LOAD', 'REPLACE', lib.text);
  });
  afterAll(async () => {
    await redis?.stop();
  });
  return {
    lib,
    get client(): Redis {
      if (redis === undefined) throw new Error('frozenCheckRedis: not started (use it inside a test)');
      return redis.client;
    },
  };
}
