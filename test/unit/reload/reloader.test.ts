/**
 * PolicyReloader in-process: apply() (the entry the admin API calls), its errors and counts, and the pub/sub
 * side against a redis-server of the test's own: announcements of local reloads, peers' applied, and what is
 * ignored (our own origin, the version in force, junk). The file watch and SIGHUP are tested through
 * `sluice serve` in test/integration/reload.test.ts.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, type Limiter } from '../../../src/index.js';
import { parseConfig } from '../../../src/config/load.js';
import { policySetVersion } from '../../../src/config/policy-version.js';
import { PolicyReloader, type ReloadSource } from '../../../src/reload/reloader.js';
import { AnnouncementSigner, MAX_AGE_MS, type RefusalReason } from '../../../src/reload/announce.js';
import { isSluiceError } from '../../../src/util/errors.js';
import { startRedis, type TestRedis } from '../../helpers/redis.js';
import { RedisStore } from '../../../src/store/redis.js';
import { MemoryPubSub } from '../../../src/store/memory-pubsub.js';
import { startCluster, type TestCluster } from '../../helpers/redis-cluster.js';
import { ManualClock } from '../../helpers/clock.js';
import { startHoldProxy } from '../../helpers/hold-proxy.js';

const OLD = 'policies:\n  api: { algorithm: fixed_window, limit: 5, period: 1h }\n';
const NEW = 'policies:\n  api: { algorithm: fixed_window, limit: 7, period: 1h }\n  paid: { algorithm: token_bucket, limit: 100, period: 1m }\n';
const version = (text: string): string => policySetVersion(parseConfig(text, 't').policies);

interface Harness {
  limiter: Limiter;
  reloader: PolicyReloader;
  logs: Array<Record<string, any>>;
  counts: string[];
  refused: RefusalReason[];
}

/** The announce secret the instances of these tests share. */
const SECRET = 'a shared secret of 32 bytes.....';

const open: Harness[] = [];
afterEach(async () => {
  for (const h of open.splice(0)) {
    await h.reloader.close();
    await h.limiter.close();
  }
});

async function harness(o: { redis?: string; cluster?: string[]; pubsub?: MemoryPubSub; instanceId?: string; secret?: string | null } = {}): Promise<Harness> {
  const clock = new ManualClock();
  const startup = parseConfig(OLD, 'policies.yaml');
  // the composition root's order: the store, the limiter deciding through it, the reloader announcing through it
  const store = o.redis ? RedisStore.create({ url: o.redis }) : o.cluster ? RedisStore.create({ cluster: o.cluster }) : null;
  const limiter = await createLimiter({
    policies: startup.policies, clock: clock.now, maxKeys: 1024, ...(store !== null ? { redis: {}, store } : {}),
  });
  const logs: Array<Record<string, any>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') logs.push(JSON.parse(line) as Record<string, any>);
      done();
    },
  });
  const counts: string[] = [];
  const refused: RefusalReason[] = [];
  const reloader = new PolicyReloader({
    limiter, logger: pino({ level: 'info' }, sink), signal: null, startup,
    announceSecret: o.secret === undefined ? SECRET : o.secret,
    metrics: { reloaded: (source: ReloadSource, result) => counts.push(`${source}/${result}`), announcementRefused: (r) => refused.push(r) },
    pubsub: o.pubsub ?? store,
    ...(o.instanceId ? { instanceId: o.instanceId } : {}),
  });
  await reloader.start();
  const h = { limiter, reloader, logs, counts, refused };
  open.push(h);
  return h;
}

async function until(cond: () => boolean, what: string, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('PolicyReloader.apply', () => {
  it('applies YAML text or a document, reports what changed, and keeps the document in force', async () => {
    const h = await harness();
    expect(h.reloader.document).toStrictEqual({ api: { algorithm: 'fixed_window', limit: 5, period: '1h' } });
    const r = await h.reloader.apply(NEW, 'api');
    expect(r).toStrictEqual({ version: version(NEW), added: ['paid'], removed: [], changed: ['api'] });
    expect(h.limiter.version).toBe(version(NEW));
    expect((await h.limiter.check({ policy: 'api', key: 'k', cost: 1 })).limit).toBe(7);
    expect(h.reloader.document).toStrictEqual({
      api: { algorithm: 'fixed_window', limit: 7, period: '1h' }, paid: { algorithm: 'token_bucket', limit: 100, period: '1m' },
    });
    const back = await h.reloader.apply({ policies: { api: { algorithm: 'fixed_window', limit: 5, period: '1h' } } }, 'api');
    expect(back).toStrictEqual({ version: version(OLD), added: [], removed: ['paid'], changed: ['api'] });
    expect(h.counts).toStrictEqual(['api/ok', 'api/ok']);
    expect(h.logs.filter((l) => l.msg === 'policies reloaded').map((l) => [l.source, l.file, l.version, l.previous]))
      .toStrictEqual([['api', '<api>', version(NEW), version(OLD)], ['api', '<api>', version(OLD), version(NEW)]]);
  });

  it('the rules already in force: nothing reloaded, empty lists, counted ok', async () => {
    const h = await harness();
    expect(await h.reloader.apply(OLD, 'api')).toStrictEqual({ version: version(OLD), added: [], removed: [], changed: [] });
    expect(h.counts).toStrictEqual(['api/ok']);
    expect(h.logs.map((l) => l.msg)).toStrictEqual(['policies unchanged']);
  });

  it.each([
    ['bad YAML', 'policies:\n  api: [unclosed\n', /^<api>: line 3, column 1: invalid YAML: /, undefined],
    ['a bad period', OLD.replace('1h', '10x'), /^<api>: policies\.api\.period: must be a positive integer of ms or a duration string such as "1m" \(got "10x"\)$/, 'policies.api.period'],
    ['not a document', 42, /^<api>: \(root\): must be a mapping with a top-level "policies" key \(got 42\)$/, '(root)'],
    ['no policies', { engine: {} }, /^<api>: policies: is required: a mapping of policy names to policies$/, 'policies'],
  ])('%s: throws CONFIG with the reason, logs it, counts it, keeps the old rules', async (_what, doc, message, field) => {
    const h = await harness();
    const e = await h.reloader.apply(doc, 'api').then(() => null, (x: unknown) => x);
    expect(isSluiceError(e) && [e.code, e.field]).toStrictEqual(['CONFIG', field]);
    expect((e as Error).message).toMatch(message);
    expect(h.limiter.version).toBe(version(OLD));
    expect(h.counts).toStrictEqual(['api/rejected']);
    const logged = h.logs.find((l) => l.msg === 'policy reload rejected')!;
    expect([logged.level, logged.file, logged.source, logged.err.message]).toStrictEqual([50, '<api>', 'api', (e as Error).message]);
  });

  it('after close(): CLOSED', async () => {
    const h = await harness();
    await h.reloader.close();
    const e = await h.reloader.apply(NEW, 'api').then(() => null, (x: unknown) => x);
    expect(isSluiceError(e) && e.code).toBe('CLOSED');
  });
});

describe('PolicyReloader over an in-process pub/sub (MemoryPubSub)', () => {
  it('announces a local reload to the instances of the process, and they apply it without announcing it again', async () => {
    const bus = new MemoryPubSub();
    const a = await harness({ pubsub: bus, instanceId: 'a' });
    const b = await harness({ pubsub: bus, instanceId: 'b' });
    const c = await harness({ pubsub: bus, instanceId: 'c' });
    await a.reloader.apply(NEW, 'api');
    await until(() => b.limiter.version === version(NEW) && c.limiter.version === version(NEW), 'b and c to follow');
    expect([a.counts, b.counts, c.counts]).toStrictEqual([['api/ok'], ['peer/ok'], ['peer/ok']]);
    expect(a.logs.filter((l) => l.msg === 'policy reload announced').map((l) => [l.version, l.receivers])).toStrictEqual([[version(NEW), 3]]);
    expect([b, c].some((h) => h.logs.some((l) => l.msg === 'policy reload announced'))).toBe(false);
    // a closed reloader hears nothing more: c closes, a reloads back, only b follows
    await c.reloader.close();
    await a.reloader.apply(OLD, 'api');
    await until(() => b.limiter.version === version(OLD), 'b to follow back');
    expect(c.limiter.version).toBe(version(NEW));
    expect(a.logs.filter((l) => l.msg === 'policy reload announced').map((l) => l.receivers)).toStrictEqual([3, 2]);
  });

  it('refuses a forged announcement on the bus as on Redis', async () => {
    const bus = new MemoryPubSub();
    const h = await harness({ pubsub: bus, instanceId: 'me' });
    const intruder = bus.channel('sluice:policies', () => undefined);
    await intruder.publish(new AnnouncementSigner('another secret of 32 bytes......').sign({ origin: 'x', version: 'ffffffffffff', policies: {} }));
    await until(() => h.refused.length === 1, 'the refusal');
    expect(h.refused).toStrictEqual(['bad_mac']);
    expect(h.limiter.version).toBe(version(OLD));
    await intruder.close();
  });
});

describe('PolicyReloader over Redis pub/sub', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('announces a local reload, and a peer applies it (not announcing it again)', async () => {
    const a = await harness({ redis: redis.url, instanceId: 'a' });
    const b = await harness({ redis: redis.url, instanceId: 'b' });
    await a.reloader.apply(NEW, 'api');
    await until(() => b.limiter.version === version(NEW), 'b to follow');
    expect(b.counts).toStrictEqual(['peer/ok']);
    expect(b.logs.filter((l) => l.msg === 'policies reloaded').map((l) => [l.source, l.file])).toStrictEqual([['peer', '<peer a>']]);
    expect(b.logs.some((l) => l.msg === 'policy reload announced')).toBe(false);
    expect(a.logs.filter((l) => l.msg === 'policy reload announced').map((l) => [l.version, l.receivers])).toStrictEqual([[version(NEW), 2]]);
    expect(a.counts).toStrictEqual(['api/ok']);
  });

  it('ignores its own origin and the version in force; rejects an invalid peer set and keeps its rules', async () => {
    const h = await harness({ redis: redis.url, instanceId: 'me' });
    const peer = new AnnouncementSigner(SECRET);
    const publish = (m: Record<string, unknown> & { origin: string }): Promise<number> => redis.client.publish('sluice:policies', peer.sign(m));
    const doc = { api: { algorithm: 'fixed_window', limit: 7, period: '1h' }, paid: { algorithm: 'token_bucket', limit: 100, period: '1m' } };
    await publish({ origin: 'me', version: version(NEW), policies: doc });
    await publish({ origin: 'other', version: version(OLD), policies: doc }); // claims the version in force
    await publish({ origin: 'other', version: 'ffffffffffff', policies: { api: { algorithm: 'fixed_window', limit: 7, period: '10x' } } });
    await until(() => h.counts.length === 1, 'the invalid set rejected');
    expect(h.counts).toStrictEqual(['peer/rejected']);
    expect(h.limiter.version).toBe(version(OLD));
    expect(h.logs.find((l) => l.msg === 'policy reload rejected')!.err.message)
      .toBe('<peer other>: policies.api.period: must be a positive integer of ms or a duration string such as "1m" (got "10x")');
    // The same set from another origin is applied.
    await publish({ origin: 'other', version: version(NEW), policies: doc });
    await until(() => h.limiter.version === version(NEW), 'the peer set applied');
    expect(h.counts).toStrictEqual(['peer/rejected', 'peer/ok']);
    expect(h.refused).toStrictEqual([]);
  });

  it('refuses, counts and logs unsigned, forged, replayed and malformed announcements: the rules in force stay (#20 item 4)', async () => {
    const h = await harness({ redis: redis.url, instanceId: 'me' });
    const raw = (m: unknown): Promise<number> => redis.client.publish('sluice:policies', typeof m === 'string' ? m : JSON.stringify(m));
    const doc = { api: { algorithm: 'fixed_window', limit: 2_000_000_000, period: '1s' } };
    const attack = { origin: 'x', version: 'ffffffffffff', policies: doc };
    await raw(attack); // the one PUBLISH: plain JSON, as announcements used to be
    await raw(new AnnouncementSigner('another secret of 32 bytes......').sign(attack)); // forged
    const signed = new AnnouncementSigner(SECRET).sign({ origin: 'peer', version: version(NEW), policies: doc });
    const forgedBody = JSON.stringify({ mac: (JSON.parse(signed) as { mac: string }).mac, body: JSON.stringify({ ...attack, sentAt: Date.now() }) });
    await raw(forgedBody); // a real MAC over another body
    await raw('not json');
    await raw(new AnnouncementSigner(SECRET).sign({ origin: 'old', version: version(NEW), policies: doc }, Date.now() - MAX_AGE_MS - 1000));
    await until(() => h.refused.length === 5, 'five refusals');
    expect(h.refused).toStrictEqual(['unsigned', 'bad_mac', 'bad_mac', 'malformed', 'replayed']);
    // a genuine one is applied once; the same message again is a replay
    await raw(signed);
    await until(() => h.counts.length === 1, 'the signed set applied');
    await raw(signed);
    await until(() => h.refused.length === 6, 'the replay refused');
    expect(h.refused.at(-1)).toBe('replayed');
    expect(h.counts).toStrictEqual(['peer/ok']);
    expect((await h.limiter.check({ policy: 'api', key: 'k', cost: 1 })).limit).toBe(2_000_000_000);
    // refusals are logged at most once a second, with how many there were
    const warned = h.logs.filter((l) => l.msg.startsWith('policy channel: announcement refused'));
    expect(warned.length).toBeGreaterThanOrEqual(1);
    expect(warned[0]).toMatchObject({ level: 40, reason: 'unsigned', refused: 1 });
  });

  it('without a secret: announcements are off both ways, and it says so at start', async () => {
    const quiet = await harness({ redis: redis.url, instanceId: 'quiet', secret: null });
    const peer = await harness({ redis: redis.url, instanceId: 'peer' });
    expect(quiet.logs.find((l) => l.msg.startsWith('policy announcements are off'))).toMatchObject({ level: 40, channel: 'sluice:policies' });
    expect(quiet.logs.some((l) => l.msg === 'listening for policy reloads')).toBe(false);
    await redis.client.publish('sluice:policies', JSON.stringify({ origin: 'x', version: 'ffffffffffff', policies: { api: { algorithm: 'fixed_window', limit: 9, period: '1h' } } }));
    await quiet.reloader.apply(NEW, 'api'); // not announced: the peer keeps its rules
    await new Promise((r) => setTimeout(r, 200));
    expect(quiet.logs.some((l) => l.msg === 'policy reload announced')).toBe(false);
    expect([quiet.counts, peer.counts]).toStrictEqual([['api/ok'], []]);
    expect(peer.limiter.version).toBe(version(OLD));
    expect(peer.refused).toStrictEqual(['unsigned']);
  });

  it('refuses a secret under 16 bytes', async () => {
    await expect(harness({ redis: redis.url, secret: 'short' })).rejects.toThrow('announceSecret: must be at least 16 bytes');
  });

  it('a peer whose subscription was away while a reload was announced reads the kept announcement once back', async () => {
    await redis.client.del('sluice:policies:kept');
    const proxy = await startHoldProxy(redis.port);
    try {
      const a = await harness({ redis: redis.url, instanceId: 'a' });
      const b = await harness({ redis: `redis://127.0.0.1:${proxy.port}`, instanceId: 'b' });
      // both subscribers lose their connection; b's SUBSCRIBE on its way back is held at the proxy
      const held = proxy.holdAt('sluice:policies');
      await redis.client.client('KILL', 'TYPE', 'pubsub');
      await held;
      await a.reloader.apply(NEW, 'api');
      expect(JSON.parse(JSON.parse((await redis.client.hget('sluice:policies:kept', 'm'))!).body).version).toBe(version(NEW));
      await until(() => a.logs.some((l) => l.msg === 'policy reload announced'), 'the announcement');
      expect(b.limiter.version).toBe(version(OLD)); // the message went by while b was not subscribed
      proxy.release();
      await until(() => b.limiter.version === version(NEW), 'b to catch up');
      expect(b.counts).toStrictEqual(['peer/ok']);
      expect(b.logs.filter((l) => l.msg === 'policies reloaded').map((l) => [l.source, l.file])).toStrictEqual([['peer', '<peer a>']]);
      // a's own subscriber came back too: its own kept announcement is neither applied nor counted as a replay
      expect([a.refused, b.refused, a.counts]).toStrictEqual([[], [], ['api/ok']]);
    } finally {
      await proxy.close();
    }
  });

  it('a reload made while Redis is down reaches the peer once Redis is back (restarted empty)', async () => {
    const a = await harness({ redis: redis.url, instanceId: 'a' });
    const b = await harness({ redis: redis.url, instanceId: 'b' });
    await redis.kill();
    await a.reloader.apply(NEW, 'api');
    await until(() => a.logs.some((l) => l.msg.startsWith('policy reload not announced')), 'the failed announcement');
    await redis.restart();
    await until(() => b.limiter.version === version(NEW), 'b to follow', 10_000);
    expect([b.counts, b.refused]).toStrictEqual([['peer/ok'], []]);
  });

  it('a kept announcement older than the file an instance started with is not applied after a reconnect', async () => {
    const nine = version('policies:\n  api: { algorithm: fixed_window, limit: 9, period: 1h }\n');
    await redis.client.hset('sluice:policies:kept', 'm', new AnnouncementSigner(SECRET).sign(
      { origin: 'old', version: nine, policies: { api: { algorithm: 'fixed_window', limit: 9, period: '1h' } } }, Date.now() - 1000), 'o', 0);
    const h = await harness({ redis: redis.url, instanceId: 'late' }); // started after it was announced
    await until(() => h.logs.some((l) => l.msg === 'listening for policy reloads'), 'subscribed');
    await redis.client.client('KILL', 'TYPE', 'pubsub');
    await until(() => h.logs.some((l) => l.msg === 'a peer\'s policies set older than the one in force: not applied'), 'the kept set ignored', 5000);
    expect([h.limiter.version, h.counts, h.refused]).toStrictEqual([version(OLD), [], []]);
  });

  it('of two announced sets the later wins: one sent before the set in force is not applied, heard live or kept', async () => {
    await redis.client.del('sluice:policies:kept');
    const h = await harness({ redis: redis.url, instanceId: 'me' });
    const peer = new AnnouncementSigner(SECRET);
    const doc = { api: { algorithm: 'fixed_window', limit: 9, period: '1h' } };
    const nine = version('policies:\n  api: { algorithm: fixed_window, limit: 9, period: 1h }\n');
    await h.reloader.apply(NEW, 'api');
    // sent a minute before this instance's own reload (within the 5 minutes an announcement is accepted)
    const stale = peer.sign({ origin: 'peer', version: nine, policies: doc }, Date.now() - 60_000);
    await redis.client.publish('sluice:policies', stale);
    await until(() => h.logs.some((l) => l.msg === 'a peer\'s policies set older than the one in force: not applied'), 'the stale set ignored');
    expect([h.limiter.version, h.counts, h.refused]).toStrictEqual([version(NEW), ['api/ok'], []]);
    // the same set sent now is applied
    await redis.client.publish('sluice:policies', peer.sign({ origin: 'peer', version: nine, policies: doc }));
    await until(() => h.limiter.version === nine, 'the later set applied');
    // an older kept one, read after a reconnect, is not applied either
    await redis.client.hset('sluice:policies:kept', 'm', new AnnouncementSigner(SECRET).sign({ origin: 'other', version: version(NEW), policies: {} }, Date.now() - 30_000), 'o', 0);
    const before = h.logs.length;
    await redis.client.client('KILL', 'TYPE', 'pubsub');
    await until(() => h.logs.slice(before).some((l) => l.msg === 'a peer\'s policies set older than the one in force: not applied'), 'the kept stale set ignored', 5000);
    expect([h.limiter.version, h.counts, h.refused]).toStrictEqual([nine, ['api/ok', 'peer/ok'], []]);
  });

  // the later reload wins, by when it was made
  const doc = (limit: number): Record<string, unknown> => ({ api: { algorithm: 'fixed_window', limit, period: '1h' } });
  const text = (limit: number): string => `policies:\n  api: { algorithm: fixed_window, limit: ${limit}, period: 1h }\n`;

  it('two announcements heard back to back, the later-made first: the earlier-made one is not applied after it', async () => {
    const c = await harness({ redis: redis.url, instanceId: 'c' });
    const peer = new AnnouncementSigner(SECRET);
    const now = Date.now();
    await redis.client.multi()
      .publish('sluice:policies', peer.sign({ origin: 'b', version: version(text(20)), policies: doc(20), madeAt: now }))
      .publish('sluice:policies', new AnnouncementSigner(SECRET).sign({ origin: 'a', version: version(text(10)), policies: doc(10), madeAt: now - 50 }))
      .exec();
    await until(() => c.limiter.version === version(text(20)), 'the later set');
    await new Promise((r) => setTimeout(r, 200)); // what an older set would take to land after it
    expect([c.limiter.version, c.counts]).toStrictEqual([version(text(20)), ['peer/ok']]);
  });

  it('the kept announcement is the later-made one, whichever was published last', async () => {
    const pub = RedisStore.create({ url: redis.url });
    const chan = pub.channel('t:chan', () => undefined);
    try {
      await chan.subscribed;
      expect(await chan.publish('later', { ms: 60_000, order: 2000, tie: 'b' })).toBe(1);
      expect(await chan.publish('earlier', { ms: 60_000, order: 1000, tie: 'z' })).toBe(1); // published, not kept
      expect(await redis.client.hgetall('t:chan:kept')).toStrictEqual({ m: 'later', o: '2000', t: 'b' });
      // made in the same ms: the tie decides, byte by byte ('a' < 'b' < 'b-1' < 'c'), whatever the order sent
      expect(await chan.publish('same ms, a', { ms: 60_000, order: 2000, tie: 'a' })).toBe(1);
      expect(await redis.client.hget('t:chan:kept', 'm')).toBe('later');
      expect(await chan.publish('same ms, b-1', { ms: 60_000, order: 2000, tie: 'b-1' })).toBe(1);
      expect(await redis.client.hget('t:chan:kept', 'm')).toBe('same ms, b-1');
      expect(await chan.publish('latest', { ms: 60_000, order: 3000, tie: '' })).toBe(1);
      expect(await redis.client.hget('t:chan:kept', 'm')).toBe('latest');
    } finally {
      await chan.close();
      await pub.close();
    }
  });

  it('sets made in the same ms by two instances: the one whose origin comes later is kept, whatever the order heard', async () => {
    await redis.client.del('sluice:policies:kept');
    const c = await harness({ redis: redis.url, instanceId: 'c' });
    const at = Date.now();
    const announce = (origin: string, limit: number): Promise<number> => redis.client.publish('sluice:policies',
      new AnnouncementSigner(SECRET).sign({ origin, version: version(text(limit)), policies: doc(limit), madeAt: at }));
    await announce('b', 62);
    await until(() => c.limiter.version === version(text(62)), 'b\'s set');
    await announce('a', 61); // same ms, origin before b's: not applied
    await until(() => c.logs.some((l) => l.msg === 'a peer\'s policies set older than the one in force: not applied'), 'a\'s refused');
    expect([c.limiter.version, c.counts]).toStrictEqual([version(text(62)), ['peer/ok']]);
  });

  it('a reload here after a set from a peer whose clock runs ahead is stamped after it, so every instance takes it', async () => {
    const a = await harness({ redis: redis.url, instanceId: 'a' });
    const b = await harness({ redis: redis.url, instanceId: 'b' });
    const ahead = new AnnouncementSigner(SECRET);
    const fast = Date.now() + 60_000; // its clock, a minute ahead (within the 5 minutes a message is accepted)
    await redis.client.publish('sluice:policies', ahead.sign({ origin: 'fast', version: version(text(30)), policies: doc(30), madeAt: fast }, fast));
    await until(() => a.limiter.version === version(text(30)) && b.limiter.version === version(text(30)), 'both on the fast peer\'s set');
    await b.reloader.apply(text(40), 'signal');
    await until(() => a.limiter.version === version(text(40)), 'a to follow b\'s later reload');
    expect([a.counts, b.counts]).toStrictEqual([['peer/ok', 'peer/ok'], ['peer/ok', 'signal/ok']]);
  });

  it('reloads made while Redis was down: the one made last wins on every instance, whichever is re-sent last', async () => {
    for (let run = 0; run < 3; run++) {
      await redis.client.del('sluice:policies:kept');
      const a = await harness({ redis: redis.url, instanceId: `a${run}` });
      const b = await harness({ redis: redis.url, instanceId: `b${run}` });
      await redis.kill();
      await a.reloader.apply(text(11 + run), 'signal');
      await new Promise((r) => setTimeout(r, 20));
      await b.reloader.apply(text(21 + run), 'signal'); // made later
      await redis.restart();
      await until(() => a.limiter.version === version(text(21 + run)), `run ${run}: a to take b's later reload`, 10_000);
      await new Promise((r) => setTimeout(r, 300)); // a's own set, re-sent, must not land on b after it
      expect([a.limiter.version, b.limiter.version]).toStrictEqual([version(text(21 + run)), version(text(21 + run))]);
      await Promise.all(open.splice(0).map(async (h) => {
        await h.reloader.close();
        await h.limiter.close();
      }));
    }
  });
});

describe('PolicyReloader over a Redis Cluster', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('a reload announced through one master reaches an instance subscribed through another', async () => {
    const a = await harness({ cluster: [cluster.nodes[0]], instanceId: 'a' });
    const b = await harness({ cluster: [cluster.nodes[2]], instanceId: 'b' });
    await a.reloader.apply(NEW, 'api');
    await until(() => b.limiter.version === version(NEW), 'b to follow');
    expect([a.counts, b.counts]).toStrictEqual([['api/ok'], ['peer/ok']]);
  });
});
