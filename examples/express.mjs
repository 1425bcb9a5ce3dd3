// Express in front of an embedded limiter: two requests a minute per API key. A request without the key
// header (or with it empty) is limited by its address instead of being let through (a key of undefined would
// skip the check; one the limiter refuses, such as over 1 KiB, is answered 400).
import express from 'express';
import { createLimiter } from 'sluice';
import { sluiceExpress } from 'sluice/middleware/express';

const limiter = await createLimiter({ policies: { api: { algorithm: 'token_bucket', limit: 2, period: '1m' } } });
const app = express();
app.use(sluiceExpress({ limiter, policy: 'api', key: (req) => req.get('x-api-key') || `ip:${req.ip}` }));
app.get('/', (req, res) => res.send('hello'));

const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const url = `http://127.0.0.1:${server.address().port}/`;
for (const headers of [{ 'x-api-key': 'k1' }, { 'x-api-key': 'k1' }, { 'x-api-key': 'k1' }, {}, {}, {}]) {
  const res = await fetch(url, { headers });
  console.log(headers['x-api-key'] ?? '(no key)', res.status, res.headers.get('ratelimit'));
}
server.close();
await limiter.close();
