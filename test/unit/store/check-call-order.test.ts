/**
 * The resends of one connection's check calls keep their order (src/store/check-call.ts with
 * src/store/library-way.ts): calls that found no library ("Function not found") while a FUNCTION LOAD was on
 * its way, which Redis then refused for good (FCALL given up), go by EVALSHA in the order they were first
 * sent, so a key's checks still reach Redis in order. A reply read with the refusal of the load (one socket
 * read) must not overtake a call that was waiting for that load.
 *
 * The connection is a stand-in that records what is written and answers as ioredis does (each command's own
 * promise, settled in reply order, several in one go as one socket read would).
 */
import { Command, type Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { checkCaller } from '../../../src/store/check-call.js';
import { checkLibrary, checkScript } from '../../../src/store/scripts.js';

interface Written {
  name: string;
  bytes: string;
  c: Command;
}

function connection(): { redis: Redis; written: Written[] } {
  const written: Written[] = [];
  const stream = {};
  const record = (c: Command): Promise<unknown> => {
    const w = (c as unknown as { toWritable(s: unknown): string | Buffer }).toWritable(null);
    written.push({ name: c.name, bytes: Buffer.isBuffer(w) ? w.toString('latin1') : w, c });
    return c.promise;
  };
  const redis = {
    stream,
    sendCommand: (c: Command) => record(c),
    call: (name: string, ...args: string[]) => {
      const c = new Command(name, args);
      (c as unknown as { stringifyArguments(): void }).stringifyArguments();
      return record(c);
    },
  } as unknown as Redis;
  return { redis, written };
}

const flush = (): Promise<void> => new Promise((r) => setImmediate(r));
const missing = (): Error => Object.assign(new Error('ERR Function not found'), { name: 'ReplyError' });
const reject = (w: Written, e: Error): void => (w.c as unknown as { reject(e: Error): void }).reject(e);

describe('check calls resent after FCALL was given up keep their order', () => {
  it('a call waiting for the refused load is resent before a later call answered with the refusal', async () => {
    const { redis, written } = connection();
    const lib = checkLibrary();
    const call = checkCaller(redis, checkScript(), lib);
    const args = [1, 10, 60_000, 0, 1, 1];
    const check = (now: number): Promise<Buffer> => call(['k'], 0, now, args, 0);
    const named = (now: number): (w: Written) => boolean => (w) => w.bytes.includes(`\r\n${now}\r\n`);
    const x = check(1001);
    const a = check(1002);
    void x.catch(() => undefined);
    void a.catch(() => undefined);
    // the connection's first LOAD took; then the library was flushed: X finds none and reloads it ahead of its resend
    expect(written.map((w) => w.name)).toEqual(['FUNCTION', 'fcall', 'fcall']);
    (written[0].c as unknown as { resolve(v: unknown): void }).resolve('OK');
    await flush();
    reject(written[1], missing());
    await flush();
    expect(written.slice(3).map((w) => w.name)).toEqual(['FUNCTION', 'fcall']);
    const load = written[3];
    const xAgain = written[4];
    // B, the key's next check, goes behind that load
    const b = check(1003);
    void b.catch(() => undefined);
    // A (sent before the load) finds no library either: it waits for the load
    reject(written[2], missing());
    await flush();
    const before = written.length;
    // one socket read: the load refused for good (FCALL given up), X's resend and B without the library
    reject(load, Object.assign(new Error("NOPERM this user has no permissions to run the 'function|load' command"), { name: 'ReplyError' }));
    reject(xAgain, missing());
    // B, when it went out by FCALL behind the load (it waits for the resends now, and goes by EVALSHA after them)
    const bSent = written.findIndex((w) => w.name === 'fcall' && named(1003)(w));
    if (bSent >= 0) reject(written[bSent], missing());
    await flush();
    const resent = written.slice(before);
    const ia = resent.findIndex(named(1002));
    const ib = resent.findIndex(named(1003));
    expect(resent.map((w) => w.name).every((n) => n === 'eval' || n === 'evalsha')).toBe(true);
    expect(ia).toBeGreaterThanOrEqual(0);
    expect(ib).toBeGreaterThanOrEqual(0);
    // A was sent before B: A's resend reaches Redis first
    expect(ia).toBeLessThan(ib);
  });
});

describe('a call made while calls that found no library are still to be resent waits for their resends', () => {
  it('FUNCTION FLUSH: B, made after the reload, reaches Redis after the resend of A, sent before it', async () => {
    const { redis, written } = connection();
    const call = checkCaller(redis, checkScript(), checkLibrary());
    const args = [1, 10, 60_000, 0, 1, 1];
    const check = (now: number): Promise<Buffer> => call(['k'], 0, now, args, 0);
    const named = (now: number): (w: Written) => boolean => (w) => w.bytes.includes(`\r\n${now}\r\n`);
    const resolve = (w: Written, v: unknown): void => (w.c as unknown as { resolve(v: unknown): void }).resolve(v);
    const x = check(1001);
    const a = check(1002);
    expect(written.map((w) => w.name)).toEqual(['FUNCTION', 'fcall', 'fcall']);
    resolve(written[0], 'OK');
    await flush();
    // the library was flushed: X finds none, and its resend goes behind a new load
    reject(written[1], missing());
    await flush();
    expect(written.slice(3).map((w) => w.name)).toEqual(['FUNCTION', 'fcall']);
    // B, the key's next check, is made now: A, written before the load, has not been read yet
    const b = check(1003);
    await flush();
    reject(written[2], missing());
    await flush();
    // the load takes, and X's resend is answered: A's resend goes out, then B
    resolve(written[3], 'OK');
    resolve(written[4], Buffer.alloc(0));
    await flush();
    const order = written.map((w, i) => ({ w, i })).filter(({ w }) => w.name === 'fcall' && !w.bytes.includes('FUNCTION'));
    const ia = order.findIndex(({ w, i }) => i > 3 && named(1002)(w));
    const ib = order.findIndex(({ w }) => named(1003)(w));
    expect(ia).toBeGreaterThanOrEqual(0);
    expect(ib).toBeGreaterThanOrEqual(0);
    // A's resend before B: before the gate, B went out right behind the load, ahead of it
    expect(ia).toBeLessThan(ib);
    // every call is answered
    for (const w of written.slice(5)) resolve(w, Buffer.alloc(0));
    await Promise.allSettled([x, a, b]);
  });
});

describe('a call its caller gave up on while it waited behind a library reload', () => {
  it('is not written: it fails with the given-up error, and the calls behind it go out', async () => {
    const { redis, written } = connection();
    const call = checkCaller(redis, checkScript(), checkLibrary());
    const args = [1, 10, 60_000, 0, 1, 1];
    const named = (now: number): (w: Written) => boolean => (w) => w.bytes.includes(`\r\n${now}\r\n`);
    const resolve = (w: Written, v: unknown): void => (w.c as unknown as { resolve(v: unknown): void }).resolve(v);
    const x = call(['k'], 0, 1001, args, 0);
    const a = call(['k'], 0, 1002, args, 0);
    resolve(written[0], 'OK');
    await flush();
    reject(written[1], missing());
    await flush();
    // B waits behind the reload, and its deadline passes meanwhile; C, made after it, is still wanted
    let gaveUp = false;
    const b = call(['k'], 0, 1003, args, 0, undefined, () => gaveUp);
    const c = call(['k'], 0, 1004, args, 0, undefined, () => false);
    const bFailed = b.then(() => 'answered', (e: Error) => e.message);
    gaveUp = true;
    reject(written[2], missing());
    await flush();
    resolve(written[3], 'OK');
    resolve(written[4], Buffer.alloc(0));
    await flush();
    await flush();
    expect(written.some(named(1003))).toBe(false);
    expect(await bFailed).toMatch(/given up before it was written/);
    expect(written.filter((w) => w.name === 'fcall' && named(1004)(w)).length).toBe(1);
    for (const w of written.slice(5)) resolve(w, Buffer.alloc(0));
    await Promise.allSettled([x, a, c]);
  });
});
