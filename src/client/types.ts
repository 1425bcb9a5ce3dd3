import type { CheckRequest, Decision } from '../types/decision.js';

/** A subscription push: the key now admits the cost that was denied. Numbers are from a peek (cost 0) at push time. */
export interface ReadyEvent {
  /** The binding limit's L (tokens per period). */
  limit: number;
  /** Tokens available now (at least the cost that was denied). */
  remaining: number;
  /** Ms until the binding limit is back to full. */
  resetAfterMs: number;
  /** The binding limit's name. */
  policy: string;
  /** True when the peek behind the push was not answered by Redis (a stall): decided by `degradedBy`. */
  degraded?: boolean;
  /** How it was decided then: the policy's onStoreError (`local`: this server's own kernel). */
  degradedBy?: 'open' | 'closed' | 'local';
}

/**
 * Called once per subscription: with the push when the denied key becomes admissible, or with an error when
 * the subscription ended without one (the connection dropped, the server failed the peek).
 */
export type ReadyCallback = (err: Error | null, ready?: ReadyEvent) => void;

export interface CheckOptions {
  /**
   * WebSocket transport only: if the check is denied with a finite wait, ask the server to push when the key
   * admits `cost` again; the callback gets that push (see {@link ReadyCallback}). The decision's `subscribed`
   * tells whether the server armed it. A subscription lives on one connection: a reconnect ends it with an error.
   */
  onReady?: ReadyCallback;
  /**
   * onLimit: delay: a check admitted with `delayMs` resolves once the delay has passed (default true), or at
   * once with `delayMs` when false (the caller waits). The server always answers the client at once; the
   * client waits, so a delay never runs into `timeoutMs`.
   */
  wait?: boolean;
}

/** A decision as the client returns it. */
export interface ClientDecision extends Decision {
  /** Set when the check asked to subscribe: whether the server armed a push. */
  subscribed?: boolean;
  /** Set on a denial answered by the client itself from an earlier denial's Retry-After, without a round trip. */
  local?: true;
}

/** One check the client holds until it is settled. */
export interface Pending {
  id: number;
  req: CheckRequest;
  resolve: (d: ClientDecision) => void;
  reject: (e: Error) => void;
  /** performance.now() after which it fails with TIMEOUT. */
  deadline: number;
  /** Times sent so far. */
  attempts: number;
  /** The connection generation it was last sent on; 0 while unsent. */
  sentOn: number;
  done: boolean;
  onReady: ReadyCallback | undefined;
}

/** What a transport does; the client adds the Retry-After cache on top. */
export interface Transport {
  check(req: CheckRequest, opts: CheckOptions | undefined): Promise<ClientDecision>;
  /** Resolves once the transport can send (WebSocket: open), or rejects when closed first. */
  connect(): Promise<void>;
  readonly connected: boolean;
  /** `RateLimit-Policy` for a policy, as the server last sent it (HTTP transport only). */
  rateLimitPolicy(policy: string): string | undefined;
  stats(): TransportStats;
  close(): Promise<void>;
}

export interface TransportStats {
  /** Checks not settled yet (queued or sent). */
  pending: number;
  /** Checks sent more than once (re-sent after a dropped connection or a 503). */
  resent: number;
  /** Connections opened (WebSocket) since creation. */
  connects: number;
  /** Armed subscriptions (WebSocket). */
  subscriptions: number;
}
