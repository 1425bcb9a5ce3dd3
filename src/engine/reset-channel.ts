/**
 * Key resets told to every instance: an admin reset (src/engine/inspect.ts) deletes the key's state in the
 * store, and what other instances learned of the key from the store stays with them until it runs out (a
 * strict over-limit denial until the key refills). So each instance's reset is announced on the store's
 * pub/sub channel `<prefix>resets` (Store.channel, src/store/contract.ts), and every instance that hears it
 * drops what it holds of the key from the store (KeyAdmin.heard).
 *
 * Message: JSON text `{"v":1,"origin":<this channel's id>,"policy":<name>,"version":<policy version>,"key":<key>}`
 * (the key as checks derive it, after descriptors). Not signed: what a message makes an instance do is drop
 * what it learned from the store (its next check of the key asks the store), so a forged one costs store
 * calls and admits nothing. A message that is not of that form is ignored and counted (`malformed`).
 *
 * Delivery is Redis pub/sub's: at most once, to the subscribers connected then. An instance may miss a reset
 * while its channel is away, so it forgets every over-limit denial when the channel is ready again
 * (`onReady`); a reset whose publish fails (the store away) is kept, up to {@link MAX_UNSENT}, and sent again
 * when publishing works again.
 */
import { randomBytes } from 'node:crypto';
import type { PubSub, StoreChannel } from '../store/contract.js';
import { validateKey } from '../keys/derive.js';

/** One reset as heard: the key's policy, the policy version it was reset under, and the key. */
export interface HeardReset {
  policy: string;
  version: string;
  key: string;
}

/** The channel's counters (the limiter's `stats().store.resets`). */
export interface ResetChannelStats {
  /** Resets this instance announced (published; a failed publish counts once sent again). */
  sent: number;
  /** Resets heard from other instances and applied (the key's policy and version are in force here). */
  applied: number;
  /** Resets heard for a policy not in force here, or under another version of it (a reload in progress). */
  ignored: number;
  /** Messages on the channel that are not a reset (ignored). */
  malformed: number;
}

/** Resets kept while the store is away, to send again; past it the oldest is dropped. */
export const MAX_UNSENT = 1024;
/** The longest message read, in UTF-16 units (a key is at most 1,024 bytes: its JSON, 6 units a byte at worst). */
const MAX_MESSAGE = 16_384;

export interface ResetChannelOptions {
  /** The store whose channel carries the resets. */
  pubsub: PubSub;
  /** The store's key prefix: the channel is `<prefix>resets`. */
  prefix: string;
  /** Applies a reset heard from another instance; returns false when it did not apply here (`ignored`). */
  apply: (r: HeardReset) => boolean;
  /** Called each time the channel is ready again (resets may have been missed meanwhile). */
  onReady: () => void;
}

export class ResetChannel {
  /** The channel's name, `<prefix>resets`. */
  readonly name: string;
  /** This channel's id, the `origin` of its messages (its own are not applied again). */
  readonly origin = randomBytes(6).toString('hex');
  private readonly chan: StoreChannel;
  private readonly counts: ResetChannelStats = { sent: 0, applied: 0, ignored: 0, malformed: 0 };
  private unsent: string[] = [];
  private closed = false;

  constructor(private readonly o: ResetChannelOptions) {
    this.name = `${o.prefix}resets`;
    this.chan = o.pubsub.channel(this.name, (m) => this.heard(m));
    this.chan.subscribed.catch(() => undefined); // retried on reconnect; a reset meanwhile is missed (see onReady)
    this.chan.onReady(() => {
      if (this.closed) return;
      o.onReady();
      const again = this.unsent;
      this.unsent = [];
      for (const m of again) this.publish(m);
    });
  }

  /** Resolves once subscribed (rejects if the first subscription failed; it is retried on reconnect). */
  get subscribed(): Promise<void> {
    return this.chan.subscribed;
  }

  stats(): ResetChannelStats {
    return { ...this.counts };
  }

  /** Announces that `key` of `policy` (at `version`) was reset here. Never throws; a failed publish is kept. */
  announce(policy: string, version: string, key: string): void {
    if (this.closed) return;
    this.publish(JSON.stringify({ v: 1, origin: this.origin, policy, version, key }));
  }

  private publish(message: string): void {
    this.chan.publish(message).then(() => {
      this.counts.sent++;
    }, () => {
      if (this.closed) return;
      this.unsent.push(message);
      if (this.unsent.length > MAX_UNSENT) this.unsent.shift();
    });
  }

  /** A message from the channel: validated, then applied unless it is this channel's own. */
  private heard(message: string): void {
    if (this.closed) return;
    const r = parseReset(message);
    if (r === null) {
      this.counts.malformed++;
      return;
    }
    if (r.origin === this.origin) return;
    if (this.o.apply(r)) this.counts.applied++;
    else this.counts.ignored++;
  }

  /** Unsubscribes and closes the channel's connections (within a bounded wait: StoreChannel.close). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsent = [];
    await this.chan.close();
  }
}

/**
 * The reset a channel message carries, or null when it is not one: JSON text (at most 16,384 characters) of
 * an object with `v` 1, the non-empty strings `origin`, `policy` and `version`, and `key`, a valid key
 * (src/keys/derive.ts validateKey: 1 to 1,024 bytes of UTF-8, well-formed).
 */
export function parseReset(message: string): (HeardReset & { origin: string }) | null {
  if (typeof message !== 'string' || message.length > MAX_MESSAGE) return null;
  let m: unknown;
  try {
    m = JSON.parse(message);
  } catch {
    return null;
  }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return null;
  const { v, origin, policy, version, key } = m as Record<string, unknown>;
  if (v !== 1 || !text(origin) || !text(policy) || !text(version)) return null;
  try {
    validateKey(key);
  } catch {
    return null;
  }
  return { origin, policy, version, key: key as string };
}

function text(s: unknown): s is string {
  return typeof s === 'string' && s.length > 0;
}
