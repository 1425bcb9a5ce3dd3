import { createHmac, timingSafeEqual } from 'node:crypto';
import type { RefusalReason } from '../types/reload.js';
import { usage } from '../util/errors.js';

/**
 * Authenticated policy announcements (issue #20, item 4). Anyone who can PUBLISH on the Redis would
 * otherwise rewrite every instance's policies, so an announcement is signed with a secret the instances
 * share: the channel carries `{"mac": <hex HMAC-SHA256 of body under the secret>, "body": <the announcement
 * as JSON text>}` (RFC 2104; the MAC covers the exact bytes of `body`, so no canonical form is needed). The
 * body holds `sentAt` (Unix ms): an announcement older than {@link MAX_AGE_MS}, or not newer than the last
 * one applied from its origin, is a replay and is refused.
 */

/** The shortest secret accepted, in bytes (UTF-8). */
export const MIN_SECRET_BYTES = 16;

/** How old (or how far ahead, for clock skew) an announcement may be, in ms. */
export const MAX_AGE_MS = 5 * 60_000;

/** Origins whose last announcement time is remembered (the oldest is forgotten past this). */
const MAX_ORIGINS = 1024;

export type { RefusalReason };

/** @throws SluiceError INVALID_ARGUMENT naming `what` when the secret is shorter than MIN_SECRET_BYTES. */
export function checkSecret(secret: string, what: string): string {
  if (Buffer.byteLength(secret) < MIN_SECRET_BYTES) throw usage(`${what}: must be at least ${MIN_SECRET_BYTES} bytes`, what);
  return secret;
}

/** Signs and verifies announcements under one secret; remembers each origin's last time to refuse replays. */
export class AnnouncementSigner {
  private readonly lastSeen = new Map<string, number>();
  private lastSent = 0;

  constructor(private readonly secret: string) {}

  /** The channel message for `body` (an object with `origin`; `sentAt` is added, increasing from call to call). */
  sign(body: { origin: string } & Record<string, unknown>, nowMs = Date.now()): string {
    this.lastSent = Math.max(nowMs, this.lastSent + 1);
    const text = JSON.stringify({ ...body, sentAt: this.lastSent });
    return JSON.stringify({ mac: this.mac(text), body: text });
  }

  /**
   * The announcement a channel message carries, if its MAC is right and it is not a replay; else why not.
   * An accepted one becomes its origin's latest.
   */
  open(message: string, nowMs = Date.now()): { ok: true; body: Record<string, unknown> } | { ok: false; reason: RefusalReason } {
    let env: unknown;
    try {
      env = JSON.parse(message);
    } catch {
      return { ok: false, reason: 'malformed' };
    }
    if (typeof env !== 'object' || env === null) return { ok: false, reason: 'malformed' };
    const { mac, body } = env as { mac?: unknown; body?: unknown };
    if (typeof mac !== 'string' || typeof body !== 'string') return { ok: false, reason: 'unsigned' };
    const want = Buffer.from(this.mac(body), 'hex');
    const got = Buffer.from(mac, 'hex');
    if (got.length !== want.length || !timingSafeEqual(got, want)) return { ok: false, reason: 'bad_mac' };
    let b: unknown;
    try {
      b = JSON.parse(body);
    } catch {
      return { ok: false, reason: 'malformed' };
    }
    if (typeof b !== 'object' || b === null) return { ok: false, reason: 'malformed' };
    const { origin, sentAt } = b as { origin?: unknown; sentAt?: unknown };
    if (typeof origin !== 'string' || typeof sentAt !== 'number') return { ok: false, reason: 'malformed' };
    if (Math.abs(nowMs - sentAt) > MAX_AGE_MS || sentAt <= (this.lastSeen.get(origin) ?? -Infinity)) return { ok: false, reason: 'replayed' };
    this.lastSeen.delete(origin);
    this.lastSeen.set(origin, sentAt);
    if (this.lastSeen.size > MAX_ORIGINS) this.lastSeen.delete(this.lastSeen.keys().next().value!);
    return { ok: true, body: b as Record<string, unknown> };
  }

  private mac(text: string): string {
    return createHmac('sha256', this.secret).update(text).digest('hex');
  }
}
