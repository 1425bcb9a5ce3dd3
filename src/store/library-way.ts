/**
 * Which way the check script goes to Redis, and what a check call that failed does next: one rule for the calls
 * on one connection (src/store/check-call.ts) and on a Redis Cluster (src/store/cluster-calls.ts).
 *
 * The script goes as FCALL of the check library (src/store/scripts.ts checkLibrary, put there by FUNCTION LOAD)
 * until Redis refuses FUNCTION LOAD or FCALL (older than 7.0: unknown command; an ACL without them: NOPERM),
 * then by EVALSHA for good. A failed call is answered by its error:
 * - FCALL refused as a command: resent by EVALSHA, as every call after it;
 * - "Function not found" (a restart without persistence, FUNCTION FLUSH, a new Cluster): by EVALSHA at once
 *   when FCALL was given up since the call went out; else resent by FCALL once
 *   the library load it is judged by has settled; failed with that load's error when it was refused for now
 *   (loadFailure `retry`: READONLY, OOM, BUSY...), which says Redis is unwell (counted as unavailable, toward
 *   the breaker: src/store/failure-kind.ts) as the same error on the FCALL itself would; resent by EVALSHA when
 *   the library was refused meanwhile. Which load that is, and where it is sent, is the transport's
 *   ({@link LibraryLoads}): loads go ahead of the calls on one connection, and to the call's master on a Cluster;
 * - NOSCRIPT on an EVALSHA (a restart, failover, SCRIPT FLUSH): resent once as EVAL, which caches the script;
 * - anything else, or a resend's failure: failed with its error.
 */
import { fcallRefused, functionMissing, loadFailure, scriptMissing } from './scripts.js';

/** A check call as it went out, for {@link LibraryWay.resendAs}. */
export interface SentCall {
  /** Sent by FCALL (else by EVALSHA or EVAL). */
  fcall: boolean;
  /** Already a resend: a second "Function not found" or NOSCRIPT is its failure. */
  resent: boolean;
  /**
   * The loads begun where it went when it was sent ({@link LibraryWay.loads} on one connection; its master's
   * own count on a Cluster): a load begun since answers its "Function not found".
   */
  sentAt: number;
}

/** How a failed check call is sent again: by FCALL, by EVALSHA, or as EVAL (the script's text). */
export type Resend = 'fcall' | 'evalsha' | 'eval';

/**
 * A transport's library loads, as {@link LibraryWay.resendAs} waits for them: `reloaded` is called when the
 * call `sent` by FCALL found no library, and waits for the load it is judged by (beginning one where the call
 * went when none began there since it went out, as its transport does), then resolves to the error that
 * refused that load for now (loadFailure `retry`), else to undefined.
 */
export type LibraryLoads<S extends SentCall> = (sent: S) => Promise<unknown>;

/**
 * The order of the resends of the calls that share a key's way: those of one connection, or of one hash slot of a
 * Cluster (the slot's calls go to one master, the one serving it, and with the slot when it moves). Each is made
 * after those of the calls that failed before it there ({@link LibraryWay.resend}): only there can a resend be
 * overtaken by the same key's later check. A turn shared by a Cluster's masters held a healthy master's resends
 * (and, behind its gate, its new calls) behind those of a master frozen mid-reload
 * (test/fault/redis-cluster-held-reload.test.ts).
 */
export interface ResendTurn {
  /** The last failed call's turn: settled once its way is known and its resend made (or it failed for good). */
  last: Promise<unknown>;
}

/** A settled promise, the first {@link ResendTurn.last} of each turn (one, not one per turn). */
export const SETTLED: Promise<unknown> = Promise.resolve();

/**
 * Makes a resend on `turn` after those of the calls that failed before it there: once they are made, `ready` is
 * called and awaited (the way a failed call goes again, a pause before a retry), then `send` with its value
 * writes the resend; the next failure's resend is made after this one, whether `ready` settled or failed. Its
 * promise is the resend's (rejected with `ready`'s error, when that failed). {@link LibraryWay.resend} makes a
 * library failure's resend by it; a Cluster's redirections and retries (src/store/cluster-calls.ts) too.
 */
export function resendInTurn<V, T>(turn: ResendTurn, ready: () => V | PromiseLike<V>, send: (v: V) => Promise<T>): Promise<T> {
  const mine = turn.last.then(ready);
  const again = mine.then(send);
  // registered after `again`'s reaction, so the next failed call's resend is made after this one's
  turn.last = mine.then(() => undefined, () => undefined);
  return again;
}

/**
 * The way of one transport's check calls (see the file's doc): FCALL or EVALSHA, the library loads begun, and
 * what a failed call does next.
 */
export class LibraryWay<S extends SentCall> {
  /** Library loads begun so far on one connection (a Cluster counts its loads per master: src/store/cluster-calls.ts). */
  loads = 0;

  /**
   * @param fcall whether calls go by FCALL to begin with (false: a caller without the library, EVALSHA only);
   *   FCALL until Redis refuses FUNCTION LOAD or FCALL, then EVALSHA for good.
   * @param reloaded the transport's loads ({@link LibraryLoads})
   */
  constructor(public fcall: boolean, private readonly reloaded: LibraryLoads<S>) {}

  /** Counts a load begun: the calls sent before it, failing for want of the library, are resent behind it. */
  loadBegun(): void {
    this.loads++;
  }

  /** Whether no load began since `sent` went out: its "Function not found" asks for a new one. */
  noLoadSince(sent: SentCall): boolean {
    return sent.sentAt === this.loads;
  }

  /**
   * Takes in a FUNCTION LOAD's failure `e` and returns what it means (src/store/scripts.ts loadFailure):
   * `refused` gives FCALL up for good; `retry` (refused for now) is the transport's to remember, as the error
   * its calls behind that load fail with.
   */
  loadFailed(e: unknown): 'loaded' | 'refused' | 'retry' {
    const outcome = loadFailure(e);
    if (outcome === 'refused') this.fcall = false;
    return outcome;
  }

  /** The resends' order on a transport of one connection; a Cluster gives each slot its own. */
  private readonly turn: ResendTurn = { last: SETTLED };

  /**
   * Settles once the resends of the calls that failed so far on `turn` are made (or those calls failed for
   * good): a transport (one connection, or a Cluster slot) holds new calls back until then ({@link asksResend}
   * says which failures ask for that).
   */
  settled(turn: ResendTurn = this.turn): Promise<unknown> {
    return turn.last;
  }

  /**
   * Whether the failure `e` of a check call may be answered by a resend ("Function not found", NOSCRIPT, FCALL
   * refused as a command): the calls written after that one went to the same server and may fail alike, so
   * until each is answered or resent, a new call must not go out ahead of their resends.
   */
  static asksResend(e: unknown): boolean {
    return functionMissing(e) || scriptMissing(e) || fcallRefused(e);
  }

  /**
   * Answers the check call `sent`, failed with `e`: `send` makes the resend by the way {@link resendAs} gives
   * (its promise is the call's), in the order the failures came on its `turn` (its connection, or its Cluster
   * slot). The way is decided at once (a load it asks for begins in that order), and the resend is made after
   * those of the calls that failed before it there, which were sent before it: the way can take longer for one (waiting for a load) than for a
   * later one (FCALL given up meanwhile: EVALSHA at once), which would overtake it and reach Redis first with
   * the same key's later check (test/unit/store/check-call-order.test.ts). Failures only: a call that succeeds
   * never waits here.
   */
  resend<T>(e: unknown, sent: S, send: (how: Resend) => Promise<T>, turn: ResendTurn = this.turn): Promise<T> {
    // decided now: a load it asks for begins in the order the failures came
    const how = this.resendAs(e, sent);
    return resendInTurn(turn, () => how, send);
  }

  /**
   * What the check call `sent`, failed with `e`, does next: resolves to the way it is resent by, or rejects
   * with the error it fails with (`e`, or the error that refused the library's load for now where it went).
   * "Function not found" waits for the transport's load (`reloaded`) first; an FCALL refused as a command gives
   * FCALL up for good.
   */
  async resendAs(e: unknown, sent: S): Promise<Resend> {
    if (!sent.fcall) {
      // the script's cache is gone from this server (restart, failover, SCRIPT FLUSH): EVAL once
      if (sent.resent || !scriptMissing(e)) throw e;
      return 'eval';
    }
    if (fcallRefused(e)) {
      // this Redis will not run FCALL (older than 7, an ACL without it): by EVALSHA from now on
      this.fcall = false;
      return 'evalsha';
    }
    if (!functionMissing(e)) throw e;
    // FCALL given up since this call went out (another call's FCALL or FUNCTION LOAD refused): resent by
    // EVALSHA, which needs no library, so none is waited for or loaded
    if (!this.fcall) return 'evalsha';
    // the load it is judged by, refused for now (a replica: READONLY; OOM; BUSY...): this call's failure too,
    // counted as Redis's (src/store/failure-kind.ts) rather than as the script's
    const unwell = await this.reloaded(sent);
    if (unwell !== undefined) throw unwell;
    if (!this.fcall) return 'evalsha';
    if (sent.resent) throw e;
    return 'fcall';
  }
}
