/** Policy reloads: what one did, what started it, and why a peer's announcement was refused. */

/** What a reload did: the new set's version and the policy names it added, removed and changed. */
export interface ReloadResult {
  version: string;
  added: string[];
  removed: string[];
  changed: string[];
}

/** What started a reload: `file` (the watch), `signal` (SIGHUP), `api` (the admin API), `peer` (pub/sub). */
export type ReloadSource = 'file' | 'signal' | 'api' | 'peer';

/**
 * Why a policy announcement from the Redis channel was refused before it was read (src/reload/announce.ts;
 * the `reason` of `sluice_policy_announcements_refused_total`).
 */
export type RefusalReason = 'malformed' | 'unsigned' | 'bad_mac' | 'replayed';
