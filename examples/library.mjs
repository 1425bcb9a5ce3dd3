// The library: a limiter embedded in the process, decisions on a clock you choose.
import assert from 'node:assert/strict';
import { createLimiter } from 'sluice';

let now = 1_700_000_000_000; // Unix ms; Date.now by default
const limiter = await createLimiter({
  policies: {
    free: { algorithm: 'token_bucket', limit: 100, period: '1m', burst: 100 },
    api: { limits: [
      { algorithm: 'sliding_window', limit: 100, period: '1m' },
      { algorithm: 'fixed_window', limit: 5000, period: '1d' },
    ] },
  },
  shards: 2,                 // worker threads; 0 (the default) decides on the calling thread
  clock: () => now,          // Unix epoch ms, an integer; read once per batch
  maxKeys: 100_000,          // bound on keys held; the least informative are evicted past it
});
const d = await limiter.check({ policy: 'free', key: 'tenant-42', cost: 1 });
assert.deepEqual(d, { allowed: true, limit: 100, remaining: 99, resetAfterMs: 600, retryAfterMs: 0, policy: 'free' });
const all = await limiter.check({ policy: 'free', key: 'tenant-42', cost: 100 }); // 99 left: denied, spends nothing
assert.deepEqual([all.allowed, all.retryAfterMs], [false, 600]);                  // one token every 600 ms
now += 600;
assert.equal((await limiter.check({ policy: 'free', key: 'tenant-42', cost: 100 })).allowed, true);
await limiter.close();
