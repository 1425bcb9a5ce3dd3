/**
 * `/v1/stream`'s options, counters and endpoint: the shapes the server and its tests see, and the bounds every
 * part of the stream reads (src/server/ws.ts wires the parts).
 */
import type { Limiter } from '../../types.js';
import type { ServerMetrics } from '../../metrics/registry.js';
import { SUBSCRIPTION_DEFAULTS, type SubscriptionBounds } from './sub-schedule.js';

/** WebSocket close codes sluice sends (RFC 6455 §7.4.1). */
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_PROTOCOL_ERROR = 1002;
export const CLOSE_POLICY_VIOLATION = 1008;
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_INTERNAL_ERROR = 1011;

/** The optional WebSocket subprotocol; a client that offers it gets it back. */
export const STREAM_SUBPROTOCOL = 'sluice.v1';

/** Limits of `/v1/stream`. Every bound is per connection unless it says otherwise. */
export interface StreamOptions {
  /** Largest frame in bytes; a larger one closes the connection with 1009. Default 1,048,576 (1 MiB). */
  maxFrameBytes?: number;
  /** Most checks in one frame (a JSON array or a binary batch); more closes with 1009. Default 4,096. */
  maxChecksPerFrame?: number;
  /** Most checks handed to the engine and not yet answered. Default 4,096. */
  maxInFlight?: number;
  /** Most checks received and waiting for the engine. Past it: OVERLOADED answers, or close 1008 while paused. Default 65,536. */
  maxQueued?: number;
  /** Stop processing a connection while its unsent output is above this many bytes. Default 1,048,576. */
  highWaterBytes?: number;
  /** Resume once a drain brings the unsent output under this many bytes. Default 262,144. */
  lowWaterBytes?: number;
  /** Unsent output beyond which uWS drops a message; sluice then closes with 1008. Default 8,388,608 (8 MiB). */
  maxBufferedBytes?: number;
  /** Most armed subscriptions; past it a check asking to subscribe is answered with `subscribed: false`. Default 1,024. */
  maxSubscriptions?: number;
  /** The instance-wide subscription bounds (src/server/stream/sub-schedule.ts). */
  maxInstanceSubscriptions?: SubscriptionBounds['maxInstanceSubscriptions'];
  maxFiresPerTick?: SubscriptionBounds['maxFiresPerTick'];
  /** Seconds without traffic before uWS closes the connection (it pings first). 0 disables. Default 120. */
  idleTimeoutSeconds?: number;
  /** Period of the subscription timer in ms. 0: no timer; call {@link StreamEndpoint.tick} yourself (tests). Default 10. */
  tickMs?: number;
  /** The limiter's clock (Unix-epoch ms), for subscription due times. Default Date.now (the limiter's default). */
  clock?: () => number;
}

/** Counters of `/v1/stream`, all connections together. */
export interface StreamStats {
  /** Open connections. */
  connections: number;
  /** Connections not being processed because their unsent output is above the high-water mark. */
  paused: number;
  /** Checks received and waiting for the engine. */
  queued: number;
  /** Checks handed to the engine and not answered yet. */
  inFlight: number;
  /** Armed subscriptions. */
  subscriptions: number;
  /** Checks answered (decisions and errors) since start. */
  answered: number;
  /** Subscription pushes sent since start. */
  pushed: number;
  /** Checks refused a subscription by `maxInstanceSubscriptions`, and ticks that spread a herd, since start. */
  subscriptionsRefused: number;
  deferredTicks: number;
  /** Connections closed for backpressure (1008), oversize frames (1009) and protocol violations (1002) since start. */
  closedBackpressure: number;
  closedTooBig: number;
  closedProtocol: number;
}

/** The `/v1/stream` endpoint of a server. */
export interface StreamEndpoint {
  stats(): StreamStats;
  /** Fires the subscriptions that are due by the clock. The timer calls it every `tickMs`; with `tickMs: 0`, call it yourself. */
  tick(): void;
  /**
   * Refuses new connections, answers queued checks with CLOSED, waits for the checks in flight to be answered,
   * then closes every connection with 1001. The HTTP server's close() calls it.
   */
  close(): Promise<void>;
}

/** What the server hands the stream besides the (instrumented) limiter: the bare limiter and the metrics it counts in. */
export interface StreamEngine {
  /** The limiter without the metrics wrapper; binary checks are counted per batch in `metrics` instead. */
  raw: Limiter;
  metrics: Pick<ServerMetrics, 'now' | 'tally' | 'failed' | 'observe' | 'activity'>;
}

const DEFAULTS = {
  maxFrameBytes: 1 << 20,
  maxChecksPerFrame: 4096,
  maxInFlight: 4096,
  maxQueued: 65_536,
  highWaterBytes: 1 << 20,
  lowWaterBytes: 256 << 10,
  maxBufferedBytes: 8 << 20,
  maxSubscriptions: 1024,
  ...SUBSCRIPTION_DEFAULTS,
  idleTimeoutSeconds: 120,
  tickMs: 10,
};

/** Every numeric bound of {@link StreamOptions}, defaults filled in and checked. */
export type StreamBounds = { readonly [K in keyof typeof DEFAULTS]: number };

/**
 * The options with their defaults, checked.
 * @throws RangeError on an option that is not a positive integer (or 0 where allowed), or a low-water mark above the high.
 */
export function streamBounds(options: StreamOptions): StreamBounds {
  const o: StreamBounds = { ...DEFAULTS, ...definedOnly(options) };
  for (const k of Object.keys(DEFAULTS) as Array<keyof typeof DEFAULTS>) {
    const v = o[k];
    const min = k === 'idleTimeoutSeconds' || k === 'tickMs' ? 0 : 1;
    if (!Number.isSafeInteger(v) || v < min) throw new RangeError(`stream.${k}: must be an integer ≥ ${min} (got ${String(v)})`);
  }
  if (o.lowWaterBytes > o.highWaterBytes) throw new RangeError('stream.lowWaterBytes: must not exceed highWaterBytes');
  return o;
}

function definedOnly<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined && k !== 'clock') (out as Record<string, unknown>)[k] = v;
  return out;
}
