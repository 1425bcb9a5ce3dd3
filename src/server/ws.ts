/**
 * `/v1/stream`: decisions streamed over one WebSocket (uWebSockets.js). This file is the route: it builds the
 * stream's parts and hands them uWS's events. Each part has one job:
 * - stream/conn.ts: connections, their answers and queues, backpressure (the pump);
 * - stream/json-frames.ts: text frames (JSON checks and unsubscribes), plain ones decided through the batch
 *   path as binary ones are (src/wire/json-stream.ts reads them and builds the answers);
 * - stream/binary-frames.ts: binary frames (src/wire/binary-format.ts), decided through the engine's batch path;
 * - stream/subscriptions.ts: one-shot pushes at a denied check's retry time (re-armed by the engine's rule,
 *   src/engine/ready-after.ts), within the instance bounds of stream/sub-schedule.ts;
 * - stream/options.ts and stream/state.ts: the options, counters and close codes; the connection's state.
 *
 * Each check gets exactly one answer, carrying its id, in the encoding it came in; answers may arrive out of
 * order and several may share a frame (a text frame from the server is one answer object or an array). Bad
 * input gets an error answer (with the id when it can be read) and the connection stays open; a frame over
 * `maxFrameBytes` or `maxChecksPerFrame` closes it with 1009, a binary frame of another version or type with 1002.
 */
import uWS from 'uWebSockets.js';
import type { TemplatedApp } from 'uWebSockets.js';
import type { Logger } from 'pino';
import type { Limiter } from '../types.js';
import type { CheckBatch } from '../engine/batch.js';
import { engineOf } from '../engine/handle.js';
import { ReadyAfter } from '../engine/ready-after.js';
import { BinSeg, JsonSeg, newConn, type Conn } from './stream/state.js';
import { OutcomePool } from './stream/outcomes.js';
import { StreamConnections } from './stream/conn.js';
import { JsonFrames } from './stream/json-frames.js';
import { BinaryFrames } from './stream/binary-frames.js';
import { Subscriptions } from './stream/subscriptions.js';
import {
  CLOSE_TOO_BIG, STREAM_SUBPROTOCOL, streamBounds, type StreamEndpoint, type StreamEngine, type StreamOptions, type StreamStats,
} from './stream/options.js';

export {
  CLOSE_GOING_AWAY, CLOSE_INTERNAL_ERROR, CLOSE_POLICY_VIOLATION, CLOSE_PROTOCOL_ERROR, CLOSE_TOO_BIG, STREAM_SUBPROTOCOL,
  type StreamEndpoint, type StreamEngine, type StreamOptions, type StreamStats,
} from './stream/options.js';

/**
 * Registers `/v1/stream` on a uWS app (call before listen) and returns its endpoint.
 * @throws RangeError on an option that is not a positive integer (or 0 where allowed).
 */
export function registerStream(app: TemplatedApp, limiter: Limiter, options: StreamOptions = {}, log?: Logger, engine?: StreamEngine): StreamEndpoint {
  const o = streamBounds(options);
  const clock = options.clock ?? Date.now;
  // Binary checks are decided a batch at a time: through the bare limiter's batch path (Front.checkBatch: no
  // promise or object per check with shards 0, one promise per batch otherwise), counted per batch in the
  // server's metrics. Without it (no engine given, or a Limiter of another make), through check() per check.
  const metrics = engine?.metrics ?? null;
  const decider: Limiter = engine?.raw ?? limiter;
  const batch: CheckBatch = (engine === undefined ? undefined : engineOf(decider)?.checkBatch)
    ?? ((src, from, to, out) => {
      const all: Array<Promise<void>> = [];
      for (let i = from; i < to; i++) {
        const at = i - from;
        all.push(decider.check({ policy: src.policies[i], key: src.key(i), cost: src.costs[i] })
          .then((d) => out.put(at, d), (e: unknown) => out.fail(at, e as Error)));
      }
      return Promise.all(all).then(() => undefined);
    });

  const conns = new StreamConnections(o, {
    item: (c, it) => json.decide(c, it),
    segment: (c, seg, from, to) => {
      if (seg instanceof BinSeg) binary.decideRun(c, seg, from, to);
      else json.decideRun(c, seg as JsonSeg, from, to);
    },
  }, log);
  const subs = new Subscriptions(o, clock, limiter, conns, new ReadyAfter(() => limiter.policies));
  // onLimit: delay's wait places, freed by held answers whose connection closes (src/server/held.ts)
  const places = engineOf(decider)?.delays ?? null;
  const outcomes = new OutcomePool();
  const json = new JsonFrames(o, conns, subs, limiter, batch, metrics, outcomes, places, log);
  const binary = new BinaryFrames(o, conns, subs, batch, metrics, outcomes, places, log);

  app.ws<Conn>('/v1/stream', {
    // uWS drops a frame over its own limit without a close frame (the client sees 1006); frames between
    // maxFrameBytes and twice that reach the handler and get a proper 1009.
    maxPayloadLength: o.maxFrameBytes * 2,
    maxBackpressure: o.maxBufferedBytes + 4096, // room for the close frame of a connection closed at the limit
    idleTimeout: o.idleTimeoutSeconds,
    sendPingsAutomatically: true,
    compression: uWS.DISABLED,
    upgrade: (res, req, context) => {
      if (conns.closing) {
        res.writeStatus('503 Service Unavailable').writeHeader('Retry-After', '1').end();
        return;
      }
      const offered = req.getHeader('sec-websocket-protocol');
      const protocol = offered.split(',').some((p) => p.trim() === STREAM_SUBPROTOCOL) ? STREAM_SUBPROTOCOL : '';
      res.upgrade(newConn(), req.getHeader('sec-websocket-key'), protocol, req.getHeader('sec-websocket-extensions'), context);
    },
    open: (ws) => {
      const c = ws.getUserData();
      c.ws = ws;
      conns.opened(c);
    },
    message: (ws, data, isBinary) => {
      const c = ws.getUserData();
      if (data.byteLength > o.maxFrameBytes) {
        conns.closedTooBig++;
        return conns.end(c, CLOSE_TOO_BIG, `frame: larger than ${o.maxFrameBytes} bytes`);
      }
      if (isBinary) binary.onBinary(c, data);
      else json.onText(c, data);
      conns.pump(c);
    },
    drain: (ws) => {
      const c = ws.getUserData();
      if (c.paused && ws.getBufferedAmount() < o.lowWaterBytes) {
        c.paused = false;
        conns.pump(c);
      }
    },
    close: (ws) => {
      const c = ws.getUserData();
      conns.dropped(c);
      subs.dropAll(c);
      c.held?.cancelAll();
    },
  });

  // A plain request (no Upgrade) on the stream's path.
  app.any('/v1/stream', (res) => {
    res.cork(() => {
      res.writeStatus('426 Upgrade Required').writeHeader('Upgrade', 'websocket').writeHeader('Content-Type', 'application/problem+json')
        .end(JSON.stringify({
          type: 'about:blank', title: 'Upgrade Required', status: 426,
          detail: 'upgrade: /v1/stream is a WebSocket endpoint (send Upgrade: websocket)', field: 'upgrade',
        }));
    });
  });

  return {
    tick: () => subs.tick(),
    stats: (): StreamStats => {
      const { paused, queued } = conns.load();
      return {
        connections: conns.conns.size, paused, queued, inFlight: conns.inFlightTotal, subscriptions: subs.count, answered: conns.answered,
        pushed: subs.pushed, subscriptionsRefused: subs.bounds.refused, deferredTicks: subs.bounds.deferredTicks,
        closedBackpressure: conns.closedBackpressure, closedTooBig: conns.closedTooBig, closedProtocol: conns.closedProtocol,
      };
    },
    async close(): Promise<void> {
      if (conns.closing) return;
      subs.stop();
      await conns.close();
    },
  };
}
