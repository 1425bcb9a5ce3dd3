/**
 * "Slow is not down": the deadline of a store call.
 *
 * A Redis connection answers its commands in the order they were written. So while calls wait on one
 * connection, a reply to any of them proves that Redis is alive and working through its input: the calls
 * behind it are queued, not lost. A call therefore gives up only when Redis has sent *nothing* on its
 * connection for `timeoutMs`, counted from when the call was issued or from the connection's last reply,
 * whichever is later: a frozen (SIGSTOP), dead or unreachable Redis fails every waiting call `timeoutMs` after
 * it was issued, while a busy one (a long queue, a big batch ahead, a blocked event loop on this side) keeps
 * its calls. The budget of a call thus grows with what is queued ahead of it, as long as that queue moves.
 * A hard cap (`capMs`, by default max(1 s, 10 × timeoutMs)) still bounds a Redis that answers, but too slowly.
 *
 * A call that gave up may still have been run by Redis (it was written to the socket): its reply, if it
 * comes, is handed to `late` so the tokens it spent are accounted for.
 */
export class Liveness {
  /** performance.now() of the last reply (or reply error) Redis sent on this connection; −∞ before any. */
  lastReplyAt = Number.NEGATIVE_INFINITY;

  /** Call when Redis answered anything (a result or a reply error) on this connection. */
  replied(): void {
    this.lastReplyAt = performance.now();
  }
}

/** A store call that got no answer within its deadline (Redis sent nothing on the connection for that long). */
export class StoreTimeoutError extends Error {
  constructor(ms: number) {
    super(`redis: no reply on the connection for ${ms} ms`);
    this.name = 'StoreTimeoutError';
  }
}

/**
 * The failure of a store call its caller gave up on (its deadline passed) before it was written: it waited behind
 * a library reload (src/store/check-call.ts, cluster-calls.ts) and is dropped, so Redis does not spend for checks
 * that already took their failure rule. Nobody reads it: the deadline settled the call first.
 */
export class StoreGivenUpError extends Error {
  constructor() {
    super('redis: the call was given up before it was written (it waited behind a library reload)');
    this.name = 'StoreGivenUpError';
  }
}

/**
 * {@link deadline} for a call that may still wait before it is written (behind a library reload:
 * src/store/call-gate.ts): `start(givenUp)` makes the call, and `givenUp()` turns true once the deadline has
 * rejected it with a {@link StoreTimeoutError}, so the call, if still waiting then, is dropped rather than written
 * (its checks have taken their failure rule). The other parameters are deadline()'s.
 */
export function deadlineOrDrop<T>(start: (givenUp: () => boolean) => Promise<T>, ms: number, live: Liveness, late?: (v: T) => void,
  capMs?: number, issued?: number): Promise<T> {
  let gaveUp = false;
  return deadline(start(() => gaveUp), ms, live, late, capMs, issued).catch((e: unknown) => {
    if (e instanceof StoreTimeoutError) gaveUp = true;
    throw e;
  });
}

/**
 * Resolves or rejects as `p` does, unless Redis sends nothing on `live`'s connection for `ms` after the call
 * was issued (see {@link Liveness}): then it rejects with a {@link StoreTimeoutError}. The check runs after the
 * loop's next poll phase: a timer is run before sockets are read, so after a turn that blocked longer than
 * `ms`, replies already waiting in the socket are read first (and count as progress). Past `capMs` after it was
 * issued it rejects whatever the connection does.
 * @param late called with the value of a call that resolved after it had timed out (a late spend).
 * @param issued when the call was issued (performance.now()): now, unless what it carries waited before it was
 *   sent (a held strict call, Store.decideWide `heldSince`), whose wait counts toward its deadline as well.
 */
export function deadline<T>(p: Promise<T>, ms: number, live: Liveness, late?: (v: T) => void, capMs = Math.max(1000, 10 * ms),
  issued = performance.now()): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const check = (): void => {
      if (settled) return;
      const since = Math.max(issued, live.lastReplyAt);
      const left = Math.min(since + ms, issued + capMs) - performance.now();
      if (left > 0) {
        timer = setTimeout(arm, left);
        return;
      }
      settled = true;
      reject(new StoreTimeoutError(ms));
    };
    const arm = (): void => {
      setImmediate(check);
    };
    timer = setTimeout(arm, Math.max(0, issued + ms - performance.now()));
    p.then((v) => {
      live.replied();
      if (settled) {
        late?.(v);
        return;
      }
      settled = true;
      clearTimeout(timer);
      resolve(v);
    }, (e: unknown) => {
      if ((e as { name?: unknown } | null)?.name === 'ReplyError') live.replied();
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(e);
    });
  });
}
