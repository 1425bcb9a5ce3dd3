// Concurrency limits: at most 2 exports in flight per tenant, each lease held 30 s unless released sooner.
import assert from 'node:assert/strict';
import express from 'express';
import { createLimiter } from 'sluice';
import { sluiceExpressConcurrency } from 'sluice/middleware/express';

let now = 1_700_000_000_000;
const limiter = await createLimiter({
  policies: { exports: { algorithm: 'concurrency', limit: 2, leaseTtl: '30s' } },
  clock: () => now,
});
const a = await limiter.acquire({ policy: 'exports', key: 'acme' });
assert.deepEqual({ ...a, leaseId: typeof a.leaseId },
  { allowed: true, leaseId: 'string', limit: 2, remaining: 1, retryAfterMs: 0, leaseTtlMs: 30_000, policy: 'exports' });
now += 10_000;
await limiter.acquire({ policy: 'exports', key: 'acme' });
const full = await limiter.acquire({ policy: 'exports', key: 'acme' });
assert.deepEqual([full.allowed, full.leaseId, full.retryAfterMs], [false, null, 20_000]); // a expires 30 s after it was taken
await limiter.release({ policy: 'exports', key: 'acme', leaseId: a.leaseId });          // done early: its place is free now
await assert.rejects(limiter.release({ policy: 'exports', key: 'acme', leaseId: a.leaseId }), { code: 'UNKNOWN_LEASE', field: 'leaseId' });
now += 30_000; // the second holder never released (it crashed): its lease has expired
assert.equal((await limiter.acquire({ policy: 'exports', key: 'acme' })).remaining, 1);

// The middleware holds a lease while the request runs and releases it when the response finishes (or the
// connection closes); a request over the limit gets 429 with Retry-After.
const app = express();
app.use('/export', sluiceExpressConcurrency({ limiter, policy: 'exports', key: (req) => req.get('x-tenant') }));
app.get('/export', (req, res) => res.send('done'));
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const res = await fetch(`http://127.0.0.1:${server.address().port}/export`, { headers: { 'x-tenant': 'acme' } });
assert.equal(res.status, 200); // acme holds 1 of 2 (the lease above); this request took and gave back the other
server.close();
await limiter.close();
