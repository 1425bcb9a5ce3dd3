/**
 * Hot reload of the policy set in a running service (`sluice serve`):
 *
 * - **the policies file**: its directory is watched (node:fs `watch`), so an editor's write-to-temp-then-rename
 *   and a Kubernetes ConfigMap's symlink swap (`..data` renamed over) are seen as well as a write in place.
 *   Events are debounced; the file is then read again and its content hash compared with the last one read,
 *   so a change that leaves the bytes as they were (or a burst of events for one save) reloads nothing.
 * - **SIGHUP**: reads the file again and applies it.
 * - **{@link PolicyReloader.apply}**: a document or YAML text from elsewhere (the admin API's `PUT /v1/policies`).
 * - **peers**: with Redis and an announce secret configured, every successful local reload is announced on
 *   the pub/sub channel `<prefix>policies` as `{"origin": <instance id>, "version": <policy-set version>,
 *   "policies": <the document's policies mapping, as plain JSON>}`, signed (src/reload/announce.ts: an HMAC
 *   under the shared secret, with its time); authenticated announcements from other instances are validated
 *   and applied like a file (never re-announced, so there are no loops). Unsigned, forged or replayed ones
 *   are refused, counted and logged. Without a secret, announcements are off both ways: anyone who can
 *   PUBLISH on the Redis must not be able to rewrite the policies. Each announcement is also kept on the
 *   channel for 5 minutes (`<prefix>policies:kept`), and an instance whose subscriber reconnects reads it,
 *   so a reload announced while it was away reaches it too. Of two announced sets, the one made later wins
 *   (`madeAt`: when the reload was made, by its maker's clock, and always after the set it replaced): an
 *   older one heard late, kept, or re-sent after an outage is not applied.
 *
 * A document is validated by the config loader (the same messages as at start-up) and applied by
 * `limiter.reload`, which swaps the set atomically. An invalid one is logged
 * (`policy reload rejected`, with the reason) and the rules in force stay.
 */
import { createHash, randomBytes } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile, realpath } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import { parseConfig } from '../config/load.js';
import { configFromDocument, type SluiceConfig } from '../config/schema.js';
import { policySetVersion } from '../config/policy-version.js';
import type { Limiter } from '../types.js';
import type { ReloadResult, ReloadSource } from '../types/reload.js';
import type { PubSub, StoreChannel } from '../store/contract.js';
import { SluiceError, isSluiceError, closed, configSourceError } from '../util/errors.js';
import { AnnouncementSigner, MAX_AGE_MS, checkSecret, type RefusalReason } from './announce.js';

export type { ReloadSource } from '../types/reload.js';

/** Where a reload counts its outcome (the server's metrics: `sluice_policy_reloads_total`). */
export interface ReloadCounter {
  reloaded(source: ReloadSource, result: 'ok' | 'rejected'): void;
  /** Counts an announcement refused before it was read (`sluice_policy_announcements_refused_total`). */
  announcementRefused?(reason: RefusalReason): void;
}

export interface PolicyReloaderOptions {
  /** The limiter whose policies are replaced (through `limiter.reload`). */
  limiter: Limiter;
  /** The policies file to watch and to read on SIGHUP; `null` or absent: no file (the built-in default). */
  file?: string | null;
  logger?: Logger;
  /** Counts each reload by source and result. */
  metrics?: ReloadCounter;
  /**
   * Where reloads are announced to other instances and theirs heard: the limiter's store (its `channel`,
   * src/store/contract.ts), as the composition root built it. Absent or `null`: this instance reloads alone.
   */
  pubsub?: PubSub | null;
  /**
   * The secret instances sign their announcements with (at least 16 bytes; the same on every instance).
   * Absent or `null`: this instance neither announces nor listens (it warns once at start when `redis` is set).
   */
  announceSecret?: string | null;
  /** Prefix of the pub/sub channel (`<prefix>policies`). Default `sluice:`, the store's key prefix. */
  prefix?: string;
  /** This instance's id in announcements. Default `<hostname>/<pid>/<8 random hex>`. */
  instanceId?: string;
  /** Quiet time after the last file event before the file is read, in ms. Default 100. */
  debounceMs?: number;
  /** The signal that reloads the file; `null`: none. Default `SIGHUP`. */
  signal?: NodeJS.Signals | null;
  /**
   * The configuration the process started with: a reloaded file whose `engine:` or `server:` section differs
   * from it gets a warning (those take effect at a restart; only `policies:` is reloaded).
   */
  startup?: SluiceConfig;
}

/** An announcement on the pub/sub channel. */
export interface PolicyAnnouncement {
  /** The announcing instance's id. */
  origin: string;
  /** The policy-set version it enforces since the reload. */
  version: string;
  /** The `policies:` mapping of the document it applied, as plain JSON. */
  policies: unknown;
  /**
   * When the reload was made (Unix ms, the announcing instance's clock, raised past the set it replaced): what
   * orders announced sets (the later wins). Sent again unchanged when a failed announcement is re-sent; the
   * signature's `sentAt` is per send (replay protection). Announcements without it are ordered by `sentAt`.
   */
  madeAt: number;
}

/** The result of {@link PolicyReloader.apply} when the document's rules are those in force already. */
const UNCHANGED = { added: [], removed: [], changed: [] };

/**
 * Watches the policies file, listens for SIGHUP and for other instances' announcements, and applies new
 * policy sets to the limiter. Create it after the limiter, {@link start} it once the server listens, and
 * {@link close} it before closing the limiter.
 */
export class PolicyReloader {
  /** This instance's id, the `origin` of its announcements. */
  readonly instanceId: string;
  /** The pub/sub channel (`<prefix>policies`). */
  readonly channel: string;
  private readonly limiter: Limiter;
  private readonly file: string | null;
  private readonly log: Logger | undefined;
  private readonly metrics: ReloadCounter | undefined;
  private readonly debounceMs: number;
  private readonly signal: NodeJS.Signals | null;
  private readonly startup: SluiceConfig | undefined;
  private readonly pubsub: PubSub | null;
  private watchers = new Map<string, FSWatcher>();
  private debounce: NodeJS.Timeout | null = null;
  private rewatch: NodeJS.Timeout | null = null;
  /** sha256 of the file content last read (applied, unchanged or rejected): the same bytes are not re-applied. */
  private lastHash: string | null = null;
  /** Reads of the file one after another: a read that started later never applies before an earlier one. */
  private reading: Promise<unknown> = Promise.resolve();
  private chan: StoreChannel | null = null;
  /** The last announcement that could not be published (Redis down), sent again when Redis is back. */
  private unsent: PolicyAnnouncement | null = null;
  /**
   * The `madeAt` (Unix ms, the maker's clock) of the set in force: this instance's own last reload, or the
   * peer's it accepted (raised when it is accepted, before it is applied, so that an older one heard meanwhile
   * is refused); while the startup set is in force, when this reloader was made (the file read at start is as
   * of then). An announcement made before it is older than the set in force and is not applied (the later
   * reload wins, by the makers' clocks): a kept one read after a reconnect does not undo a file this instance
   * started with after it was made (a rolling deploy). A reload made here is stamped past it, whatever this
   * clock says, so a peer whose clock runs ahead cannot make this instance's later reload look older.
   */
  private inForceAt = Date.now();
  /** The origin of the set in force ('' while the startup set is): it breaks ties of {@link inForceAt}. */
  private inForceBy = '';
  /** Peers' sets being applied, in the order they were accepted (see {@link heard}). */
  private peerApplies: Promise<void> = Promise.resolve();
  private onSignal: (() => void) | null = null;
  private readonly signer: AnnouncementSigner | null;
  /** Refusals since the last warning, and when (Date.now()) it was: at most one warning a second. */
  private refusedUnreported = 0;
  private refusedWarnedAt = 0;
  /** The `policies:` mapping in force, as plain data (see {@link document}). */
  private current: unknown;
  private closed = false;

  constructor(o: PolicyReloaderOptions) {
    this.limiter = o.limiter;
    this.file = o.file ?? null;
    this.log = o.logger;
    this.metrics = o.metrics;
    this.debounceMs = o.debounceMs ?? 100;
    this.signal = o.signal === undefined ? 'SIGHUP' : o.signal;
    this.startup = o.startup;
    this.pubsub = o.pubsub ?? null;
    this.instanceId = o.instanceId ?? `${os.hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`;
    this.channel = `${o.prefix ?? 'sluice:'}policies`;
    this.signer = o.announceSecret == null ? null : new AnnouncementSigner(checkSecret(o.announceSecret, 'announceSecret'));
    this.current = policiesOf(o.startup?.raw);
  }

  /**
   * The `policies:` mapping of the document in force, as plain data (JSON-safe): the start-up file's, then
   * that of each document applied since. `undefined` when the reloader was not given the start-up config and
   * has applied nothing. (A document whose rules were already in force does not replace it.)
   */
  get document(): unknown {
    return this.current;
  }

  /**
   * Starts watching the file, listening for the signal, and (with Redis) subscribing to the channel. The file
   * is read once now: its hash is the baseline, and if it no longer holds the rules in force (it changed
   * since the process loaded it) it is applied. Resolves when the subscription is made, or after at most
   * 2 s if Redis does not answer (ioredis keeps trying and subscribes when it connects).
   */
  async start(): Promise<void> {
    if (this.file !== null) {
      await this.watchDirs();
      await this.baseline();
    }
    if (this.signal !== null) {
      this.onSignal = () => void this.reloadFile('signal');
      process.on(this.signal, this.onSignal);
    }
    if (this.pubsub !== null && this.signer === null) {
      this.log?.warn({ channel: this.channel }, 'policy announcements are off (no announce secret): reloads are not shared with other instances, and theirs are not heard');
    } else if (this.pubsub !== null) {
      await this.connect(this.pubsub);
    }
  }

  /**
   * Validates a policies document and, when valid, makes it the policy set in force (`limiter.reload`:
   * checks issued before the call are decided under the old set, those after it under the new one). A
   * local reload (`file`, `signal`, `api`) is announced to other instances when Redis is configured; one from
   * a `peer` is not. Outcomes are logged and counted (`sluice_policy_reloads_total{source,result}`).
   *
   * Only the `policies:` section is applied; `engine:` and `server:` take effect at a restart (a warning is
   * logged when they differ from the start-up configuration).
   *
   * @param doc the document: YAML (or JSON) text of a whole policies file, or the parsed document as plain
   *   data (`{ policies: { <name>: <policy>, ... }, engine?, server? }`); anything else is a CONFIG error.
   * @param source what asked for the reload, for logs and metrics.
   * @param file the name error messages start with (default: the watched file's path for `file` and
   *   `signal`, else `<api>` or `<peer>`).
   * @returns the new version and the policy names added, removed and changed; all three empty when the
   *   document holds the rules already in force (nothing is reloaded or announced then).
   * @throws SluiceError CONFIG naming the document path and reason (`<file>: policies.free.period: ...`, or a
   *   transition the engine refuses, such as a pinned `version` on a Redis-backed policy whose numbers
   *   changed); the rules in force stay. CLOSED after {@link close} or once the limiter is closed.
   */
  async apply(doc: unknown, source: ReloadSource, file?: string): Promise<ReloadResult> {
    const name = file ?? (source === 'file' || source === 'signal' ? this.file ?? '<file>' : `<${source}>`);
    try {
      if (this.closed) throw closed('policy reloader');
      const config = typeof doc === 'string' ? parseConfig(doc, name) : configFromDocument(doc, name);
      const previous = this.limiter.version;
      const version = policySetVersion(config.policies);
      if (version === previous) {
        this.metrics?.reloaded(source, 'ok');
        this.log?.info({ source, file: name, version }, 'policies unchanged');
        return { version, ...UNCHANGED };
      }
      this.warnStartupOnly(config, name);
      const result = await this.limiter.reload(config.policies);
      this.current = policiesOf(config.raw);
      this.metrics?.reloaded(source, 'ok');
      this.log?.info({ source, file: name, version: result.version, previous, added: result.added, removed: result.removed, changed: result.changed }, 'policies reloaded');
      if (source !== 'peer') {
        this.inForceAt = Math.max(Date.now(), this.inForceAt + 1);
        this.inForceBy = this.instanceId;
        this.announce({ origin: this.instanceId, version: result.version, policies: policiesOf(config.raw), madeAt: this.inForceAt });
      }
      return result;
    } catch (e) {
      this.metrics?.reloaded(source, 'rejected');
      this.log?.error({ err: e, file: name, source }, 'policy reload rejected');
      throw isSluiceError(e) ? e : configSourceError(name, (e as Error).message);
    }
  }

  /**
   * Reads the policies file and applies it ({@link apply}). From the watch (`file`), content whose hash equals
   * the last read is skipped, and a missing file is only a warning (an editor's rename in progress); a signal
   * always applies, and a file it cannot read is a rejected reload. Never throws: the outcome is logged and
   * counted.
   * @returns the reload's result; `null` when skipped, rejected, or there is no file.
   */
  reloadFile(source: 'file' | 'signal'): Promise<ReloadResult | null> {
    const run = this.reading.then(async (): Promise<ReloadResult | null> => {
      if (this.closed) return null;
      if (this.file === null) {
        this.log?.info({ source }, 'no policies file to reload (the built-in default is in force)');
        return null;
      }
      let text: string;
      try {
        text = await readFile(this.file, 'utf8');
      } catch (e) {
        if (source === 'file' && (e as NodeJS.ErrnoException).code === 'ENOENT') {
          // Gone between an editor's rename and its write, or deleted: the watch reads it when it is back.
          this.log?.warn({ file: this.file }, 'policies file missing; the rules in force stay');
          return null;
        }
        this.metrics?.reloaded(source, 'rejected');
        this.log?.error({ err: configSourceError(this.file, `cannot read: ${(e as Error).message}`), file: this.file, source }, 'policy reload rejected');
        return null;
      }
      const hash = createHash('sha256').update(text).digest('hex');
      if (source === 'file' && hash === this.lastHash) return null;
      this.lastHash = hash;
      try {
        return await this.apply(text, source);
      } catch {
        return null; // logged and counted by apply
      }
    });
    this.reading = run;
    return run;
  }

  /**
   * The file as it is now becomes the baseline the watch compares with. The process loaded it moments ago, so
   * it normally holds the rules in force (nothing is applied or counted); if it changed since, it is applied.
   */
  private baseline(): Promise<unknown> {
    const run = this.reading.then(async () => {
      if (this.file === null) return;
      let text: string;
      try {
        text = await readFile(this.file, 'utf8');
      } catch {
        return; // gone for now: the watch reads it when it is back
      }
      this.lastHash = createHash('sha256').update(text).digest('hex');
      let version: string | null = null;
      try {
        version = policySetVersion(parseConfig(text, this.file).policies);
      } catch {
        // invalid now: apply() below logs why
      }
      if (version !== this.limiter.version) await this.apply(text, 'file').catch(() => undefined);
    });
    this.reading = run;
    return run;
  }

  /** Stops watching, listening and subscribing. Does not close the limiter. Safe to call more than once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.debounce) clearTimeout(this.debounce);
    if (this.rewatch) clearTimeout(this.rewatch);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    if (this.onSignal && this.signal) process.off(this.signal, this.onSignal);
    await this.reading.catch(() => undefined);
    const chan = this.chan;
    this.chan = null;
    await chan?.close();
  }

  // --------------------------------------------------------------------------------------------------------
  // The file watch
  // --------------------------------------------------------------------------------------------------------

  /**
   * Watches the file's directory and, when the file is a symlink into another directory (a ConfigMap's
   * `..data/policies.yaml`), that one too. Any event there schedules a read: the file's own name is not
   * enough, since a ConfigMap swap renames `..data`, not the file.
   */
  private async watchDirs(): Promise<void> {
    if (this.file === null || this.closed) return;
    const dirs = new Set([path.dirname(path.resolve(this.file))]);
    try {
      dirs.add(path.dirname(await realpath(this.file)));
    } catch {
      // the file is missing now: its directory is enough
    }
    for (const [dir, w] of this.watchers) {
      if (!dirs.has(dir)) {
        w.close();
        this.watchers.delete(dir);
      }
    }
    for (const dir of dirs) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = watch(dir, { persistent: false }, () => this.changed());
        w.on('error', (e) => this.watchFailed(dir, e));
        this.watchers.set(dir, w);
      } catch (e) {
        this.watchFailed(dir, e);
      }
    }
  }

  private watchFailed(dir: string, e: unknown): void {
    this.log?.warn({ err: e, dir }, 'cannot watch the policies directory; retrying in 1 s (SIGHUP still reloads)');
    this.watchers.get(dir)?.close();
    this.watchers.delete(dir);
    if (this.rewatch || this.closed) return;
    this.rewatch = setTimeout(() => {
      this.rewatch = null;
      void this.watchDirs().then(() => this.changed());
    }, 1000);
    this.rewatch.unref();
  }

  /** A file event: read after `debounceMs` of quiet. */
  private changed(): void {
    if (this.closed) return;
    if (this.debounce) clearTimeout(this.debounce);
    this.debounce = setTimeout(() => {
      this.debounce = null;
      // A symlink may now point into another directory (ConfigMap swap): follow it, then read.
      void this.watchDirs().then(() => this.reloadFile('file'));
    }, this.debounceMs);
    this.debounce.unref();
  }

  // --------------------------------------------------------------------------------------------------------
  // Announcements (Redis pub/sub)
  // --------------------------------------------------------------------------------------------------------

  private async connect(pubsub: PubSub): Promise<void> {
    const chan = (this.chan = pubsub.channel(this.channel, (message) => this.heard(message, false)));
    // a publish while the store is away fails at once (no offline queue): the last one is sent again when it is back
    chan.onReady(() => {
      const pending = this.unsent;
      if (pending !== null && pending.version === this.limiter.version) this.publish(pending);
    });
    // Pub/sub keeps nothing: what was announced while this instance's subscriber was away (a Redis restart, a
    // dropped connection) would be lost, and a peer's announcement sent again when Redis is back races this
    // subscriber's return. So every announcement is also kept on the channel (publish's keepMs), and read once
    // subscribed again.
    chan.onResubscribed((kept) => {
      if (kept !== null) this.heard(kept, true);
    });
    const subscribed = chan.subscribed.then(
      () => this.log?.info({ channel: this.channel, instance: this.instanceId }, 'listening for policy reloads'),
      (e: unknown) => this.log?.warn({ err: e, channel: this.channel }, 'policy channel: subscribe failed'),
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([subscribed, new Promise<void>((r) => { timer = setTimeout(r, 2000); })]);
    clearTimeout(timer);
  }

  private announce(a: PolicyAnnouncement): void {
    this.publish(a);
  }

  private publish(a: PolicyAnnouncement): void {
    const chan = this.chan;
    if (chan === null) return;
    this.unsent = a;
    const message = this.signer!.sign({ ...a });
    // kept as long as an announcement is accepted at all (MAX_AGE_MS): an instance away for longer does not
    // catch up (a SIGHUP or a restart reads its own file); a later-made set kept already stays
    chan.publish(message, { ms: MAX_AGE_MS, order: a.madeAt, tie: a.origin }).then((receivers) => {
      if (this.unsent === a) this.unsent = null;
      this.log?.info({ channel: this.channel, version: a.version, receivers }, 'policy reload announced');
    }, (e: unknown) => {
      this.log?.warn({ err: e, channel: this.channel, version: a.version }, 'policy reload not announced; will retry when Redis is back');
    });
  }

  /**
   * An announcement from the channel (`kept`: the channel's kept one, read after a reconnect): apply another
   * instance's set unless it is ours, already in force, or older than the set in force. A kept announcement
   * this instance heard already is not a replay attack, and is not counted as one.
   */
  private heard(message: string, kept: boolean): void {
    const opened = this.signer!.open(message);
    if (!opened.ok) {
      if (kept && opened.reason === 'replayed') return;
      return this.refused(opened.reason);
    }
    const a = opened.body as unknown as PolicyAnnouncement & { sentAt: number };
    if (typeof a.version !== 'string') return this.refused('malformed');
    if (a.origin === this.instanceId || this.closed) return;
    const madeAt = typeof a.madeAt === 'number' ? a.madeAt : a.sentAt;
    if (!madeAfter(madeAt, a.origin, this.inForceAt, this.inForceBy)) {
      if (a.version !== this.limiter.version) {
        this.log?.info({ origin: a.origin, announced: a.version, version: this.limiter.version }, 'a peer\'s policies set older than the one in force: not applied');
      }
      return;
    }
    // accepted: an older set heard while this one is applied is refused (above)
    this.inForceAt = madeAt;
    this.inForceBy = a.origin;
    // a set of ours not sent yet is older than this one (it was made no later than the set in force before):
    // it must not undo it when Redis is back
    this.unsent = null;
    if (a.version === this.limiter.version) return;
    // Peers' sets are applied one after another, and one overtaken by a later accepted set while it waited is
    // not applied at all: an older set never lands after a newer one.
    this.peerApplies = this.peerApplies.then(async () => {
      if (this.inForceAt !== madeAt || this.inForceBy !== a.origin || this.closed) return;
      const r = await this.apply({ policies: a.policies }, 'peer', `<peer ${a.origin}>`);
      if (r.version !== a.version) {
        this.log?.warn({ origin: a.origin, announced: a.version, version: r.version }, 'a peer\'s policies give another version here (a different sluice release?)');
      }
    }).catch(() => undefined); // logged and counted by apply
  }

  /** Counts a refused announcement, and warns at most once a second (a flood of them must not flood the log). */
  private refused(reason: RefusalReason): void {
    this.metrics?.announcementRefused?.(reason);
    this.refusedUnreported++;
    const now = Date.now();
    if (now - this.refusedWarnedAt < 1000) return;
    this.log?.warn({ channel: this.channel, reason, refused: this.refusedUnreported }, 'policy channel: announcement refused (unsigned, forged, replayed or malformed)');
    this.refusedUnreported = 0;
    this.refusedWarnedAt = now;
  }

  private warnStartupOnly(config: SluiceConfig, name: string): void {
    const s = this.startup;
    const raw = config.raw as Record<string, unknown> | null;
    if (s === undefined || typeof raw !== 'object' || raw === null) return;
    const differs = (['engine', 'server'] as const).filter((k) => raw[k] !== undefined && JSON.stringify(config[k]) !== JSON.stringify(s[k]));
    if (differs.length > 0) this.log?.warn({ file: name, sections: differs }, 'engine and server settings take effect at a restart; only policies were reloaded');
  }
}

/**
 * Whether a set made at `at` by `by` is later than one made at `thanAt` by `thanBy`: by time, then, for two made in
 * the same ms, by origin, compared byte by byte (as the kept announcement's script compares them), so every
 * instance and Redis pick the same one of two sets made at once.
 */
function madeAfter(at: number, by: string, thanAt: number, thanBy: string): boolean {
  return at > thanAt || (at === thanAt && Buffer.compare(Buffer.from(by), Buffer.from(thanBy)) > 0);
}

function policiesOf(raw: unknown): unknown {
  return typeof raw === 'object' && raw !== null ? (raw as { policies?: unknown }).policies : undefined;
}
