// One quota across instances: two limiters (two processes, in real life) share a strict policy through Redis.
import assert from 'node:assert/strict';
import { createLimiter } from 'sluice';

const policies = { api: { algorithm: 'token_bucket', limit: 3, period: '1h', consistency: 'strict' } };
const redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: `example-${process.pid}:`, timeoutMs: 200 };
const a = await createLimiter({ policies, redis });
const b = await createLimiter({ policies, redis });
const seen = [];
for (const limiter of [a, b, a, b]) seen.push((await limiter.check({ policy: 'api', key: 'tenant-7', cost: 1 })).allowed);
assert.deepEqual(seen, [true, true, true, false]); // 3 an hour in all, not 3 per instance
await a.reset({ policy: 'api', key: 'tenant-7' });
await Promise.all([a.close(), b.close()]);
