/**
 * A store whose decisions fail on demand, for the failure rules (`onStoreError`): every other call is the
 * wrapped store's own, so what it holds and what it answers when not failing are that store's.
 */
import { createLimiter, type Limiter, type PolicySpec } from '../../src/index.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { Store } from '../../src/store/contract.js';

/** `store` with a switch: while `fail(true)` is in force, each decideWide rejects ("store down"). */
export function flakyStore(store: Store): { store: Store; fail: (on: boolean) => void } {
  let failing = false;
  const flaky = Object.create(store) as Store;
  flaky.decideWide = (keys, args, now, wire) => (failing ? Promise.reject(new Error('store down')) : store.decideWide(keys, args, now, wire));
  return { store: flaky, fail: (on) => { failing = on; } };
}

/**
 * A limiter of `policies` on a MemoryStore that fails on demand ({@link flakyStore}), on a controlled clock
 * from `t0` (Unix ms), with the over-limit cache off so that every denial comes from the store.
 */
export async function flakyLimiter(policies: Record<string, PolicySpec>, t0: number): Promise<{ l: Limiter; fail: (on: boolean) => void; clock: { now: number } }> {
  const clock = { now: t0 };
  const { store, fail } = flakyStore(new MemoryStore({ clock: () => clock.now, overLimitCache: false }));
  const l = await createLimiter({ policies, store, clock: () => clock.now });
  return { l, fail, clock };
}
