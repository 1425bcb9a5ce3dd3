/**
 * A store whose decisions fail on demand, for the failure rules (`onStoreError`): every other call is the
 * wrapped store's own, so what it holds and what it answers when not failing are that store's.
 */
import { createLimiter, type Limiter, type LimiterOptions, type PolicySpec } from '../../src/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/contract.js';

/**
 * `store` with a switch: while `fail(true)` is in force, each decideWide rejects ("store down"). `hold()` holds
 * the next decideWide call (a call in flight: a slow Redis) until the function it returns is called: the wrapped
 * store then decides it, at that moment, and its answer is delivered; called with `true`, the call rejects
 * instead ("store down": it never reached the store). Each hold() takes one call: hold again, after that
 * call is made, to hold the next one as well.
 */
export function flakyStore(store: Store): { store: Store; fail: (on: boolean) => void; hold: () => (fail?: boolean) => void } {
  let failing = false;
  let holding: Array<(fail: boolean) => void> | null = null;
  const flaky = Object.create(store) as Store;
  flaky.decideWide = (keys, args, now, wire) => {
    if (failing) return Promise.reject(new Error('store down'));
    if (holding !== null) {
      const held = holding;
      holding = null;
      return new Promise<number[]>((resolve, reject) => held.push((fail) => {
        if (fail) reject(new Error('store down'));
        else store.decideWide(keys, args, now, wire).then(resolve, reject);
      }));
    }
    return store.decideWide(keys, args, now, wire);
  };
  const hold = (): ((fail?: boolean) => void) => {
    const released: Array<(fail: boolean) => void> = [];
    holding = released;
    return (fail = false) => { for (const r of released) r(fail); };
  };
  return { store: flaky, fail: (on) => { failing = on; }, hold };
}

/**
 * A limiter of `policies` on a MemoryStore that fails on demand ({@link flakyStore}), on a controlled clock
 * from `t0` (Unix ms), with the over-limit cache off so that every denial comes from the store; `opts`: more
 * createLimiter options (maxDelayed, say).
 */
export async function flakyLimiter(policies: Record<string, PolicySpec>, t0: number, opts: Omit<LimiterOptions, 'policies' | 'store' | 'clock'> = {}):
  Promise<{ l: Limiter; fail: (on: boolean) => void; hold: () => (fail?: boolean) => void; clock: { now: number } }> {
  const clock = { now: t0 };
  const { store, fail, hold } = flakyStore(new MemoryStore({ clock: () => clock.now, overLimitCache: false }));
  const l = await createLimiter({ ...opts, policies, store, clock: () => clock.now });
  return { l, fail, hold, clock };
}
