/**
 * The synchronous channel from the front to a shard (src/shard/channel.ts) through a worker's death: a call
 * whose worker is killed fails with a 503 error, never hangs past the channel's bound, and the replacement
 * worker (started by piscina, with an empty table) serves the same channel: checks are decided again, exactly.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { engineOf } from '../../src/engine/handle.js';
import type { ShardPool } from '../../src/shard/pool.js';
import { keysByShard } from './support.js';

type CheckNow = (req: { policy: string; key: string; cost: number }) => Decision | undefined;
const nowOf = (l: Limiter): CheckNow => engineOf(l)!.checkNow!;
const poolOf = (l: Limiter): ShardPool => engineOf(l)!.pool!;

const open: Limiter[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close()));
});

describe('synchronous shard channel, worker killed', () => {
  it('the replacement worker serves the channel: decisions resume, exact, from an empty table', async () => {
    const policies = { p: { algorithm: 'fixed_window' as const, limit: 3, period: 3_600_000 } };
    const l = await createLimiter({ policies, shards: 2, clock: () => 1_000, maxKeys: 1024 });
    open.push(l);
    const now = nowOf(l);
    const [k0] = keysByShard(policies, 'p', 2, 1)[0];
    expect(now({ policy: 'p', key: k0, cost: 2 })).toMatchObject({ allowed: true, remaining: 1 });
    await poolOf(l).threads(0)[0].terminate();
    // until the replacement is up, a call is not taken (OVERLOADED after the bound) or fails (SHARD_FAILED)
    let d: Decision | undefined;
    for (let i = 0; i < 50 && d === undefined; i++) {
      try {
        d = now({ policy: 'p', key: k0, cost: 1 });
      } catch (e) {
        expect((e as { status?: number }).status).toBe(503);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    // the replacement's table is empty: the key starts fresh
    expect(d).toMatchObject({ allowed: true, remaining: 2 });
    expect(now({ policy: 'p', key: k0, cost: 2 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(now({ policy: 'p', key: k0, cost: 1 })).toMatchObject({ allowed: false, remaining: 0 });
  });
});
