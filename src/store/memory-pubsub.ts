/**
 * Pub/sub within one process: the {@link PubSub} of the store contract without Redis, for limiters that share
 * a process (tests, an embedding that runs several) and want their policy reloads announced to each other.
 * Like Redis pub/sub, a message is delivered to every channel of that name open at publish time (the
 * publisher's own included), after the publish call returns, in publish order; a closed channel hears nothing.
 */
import type { PubSub, StoreChannel } from './contract.js';
import { closed } from '../util/errors.js';

export class MemoryPubSub implements PubSub {
  private readonly listeners = new Map<string, Set<(message: string) => void>>();

  channel(name: string, onMessage: (message: string) => void): StoreChannel {
    let set = this.listeners.get(name);
    if (set === undefined) this.listeners.set(name, (set = new Set()));
    const subscribers = set;
    // one function per channel, so a channel opened twice with one callback still counts as two receivers
    const listener = (message: string): void => onMessage(message);
    subscribers.add(listener);
    let open = true;
    return {
      subscribed: Promise.resolve(),
      publish: (message) => {
        if (!open) return Promise.reject(closed('pub/sub channel'));
        const receivers = [...subscribers];
        // delivered after this call returns, as a message from Redis arrives on a later turn
        setImmediate(() => {
          for (const r of receivers) if (subscribers.has(r)) r(message);
        });
        return Promise.resolve(receivers.length);
      },
      // always connected: there is no reconnection to report
      onReady: () => undefined,
      // nor a subscription made again: every message reaches every open channel, so none needs keeping
      // (publish's `keep` is not needed here)
      onResubscribed: () => undefined,
      close: async () => {
        open = false;
        subscribers.delete(listener);
      },
    };
  }
}
