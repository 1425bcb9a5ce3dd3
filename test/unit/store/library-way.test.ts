/**
 * src/store/library-way.ts LibraryWay.resendAs: what a failed check call does next, for each error it meets,
 * exactly: "Function not found" with the load it waits for taken, or refused for now (the load's error, counted
 * as unavailable), or FCALL given up meanwhile; FCALL refused as a command; NOSCRIPT; anything else; and a
 * resend's second failure. With its load bookkeeping: loads begun, whether one began since a call, and what a
 * FUNCTION LOAD's failure does to the way.
 */
import { describe, expect, it } from 'vitest';
import { failureKind } from '../../../src/store/failure-kind.js';
import { LibraryWay, SETTLED, type ResendTurn, type SentCall } from '../../../src/store/library-way.js';

/** A reply error as ioredis rejects with it (its name is what failureKind reads). */
function reply(message: string): Error {
  return Object.assign(new Error(message), { name: 'ReplyError' });
}

const MISSING = reply('ERR Function not found');
const NOSCRIPT = reply('NOSCRIPT No matching script. Please use EVAL.');
const FCALL_UNKNOWN = reply("ERR unknown command 'fcall', with args beginning with: 'sluice_x_check' '1' ");
const OOM = reply("OOM command not allowed when used memory > 'maxmemory'.");
const KEY_NOPERM = reply('NOPERM this user has no permissions to access one of the keys used as arguments');

/** A way whose transport's load resolves to `outcome` (after `meanwhile` runs), recording the calls it is asked about. */
function wayWith(outcome: unknown, meanwhile?: (way: LibraryWay<SentCall>) => void): { way: LibraryWay<SentCall>; asked: SentCall[] } {
  const asked: SentCall[] = [];
  const way: LibraryWay<SentCall> = new LibraryWay(true, (sent) => {
    asked.push(sent);
    meanwhile?.(way);
    return Promise.resolve(outcome);
  });
  return { way, asked };
}

const byFcall: SentCall = { fcall: true, resent: false, sentAt: 0 };
const byEvalsha: SentCall = { fcall: false, resent: false, sentAt: 0 };

describe('LibraryWay.resendAs', () => {
  it('"Function not found", the load it waits for taken: resent by FCALL, the transport asked once', async () => {
    const { way, asked } = wayWith(undefined);
    await expect(way.resendAs(MISSING, byFcall)).resolves.toBe('fcall');
    expect(asked).toEqual([byFcall]);
    expect(way.fcall).toBe(true);
  });

  it('"Function not found", the load refused for now: fails with the load\'s error, counted as unavailable', async () => {
    const { way } = wayWith(OOM);
    const failed = await way.resendAs(MISSING, byFcall).then(() => undefined, (e: unknown) => e);
    expect(failed).toBe(OOM);
    expect(failureKind(failed)).toBe('unavailable');
    // the FCALL's own error would have counted as the script's
    expect(failureKind(MISSING)).toBe('scriptErrors');
    expect(way.fcall).toBe(true);
  });

  it('"Function not found", the library refused (FCALL given up) while it waited: resent by EVALSHA', async () => {
    const { way } = wayWith(undefined, (w) => w.loadFailed(reply("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' ")));
    await expect(way.resendAs(MISSING, byFcall)).resolves.toBe('evalsha');
    expect(way.fcall).toBe(false);
  });

  it('"Function not found" after FCALL was given up (the call went out before): resent by EVALSHA, nothing loaded', async () => {
    const { way, asked } = wayWith(undefined);
    way.loadFailed(reply("NOPERM this user has no permissions to run the 'function|load' command"));
    await expect(way.resendAs(MISSING, byFcall)).resolves.toBe('evalsha');
    await expect(way.resendAs(MISSING, { ...byFcall, resent: true })).resolves.toBe('evalsha');
    // the transport (a Cluster: a load on every master) was not asked
    expect(asked).toEqual([]);
    expect(way.loads).toBe(0);
  });

  it('"Function not found" on a resend: fails with it (or with the load\'s error), by EVALSHA if FCALL was given up', async () => {
    const again = { ...byFcall, resent: true };
    await expect(wayWith(undefined).way.resendAs(MISSING, again)).rejects.toBe(MISSING);
    await expect(wayWith(OOM).way.resendAs(MISSING, again)).rejects.toBe(OOM);
    const { way } = wayWith(undefined, (w) => {
      w.fcall = false;
    });
    await expect(way.resendAs(MISSING, again)).resolves.toBe('evalsha');
  });

  it('FCALL refused as a command: resent by EVALSHA, and FCALL given up for good; the transport not asked', async () => {
    for (const e of [FCALL_UNKNOWN, reply("NOPERM User u has no permissions to run the 'fcall' command")]) {
      const { way, asked } = wayWith(undefined);
      await expect(way.resendAs(e, byFcall)).resolves.toBe('evalsha');
      expect(way.fcall).toBe(false);
      expect(asked).toEqual([]);
    }
    // a resend meeting it too
    const { way } = wayWith(undefined);
    await expect(way.resendAs(FCALL_UNKNOWN, { ...byFcall, resent: true })).resolves.toBe('evalsha');
  });

  it('NOSCRIPT on an EVALSHA: resent as EVAL, once', async () => {
    const { way, asked } = wayWith(undefined);
    await expect(way.resendAs(NOSCRIPT, byEvalsha)).resolves.toBe('eval');
    await expect(way.resendAs(NOSCRIPT, { ...byEvalsha, resent: true })).rejects.toBe(NOSCRIPT);
    expect(asked).toEqual([]);
    expect(way.fcall).toBe(true);
  });

  it('any other error: fails with it, FCALL kept, the transport not asked', async () => {
    const { way, asked } = wayWith(undefined);
    for (const e of [OOM, KEY_NOPERM, reply('ERR Error running script: bad leg'), new Error('Connection is closed.')]) {
      await expect(way.resendAs(e, byFcall)).rejects.toBe(e);
      await expect(way.resendAs(e, byEvalsha)).rejects.toBe(e);
    }
    // NOSCRIPT is an EVALSHA's, "Function not found" an FCALL's
    await expect(way.resendAs(NOSCRIPT, byFcall)).rejects.toBe(NOSCRIPT);
    await expect(way.resendAs(MISSING, byEvalsha)).rejects.toBe(MISSING);
    expect(asked).toEqual([]);
    expect(way.fcall).toBe(true);
  });
});

describe('LibraryWay loads', () => {
  it('counts the loads begun: a call sent before the latest one began is not to begin another', () => {
    const way = new LibraryWay<SentCall>(true, () => Promise.resolve(undefined));
    const early: SentCall = { fcall: true, resent: false, sentAt: way.loads };
    expect(way.noLoadSince(early)).toBe(true);
    way.loadBegun();
    expect(way.noLoadSince(early)).toBe(false);
    expect(way.noLoadSince({ ...early, sentAt: way.loads })).toBe(true);
  });

  it('a FUNCTION LOAD refused gives FCALL up; refused for now, or already loaded, does not', () => {
    const way = new LibraryWay<SentCall>(true, () => Promise.resolve(undefined));
    expect(way.loadFailed(OOM)).toBe('retry');
    expect(way.loadFailed(reply("READONLY You can't write against a read only replica."))).toBe('retry');
    expect(way.loadFailed(reply("ERR Library 'sluice_x' already exists"))).toBe('loaded');
    expect(way.fcall).toBe(true);
    expect(way.loadFailed(reply("NOPERM this user has no permissions to run the 'function|load' command"))).toBe('refused');
    expect(way.fcall).toBe(false);
  });
});

describe('LibraryWay.resend', () => {
  it('resends in the order the calls failed: a call waiting for a load goes before a later one that needs none', async () => {
    // the transport's load stays on its way until `settle` is called, then is refused for good (FCALL given up)
    let settle = (): void => undefined;
    const way: LibraryWay<SentCall> = new LibraryWay(true, () => new Promise((resolve) => {
      settle = () => {
        way.loadFailed(reply("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' "));
        resolve(undefined);
      };
    }));
    const made: string[] = [];
    const send = (name: string) => (how: string): Promise<string> => {
      made.push(`${name} by ${how}`);
      return Promise.resolve(how);
    };
    // A found no library: it waits for the load
    const a = way.resend(MISSING, byFcall, send('A'));
    await Promise.resolve();
    // the load is refused for good; B's "Function not found" comes in the same read: EVALSHA at once by its way,
    // yet after A
    settle();
    const b = way.resend(MISSING, byFcall, send('B'));
    // a NOSCRIPT after them, and a failure that is not resent: it fails with its error and holds no one up
    const c = way.resend(NOSCRIPT, byEvalsha, send('C'));
    const d = way.resend(KEY_NOPERM, byFcall, send('D'));
    await expect(Promise.all([a, b, c])).resolves.toEqual(['evalsha', 'evalsha', 'eval']);
    await expect(d).rejects.toBe(KEY_NOPERM);
    expect(made).toEqual(['A by evalsha', 'B by evalsha', 'C by eval']);
    // the next failure is not held up by those
    await expect(way.resend(NOSCRIPT, byEvalsha, send('E'))).resolves.toBe('eval');
  });

  it('orders the resends per turn (one per connection or Cluster slot): a turn waiting for a load that hangs holds up only its own', async () => {
    // the load of the call on turn `a` never settles (its server froze mid-reload); the others' are taken
    const way: LibraryWay<SentCall & { hangs: boolean }> = new LibraryWay(true, (sent) => (sent.hangs ? new Promise(() => undefined) : Promise.resolve(undefined)));
    const a: ResendTurn = { last: SETTLED }, b: ResendTurn = { last: SETTLED };
    const made: string[] = [];
    const send = (name: string) => (how: string): Promise<string> => {
      made.push(`${name} by ${how}`);
      return Promise.resolve(how);
    };
    void way.resend(MISSING, { ...byFcall, hangs: true }, send('A1'), a);
    const a2 = way.resend(NOSCRIPT, { ...byEvalsha, hangs: false }, send('A2'), a);
    // B's failures came after A's, on another server: resent without waiting for A's
    await expect(way.resend(MISSING, { ...byFcall, hangs: false }, send('B1'), b)).resolves.toBe('fcall');
    await expect(way.resend(NOSCRIPT, { ...byEvalsha, hangs: false }, send('B2'), b)).resolves.toBe('eval');
    await expect(way.settled(b)).resolves.toBeUndefined();
    // A's second resend needs no load, yet stays behind A's first
    let a2Made = false;
    void a2.then(() => (a2Made = true));
    await new Promise((r) => setImmediate(r));
    expect(a2Made).toBe(false);
    expect(made).toEqual(['B1 by fcall', 'B2 by eval']);
  });
});
