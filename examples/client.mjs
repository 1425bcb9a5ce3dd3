// A remote sluice (`sluice serve`) through sluice/client: decisions, and a push when a denied key can pass.
import assert from 'node:assert/strict';
import { createClient } from 'sluice/client';

// ws:// (or wss://): onReady below needs the WebSocket; an http:// client checks but rejects onReady
const client = createClient({ url: process.env.SLUICE_URL ?? 'ws://127.0.0.1:8080' });
const check = { policy: 'free', descriptors: { tenant: 'acme', action: 'read' } };
assert.equal((await client.check({ ...check, cost: 100 })).allowed, true); // the whole burst of 100
const ready = new Promise((resolve, reject) => {
  // denied now; with a subscription (ws:// only) the server tells when the cost fits again
  client.check({ ...check, cost: 1 }, { onReady: (err, r) => (err ? reject(err) : resolve(r)) }).then((d) => {
    assert.deepEqual([d.allowed, d.subscribed], [false, true]);
    console.log(`denied: retry in ${d.retryAfterMs} ms`);
  }, reject);
});
console.log(`ready: ${(await ready).remaining} token(s)`); // about 600 ms later: one token every 600 ms
await client.close();
