/**
 * The order of check calls across a library reload, one rule for one connection (src/store/check-call.ts) and
 * for each hash slot of a Redis Cluster (src/store/cluster-calls.ts). When a call fails in a way that asks for a
 * resend (LibraryWay.asksResend: "Function not found", NOSCRIPT, FCALL refused), the calls written after it
 * went to the same server and may fail alike; a new call written before their failures are read would reach
 * Redis ahead of their resends, a key's later check before its earlier one (FUNCTION FLUSH:
 * test/fault/redis-flush-order.test.ts, test/fault/redis-cluster-flush-order.test.ts). So the gate closes:
 * new calls wait, in the order made, until the calls written by then are answered and the resends so far are
 * made, then go out.
 */
import { StoreGivenUpError } from './deadline.js';

export class CallGate {
  /** Settles when the calls it waits for are answered and resent; null while open. */
  private gate: Promise<void> | null = null;
  private readonly waiting: Array<() => void> = [];

  /** Whether a new call may go out now (nothing waits). */
  get open(): boolean {
    return this.gate === null && this.waiting.length === 0;
  }

  /**
   * Closes the gate until `upTo` settles (the replies of the calls written so far) and then `settled()` does
   * (LibraryWay.settled: the resends of the failures read so far made). A later close moves it on.
   */
  close(upTo: Promise<unknown>, settled: () => Promise<unknown>): void {
    const g: Promise<void> = upTo.then(noop, noop).then(settled).then(() => {
      // a failure read meanwhile moved the gate on: that one opens it
      if (this.gate !== g) return;
      this.gate = null;
      while (this.waiting.length > 0 && this.gate === null) this.waiting.shift()!();
    });
    this.gate = g;
  }

  /**
   * `send()` once the gate opens, in the order calls were made; settles as its promise does. `givenUp`, checked
   * then, says whether the caller gave up on the call meanwhile (its deadline: its checks took the failure
   * rule): it is not sent, so Redis does not spend for checks answered without it, and fails with a
   * {@link StoreGivenUpError}, which nobody reads (the deadline settled the call first).
   */
  wait<T>(send: () => Promise<T>, givenUp?: () => boolean): Promise<T> {
    return new Promise<T>((resolve, reject) => this.waiting.push(() => {
      if (givenUp?.() === true) {
        reject(new StoreGivenUpError());
        return;
      }
      try {
        send().then(resolve, reject);
      } catch (e) {
        reject(e);
      }
    }));
  }
}

const noop = (): void => undefined;
