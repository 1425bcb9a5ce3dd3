/**
 * Mass fuzzing of the live HTTP front: 10,400 requests over 4 keep-alive connections (raw sockets, so any
 * byte can be sent), well-framed HTTP/1.1 with hostile content: bad JSON, wrong types, huge numbers, NaN,
 * negative and fractional costs, control characters, invalid UTF-8 (raw and percent-encoded, in queries,
 * bodies and headers), 1 MiB keys, deep nesting, oversize bodies and batches, unknown fields and routes.
 *
 * Properties:
 * - every request gets an answer (a closed connection only after a 413, which closes by design);
 * - every hostile request gets the 4xx its class calls for, as problem+json with the matching status;
 *   requests that may happen to be valid get a 200 (or 429 from /v1/auth) or a 4xx; never a 5xx;
 * - the valid checks interleaved with them (about 40%: GET, POST, POST batches and /v1/auth, on every
 *   algorithm, a multi-limit policy and a guarded one) get EXACTLY the decisions of a second limiter fed the
 *   same valid checks in the same order on the same clock, which moves between rounds;
 * - the server process is still healthy at the end.
 *
 * Each connection owns its keys, so the server's order and the reference's order agree per key. Hostile
 * requests that happen to be valid only touch keys of their own (prefix `j`), and the guard is too large to
 * ever bind, so they cannot change a compared decision.
 *
 * FUZZ_SEED=n replays a run (the seed is printed on failure); FUZZ_SCALE multiplies the request count;
 * FUZZ_DEBUG=1 follows every request with a /healthz on the same connection, to find one that desynchronises it.
 * Framing-level garbage (bytes uWS cannot parse as HTTP) is the bare-TCP test in http.test.ts.
 */
import net from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type CheckRequest, type Decision, type Limiter, type PolicySpec } from '../../src/index.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { prng } from '../helpers/prng.js';

// authCost: query: the valid /v1/auth requests carry the check's cost in the auth URL, as /v1/check does.
const POLICIES: Record<string, PolicySpec> = {
  tb: { algorithm: 'token_bucket', limit: 5, period: 1000, authCost: 'query' },
  gcra: { algorithm: 'gcra', limit: 10, period: 1000, burst: 3, authCost: 'query' },
  fw: { algorithm: 'fixed_window', limit: 4, period: 1000, authCost: 'query' },
  sw: { algorithm: 'sliding_window', limit: 3, period: 1000, authCost: 'query' },
  multi: {
    limits: [
      { algorithm: 'token_bucket', limit: 2, period: 500, name: 'multi-fast' },
      { algorithm: 'sliding_window', limit: 6, period: 3000, name: 'multi-slow' },
    ],
    authCost: 'query',
  },
  desc: { algorithm: 'token_bucket', limit: 4, period: 1000, descriptors: ['tenant', 'action'], guard: 'huge', authCost: 'query' },
  hdr: { algorithm: 'fixed_window', limit: 3, period: 1000, descriptors: [{ name: 'tenant', header: 'x-tenant-id' }] },
  huge: { algorithm: 'token_bucket', limit: 1e12, period: 1000 },
};
const PLAIN = ['tb', 'gcra', 'fw', 'sw', 'multi'];
const LANES = 4;
const SCALE = Math.max(1, Number(process.env.FUZZ_SCALE ?? 1) || 1);
const PER_LANE = Math.round(2600 * SCALE);
const ROUNDS = 20;
const MAX_BODY = 2 * 1024 * 1024;
const MAX_ITEMS = 16;
const SEED = process.env.FUZZ_SEED === undefined ? (Math.random() * 2 ** 31) | 0 : Number(process.env.FUZZ_SEED);
const MiB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------------------
// A raw keep-alive HTTP/1.1 connection: one request at a time, any bytes.
// ---------------------------------------------------------------------------------------------------------

interface Reply {
  status: number;
  headers: Map<string, string>;
  body: string;
  /** The server closed the connection after (or instead of) this reply. */
  closed: boolean;
}

class Conn {
  private socket: net.Socket | null = null;
  private buf: Buffer = Buffer.alloc(0);
  private waiting: ((r: Reply | null) => void) | null = null;

  constructor(private readonly port: number) {}

  private connect(): net.Socket {
    const s = net.connect(this.port, '127.0.0.1');
    s.setNoDelay(true);
    // events of a socket this connection has already given up are ignored
    s.on('data', (d: Buffer) => {
      if (this.socket !== s) return;
      this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
      this.tryParse(false);
    });
    s.on('error', () => undefined);
    s.on('close', () => {
      if (this.socket !== s) return;
      this.socket = null;
      this.tryParse(true);
    });
    return s;
  }

  private tryParse(closed: boolean): void {
    if (this.waiting === null) return;
    const end = this.buf.indexOf('\r\n\r\n');
    if (end >= 0) {
      const head = this.buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0])?.[1] ?? 0);
      const headers = new Map<string, string>();
      for (const line of head.slice(1)) {
        const i = line.indexOf(':');
        headers.set(line.slice(0, i).toLowerCase(), line.slice(i + 1).trim());
      }
      const length = Number(headers.get('content-length') ?? 0);
      if (this.buf.length >= end + 4 + length) {
        const body = this.buf.subarray(end + 4, end + 4 + length).toString('utf8');
        this.buf = this.buf.subarray(end + 4 + length);
        // a 413 may come before the body is all sent, and the server then closes the connection: start afresh
        if (status === 413) closed = true;
        if (closed) {
          this.socket?.destroy();
          this.socket = null;
        }
        const w = this.waiting;
        this.waiting = null;
        w({ status, headers, body, closed });
        return;
      }
    }
    if (closed) {
      const w = this.waiting;
      this.waiting = null;
      this.buf = Buffer.alloc(0);
      w(null);
    }
  }

  /** Sends one request; resolves with its reply, or null if the connection closed without one. */
  request(bytes: Buffer): Promise<Reply | null> {
    this.socket ??= this.connect();
    this.buf = Buffer.alloc(0);
    const reply = new Promise<Reply | null>((resolve) => (this.waiting = resolve));
    this.socket.write(bytes);
    return Promise.race([reply, new Promise<Reply | null>((_, reject) => {
      const t = setTimeout(() => reject(new Error('no answer within 5 s')), 5000);
      void reply.then(() => clearTimeout(t));
    })]);
  }

  close(): void {
    this.socket?.destroy();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------------------

type Bytes = string | Buffer | number[];
const bytes = (...parts: Bytes[]): Buffer => Buffer.concat(parts.map((p) =>
  typeof p === 'string' ? Buffer.from(p, 'utf8') : Buffer.isBuffer(p) ? p : Buffer.from(p)));

function get(target: Bytes, headers: Record<string, Bytes> = {}, method = 'GET'): Buffer {
  return bytes(`${method} `, target, ' HTTP/1.1\r\nHost: fuzz\r\n',
    ...Object.entries(headers).flatMap(([k, v]) => [`${k}: `, v, '\r\n']), '\r\n');
}

function post(target: string, body: Bytes, contentType: string | null = 'application/json'): Buffer {
  const b = bytes(body);
  return Buffer.concat([
    bytes(`POST ${target} HTTP/1.1\r\nHost: fuzz\r\n`, contentType === null ? '' : `Content-Type: ${contentType}\r\n`, `Content-Length: ${b.length}\r\n\r\n`),
    b,
  ]);
}

const enc = (s: string): string => encodeURIComponent(s);
const query = (o: Record<string, string | number>): string => Object.entries(o).map(([k, v]) => `${enc(k)}=${enc(String(v))}`).join('&');

interface Gen {
  rnd: () => number;
  int(n: number): number;
  pick<T>(xs: readonly T[]): T;
  chance(p: number): boolean;
  /** A fast-check value, drawn reproducibly from this generator. */
  sample<T>(arb: fc.Arbitrary<T>): T;
}

function gen(seed: number): Gen {
  const rnd = prng(seed);
  const g: Gen = {
    rnd,
    int: (n) => Math.floor(rnd() * n),
    pick: (xs) => xs[Math.floor(rnd() * xs.length)],
    chance: (p) => rnd() < p,
    sample: (arb) => fc.sample(arb, { seed: g.int(2 ** 31), numRuns: 1 })[0],
  };
  return g;
}

/** A valid check on this lane's keys, and how it travels. */
interface Valid {
  kind: 'valid';
  via: 'get' | 'post' | 'batch' | 'auth';
  checks: CheckRequest[];
  bytes: Buffer;
}

/** A hostile request and the statuses its class allows. */
interface Hostile {
  kind: 'hostile';
  what: string;
  expect: number[];
  bytes: Buffer;
}

const MAY_PASS = [200, 400];

function validCheck(g: Gen, lane: number): CheckRequest {
  const r = g.rnd();
  const cost = r < 0.6 ? 1 : r < 0.7 ? 0 : r < 0.95 ? 2 + g.int(5) : 7 + g.int(3);
  if (g.chance(0.2)) {
    return { policy: 'desc', descriptors: { tenant: `L${lane}t${g.int(8)}`, action: g.pick(['read', 'write', 'a:b', '%']) }, cost };
  }
  return { policy: g.pick(PLAIN), key: `L${lane}k${g.int(40)}`, cost };
}

function checkQuery(c: CheckRequest): string {
  return query({ policy: c.policy, ...(c.key === undefined ? c.descriptors! : { key: c.key }), cost: c.cost });
}

function valid(g: Gen, lane: number): Valid {
  const via = g.pick(['get', 'post', 'batch', 'auth'] as const);
  if (via === 'batch') {
    const checks = Array.from({ length: 2 + g.int(4) }, () => validCheck(g, lane));
    return { kind: 'valid', via, checks, bytes: post('/v1/check', JSON.stringify({ checks })) };
  }
  const c = validCheck(g, lane);
  if (via === 'get') return { kind: 'valid', via, checks: [c], bytes: get(`/v1/check?${checkQuery(c)}`) };
  if (via === 'post') return { kind: 'valid', via, checks: [c], bytes: post('/v1/check', JSON.stringify(c)) };
  return { kind: 'valid', via, checks: [c], bytes: get(`/v1/auth?${checkQuery(c)}`, {}, g.pick(['GET', 'POST', 'HEAD', 'DELETE'])) };
}

/** Keys of hostile requests: never a lane's. */
const jkey = (g: Gen): string => `j${g.int(1000)}`;

const BAD_UTF8: number[][] = [[0xff], [0xfe], [0x80], [0xc3], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]];
const BAD_COSTS_JSON = ['-1', '1.5', '-0.5', '1e309', '-1e309', '9007199254740993', '1e21', '123456789012345678901234567890', '"1"', 'true', 'null', '{}', '[]', '[1]', '"NaN"', '0.1'];
const BAD_COSTS_QUERY = ['-1', '1.5', 'NaN', 'Infinity', '-Infinity', '1e3', '0x10', '', '+1', ' 1', '1 ', '9007199254740993', '99999999999999999999', '١', '-0', '0b1', '1_000'];
const BAD_JSON = ['{', '{"policy":"tb","key":"x",}', "{'policy':'tb'}", '{"policy":"tb","key":"x"} x', '{"cost":NaN}', '{"cost":Infinity}', '// c\n{}', '{"policy":"tb" "key":"x"}', '[', '"', '{"a":1,"a":', 'nul', 'tru', '{"policy":"tb","key":"\\x41"}', '{"policy":"tb","key":"\\u12"}', '\u0000', '{"policy":"tb","key":"a\u0001b"'];
const CONTROL = Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)).concat(['\u007f', '\u0085', '\u2028', '\u2029', '\ufeff']);

function hostile(g: Gen): Hostile {
  const h = (what: string, expect: number[], b: Buffer): Hostile => ({ kind: 'hostile', what, expect, bytes: b });
  const policy = (): string => g.pick([...PLAIN, 'desc', 'hdr', 'nope', '', 'TB', ' tb', 'tb\u0000', '__proto__', 'constructor']);
  switch (g.int(20)) {
    case 0: return h('bad JSON', [400], post('/v1/check', g.pick(BAD_JSON)));
    case 1: { // a valid-looking body cut short or with random bytes spliced in
      const text = JSON.stringify({ policy: g.pick(PLAIN), key: jkey(g), cost: 1 });
      const cut = 1 + g.int(text.length - 2);
      return h('truncated JSON', [400], post('/v1/check', text.slice(0, cut)));
    }
    case 2: { // wrong types for each field
      const field = g.pick(['policy', 'key', 'cost', 'descriptors']);
      const value = g.pick<unknown>([field === 'cost' ? 2 ** 53 : 1, -1, 1.5, true, false, null, [], ['tb'], {}, { a: 1 }, '', 'x'.repeat(1025)]);
      const body: Record<string, unknown> = { policy: g.pick(PLAIN), key: jkey(g), cost: 1, [field]: value };
      if (field === 'descriptors') body.policy = 'desc';
      if (field === 'descriptors') delete body.key;
      // a cost of "1" is refused (not a number); a policy that names no policy, a key that is no key, likewise
      return h(`wrong type: ${field} = ${JSON.stringify(value)}`, [400], post('/v1/check', JSON.stringify(body)));
    }
    case 3: return h('bad cost (JSON)', [400], post('/v1/check', `{"policy":"${g.pick(PLAIN)}","key":"${jkey(g)}","cost":${g.pick(BAD_COSTS_JSON)}}`));
    case 4: return h('bad cost (query)', [400], get(`/v1/check?policy=${g.pick(PLAIN)}&key=${jkey(g)}&cost=${enc(g.pick(BAD_COSTS_QUERY))}`));
    case 5: { // control characters: in a key they are just bytes (200); in a policy name they name no policy (400)
      const c = g.pick(CONTROL);
      if (g.chance(0.5)) return h('control char in key (query)', MAY_PASS, get(`/v1/check?policy=${g.pick(PLAIN)}&key=${enc(`j${c}${g.int(100)}`)}`));
      if (g.chance(0.5)) return h('control char in key (JSON)', MAY_PASS, post('/v1/check', JSON.stringify({ policy: g.pick(PLAIN), key: `j${c}${g.int(100)}` })));
      return h('control char in policy', [400], post('/v1/check', JSON.stringify({ policy: `tb${c}`, key: jkey(g) })));
    }
    case 6: { // invalid UTF-8: percent-encoded, raw in the query, raw in a JSON string
      const bad = g.pick(BAD_UTF8);
      const where = g.int(3);
      if (where === 0) return h('bad UTF-8 percent-encoded', [400], get(`/v1/check?policy=tb&key=j${bad.map((b) => `%${b.toString(16).padStart(2, '0')}`).join('')}`));
      if (where === 1) return h(`bad UTF-8 raw in query ${bad}`, [400], get(bytes('/v1/check?policy=tb&key=j', bad)));
      return h(`bad UTF-8 raw in JSON ${bad}`, [400], post('/v1/check', bytes('{"policy":"tb","key":"j', bad, '"}')));
    }
    case 7: { // lone surrogates as JSON escapes: not well-formed
      const s = g.pick(['\\ud800', '\\udfff', '\\ud83e', 'a\\udc00b']);
      return h('lone surrogate', [400], post('/v1/check', `{"policy":"tb","key":"${s}"}`));
    }
    case 8: { // oversize keys: 1,025 bytes, multi-byte past 1 KiB, and (rarely: 1 MiB each) a 1 MiB key
      const k = g.pick([() => 'x'.repeat(1025), () => '€'.repeat(342), () => '🦀'.repeat(257), () => (g.chance(0.05) ? 'k'.repeat(MiB) : 'y'.repeat(2048))])();
      return g.chance(0.5) || k.length > 8192
        ? h(`key of ${Buffer.byteLength(k)} bytes (JSON)`, [400], post('/v1/check', JSON.stringify({ policy: 'tb', key: k })))
        : h(`key of ${Buffer.byteLength(k)} bytes (query)`, [400], get(`/v1/check?policy=tb&key=${enc(k)}`));
    }
    case 9: { // deep nesting, as the body, as a field, as a batch item
      const depth = g.pick([64, 1000, 10_000, 100_000]);
      const deep = g.chance(0.5) ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
      const body = g.pick([deep, `{"policy":"tb","key":"j","cost":${deep}}`, `{"checks":[${deep}]}`, `{"policy":"desc","descriptors":${deep}}`]);
      return h(`nesting ${depth}`, body.startsWith('{"checks"') ? [200, 400] : [400], post('/v1/check', body));
    }
    case 10: { // batches: too many items (413), empty, not an array, extra fields, items of every kind
      const r = g.int(4);
      if (r === 0) return h('batch over the item limit', [413], post('/v1/check', JSON.stringify({ checks: Array.from({ length: MAX_ITEMS + 1 + g.int(20) }, () => ({ policy: 'tb', key: jkey(g) })) })));
      if (r === 1) return h('empty or non-array batch', [400], post('/v1/check', JSON.stringify({ checks: g.pick<unknown>([[], {}, 'x', 1, null]) })));
      if (r === 2) return h('batch with a stray field', [400], post('/v1/check', JSON.stringify({ checks: [{ policy: 'tb', key: jkey(g) }], other: 1 })));
      const items = Array.from({ length: 1 + g.int(MAX_ITEMS) }, () => g.sample(fc.oneof(
        fc.jsonValue({ maxDepth: 2 }),
        fc.record({ policy: fc.constantFrom(...PLAIN, 'nope'), key: fc.constant(jkey(g)), cost: fc.oneof(fc.integer({ min: -3, max: 9 }), fc.double()) }, { requiredKeys: [] }),
      )));
      return h('batch of random items', [200], post('/v1/check', JSON.stringify({ checks: items })));
    }
    case 11: return h('random JSON', MAY_PASS, post('/v1/check', JSON.stringify(g.sample(fc.jsonValue({ maxDepth: 4 }))) ?? 'null'));
    case 12: { // random bytes as a body, with a JSON content type
      const b = g.sample(fc.uint8Array({ maxLength: 300 }));
      return h('random bytes body', MAY_PASS, post('/v1/check', Buffer.from(b)));
    }
    case 13: return h('no or wrong content type', [415], post('/v1/check', JSON.stringify({ policy: 'tb', key: jkey(g) }), g.pick([null, 'text/plain', 'application/jsonx', 'multipart/form-data', 'json'])));
    case 14: return h('method or route', [404, 405], g.chance(0.5)
      ? get(`/v1/check?policy=tb&key=${jkey(g)}`, {}, g.pick(['PUT', 'DELETE', 'PATCH', 'OPTIONS']))
      : get(g.pick(['/', '/v1', '/v1/checks', '/v2/check', '/v1/check/x', '/%ff', '/v1/%63heck']), {}, g.pick(['GET', 'POST'])));
    case 15: { // unknown or missing policy, both key and descriptors, unknown fields, prototype names
      const bodies: unknown[] = [{ key: jkey(g) }, { policy: policy(), key: jkey(g), descriptors: { tenant: 'a', action: 'b' } },
        { policy: 'tb', key: jkey(g), extra: 1 }, { policy: 'desc', descriptors: { tenant: 'a' } }, { policy: 'desc', descriptors: { tenant: 'a', action: 'b', zone: 'c' } },
        JSON.parse('{"policy":"tb","key":"j","__proto__":{"cost":5}}'), { policy: 'nope', key: 'x' }, { policy: 'desc', descriptors: { tenant: 1, action: 'b' } }];
      return h('bad fields', [400], post('/v1/check', JSON.stringify(g.pick(bodies))));
    }
    case 16: { // query parameters: repeated, missing policy, unknown names, bad escapes
      const q = g.pick([`policy=tb&policy=tb&key=${jkey(g)}`, `key=${jkey(g)}`, `policy=tb`, `policy=tb&key=${jkey(g)}&zone=x`, `policy=tb&key=%`, `policy=tb&key=%zz`, `policy=%ff`, `policy=desc&tenant=a`, `policy=tb&key=${jkey(g)}&cost=1&cost=2`]);
      return h('bad query', [400], get(`/v1/check?${q}`));
    }
    case 17: { // /v1/auth: header descriptors with hostile values (bad UTF-8, non-ASCII, empty, too long)
      // uWS drops bytes >= 0x80 at either end of a header value and passes the rest as Latin-1, so a value
      // with non-ASCII bytes may come through as a shorter key (README: header values should be ASCII)
      const v: Bytes = g.pick<Bytes>([[0xff], [0xc3, 0x28], [0x6a, 0xe2, 0x82, 0xac, 0x6b], Buffer.from('é'), '', 'a'.repeat(1025), `j${g.int(50)}`]);
      const statuses = v === '' || (typeof v === 'string' && v.length > 1024) ? [400] : [200, 400, 429];
      return h('auth header value', statuses, get(`/v1/auth?policy=hdr`, { 'X-Tenant-Id': v }, g.pick(['GET', 'POST', 'PUT'])));
    }
    case 18: { // an oversize body (rare: 2 MiB each): 413, and the server closes the connection
      if (!g.chance(0.05)) return h('oversize batch', [413], post('/v1/check', JSON.stringify({ checks: Array.from({ length: 40 }, () => ({ policy: 'tb', key: jkey(g) })) })));
      return h('body over maxBodyBytes', [413], post('/v1/check', `{"policy":"tb","key":"${'z'.repeat(MAX_BODY)}"}`));
    }
    default: { // percent-encoded anything as key and descriptor values (valid UTF-8: may pass)
      const s = g.sample(fc.string({ unit: 'grapheme', maxLength: 20 }));
      return h('any string as a key', MAY_PASS, get(`/v1/check?policy=${g.pick(PLAIN)}&key=${enc(`j${s}`)}`));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Checking answers
// ---------------------------------------------------------------------------------------------------------

/** The decision a reply carries, for the comparison with the reference. */
function decisionOf(r: Reply): Omit<Decision, 'reason'> & { reason?: string } {
  return JSON.parse(r.body) as Decision;
}

/** What /v1/auth tells of a decision: the status and the RateLimit fields. */
function authView(d: Decision): { status: number; ratelimit: string; retryAfter: string | null } {
  const t = Math.ceil(d.resetAfterMs / 1000);
  return {
    status: d.allowed ? 200 : 429,
    ratelimit: `"${d.policy}";r=${d.remaining};t=${t}`,
    retryAfter: !d.allowed && d.retryAfterMs !== null ? String(Math.max(1, Math.ceil(d.retryAfterMs / 1000))) : null,
  };
}

let s: TestServer;
let ref: Limiter;
beforeAll(async () => {
  s = await startTestServer({ policies: POLICIES, maxBodyBytes: MAX_BODY, maxBatchItems: MAX_ITEMS, maxKeys: 65_536 });
  ref = await createLimiter({ policies: POLICIES, clock: s.clock.now, maxKeys: 65_536 });
});
afterAll(async () => {
  await s?.close();
  await ref?.close();
});

describe(`mass fuzzing of the HTTP front (FUZZ_SEED=${SEED})`, () => {
  it(`${LANES * PER_LANE} requests: hostile ones get their 4xx, valid ones exact decisions, nothing breaks`, async () => {
    const conns = Array.from({ length: LANES }, () => new Conn(s.port));
    const gens = Array.from({ length: LANES }, (_, i) => gen(SEED * 31 + i));
    const stats = { valid: 0, checks: 0, hostile: 0, byStatus: new Map<number, number>(), closes: 0 };
    /** Failures by kind of request: the count and the first three messages. */
    const failures = new Map<string, { count: number; first: string[] }>();
    const fail = (kind: string, msg: string): void => {
      const f = failures.get(kind) ?? { count: 0, first: [] };
      f.count++;
      if (f.first.length < 3) f.first.push(`[FUZZ_SEED=${SEED}] ${msg}`);
      failures.set(kind, f);
    };

    /** One lane: its requests in order; the reference decides each valid check right after the server. */
    async function lane(i: number, count: number): Promise<void> {
      const g = gens[i];
      for (let n = 0; n < count; n++) {
        const req = g.chance(0.4) ? valid(g, i) : hostile(g);
        const r = await conns[i].request(req.bytes);
        if (process.env.FUZZ_DEBUG) {
          // probe: the same connection must answer /healthz next, or the previous request desynchronised it
          const probe = await conns[i].request(get('/healthz'));
          if (probe === null || probe.body !== '{"status":"ok"}') {
            console.log('DESYNC after', req.kind === 'valid' ? req.via : req.what, JSON.stringify(req.bytes.subarray(0, 300).toString('latin1')), 'reply', r?.status, r?.body.slice(0, 100), 'probe', probe?.status, probe?.body.slice(0, 100));
            conns[i].close();
          }
        }
        const kind = req.kind === 'valid' ? `valid ${req.via}` : req.what.replace(/[:\d].*$/, '');
        const label = req.kind === 'valid' ? `valid ${req.via} ${JSON.stringify(req.checks)}` : `${req.what}: ${req.bytes.subarray(0, 160).toString('latin1')}`;
        if (r === null) {
          stats.closes++;
          fail(kind, `${label}: connection closed without an answer`);
          continue;
        }
        stats.byStatus.set(r.status, (stats.byStatus.get(r.status) ?? 0) + 1);
        if (r.status >= 500 || r.status < 200) fail(kind, `${label}: status ${r.status} ${r.body.slice(0, 200)}`);
        if (r.closed || r.headers.get('connection') === 'close') stats.closes++;
        if (r.status >= 400 && r.status !== 429 && !req.bytes.subarray(0, 5).equals(Buffer.from('HEAD '))) {
          let p: { status?: unknown } | undefined;
          try {
            p = JSON.parse(r.body) as { status?: unknown };
          } catch {
            p = undefined;
          }
          if (r.headers.get('content-type') !== 'application/problem+json' || p?.status !== r.status) {
            fail(kind, `${label}: ${r.status} without a matching problem+json body: ${r.body.slice(0, 200)}`);
          }
        }
        if (req.kind === 'hostile') {
          stats.hostile++;
          if (!req.expect.includes(r.status)) fail(kind, `${req.what}: expected ${req.expect.join('|')}, got ${r.status} ${r.body.slice(0, 200)} for ${label}`);
          continue;
        }
        stats.valid++;
        stats.checks += req.checks.length;
        const expected: Decision[] = [];
        for (const c of req.checks) expected.push(await ref.check(c));
        if (req.via === 'auth') {
          const want = authView(expected[0]);
          const got = { status: r.status, ratelimit: r.headers.get('ratelimit') ?? '', retryAfter: r.headers.get('retry-after') ?? null };
          if (JSON.stringify(got) !== JSON.stringify(want)) fail(kind, `${label}: auth ${JSON.stringify(got)} but the reference says ${JSON.stringify(want)}`);
          continue;
        }
        if (r.status !== 200) {
          fail(kind, `${label}: status ${r.status} ${r.body.slice(0, 200)}`);
          continue;
        }
        const got = req.via === 'batch' ? (JSON.parse(r.body) as { results: Decision[] }).results : [decisionOf(r)];
        if (JSON.stringify(got) !== JSON.stringify(expected)) {
          fail(kind, `${label}: server ${JSON.stringify(got)} but the reference decided ${JSON.stringify(expected)}`);
        }
      }
    }

    const started = Date.now();
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const share = Math.floor(PER_LANE / ROUNDS) + (round < PER_LANE % ROUNDS ? 1 : 0);
        await Promise.all(conns.map((_, i) => lane(i, share)));
        // between rounds, with every lane idle: the clock moves (sometimes not at all, sometimes past every period)
        s.clock.advance(gens[0].pick([0, 1, 7, 100, 333, 499, 500, 999, 1000, 1001, 2500, 3001]));
      }
    } finally {
      for (const c of conns) c.close();
    }
    console.log(`mass fuzz (FUZZ_SEED=${SEED}): ${stats.valid + stats.hostile} requests in ${Date.now() - started} ms: ` +
      `${stats.valid} valid (${stats.checks} checks compared), ${stats.hostile} hostile; statuses ` +
      `${JSON.stringify(Object.fromEntries([...stats.byStatus].sort((a, b) => a[0] - b[0])))}; connections closed: ${stats.closes}`);

    expect(Object.fromEntries(failures)).toStrictEqual({});
    expect(stats.valid + stats.hostile).toBe(LANES * PER_LANE);
    expect(stats.valid + stats.hostile).toBeGreaterThanOrEqual(10_000);
    expect(stats.checks).toBeGreaterThan(3000);
    // the process is still serving, and still exact
    const health = await new Conn(s.port).request(get('/healthz'));
    expect(health?.status).toBe(200);
    const fresh = await new Conn(s.port).request(get('/v1/check?policy=tb&key=after-the-fuzz&cost=5'));
    expect(JSON.parse(fresh!.body)).toMatchObject({ allowed: true, remaining: 0 });
  }, 120_000);
});
