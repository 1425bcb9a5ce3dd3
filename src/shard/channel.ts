/**
 * A synchronous channel from a front thread to a shard: shared memory and `Atomics`, no message and no promise.
 *
 * Why: uWebSockets.js closes a connection on which a pipelined request arrives while an earlier answer is
 * pending ("async pipelining is not supported", uNetworking/uWebSockets#1395), so an HTTP check that leaves
 * uWS's callback unanswered loses every request pipelined behind it. Through this channel a front thread
 * decides a check on the shard that owns its key and answers inside the callback, as it does with no shards.
 *
 * One channel per (front thread, shard): a front thread has at most one call in flight on it, so a channel
 * needs no queue and no lock, only a state word. A shard has one doorbell for all its channels: a front writes
 * its legs, sets its channel's state to REQUEST, rings (increments) the shard's doorbell and sleeps in
 * `Atomics.wait` on its state; the shard worker, which waits for its doorbell with `Atomics.waitAsync` between
 * its other tasks (so piscina's batches still reach it), claims each channel in REQUEST (→ BUSY), decides its
 * legs on its kernel, writes the output rows and sets DONE (a CAS from BUSY, so an answer given up by the front
 * is dropped), then wakes the front.
 *
 * Key states (the states `onStoreError: local` starts a strict key from: LocalDecider.seed) do not go through
 * a channel: they ride in the batch on the worker's queue that decides their keys (ShardTask.states), so a
 * shard stalled in a batch does not hold the front thread, which a call here would sleep on until the worker
 * is between tasks.
 *
 * Limits. A call is decided only by a kernel that holds every limit of the policy set in force: a reload sets
 * its new limits on every shard through thread 0's channel ({@link ShardLink.install}, a call of its own kind,
 * answered once the kernel holds them) before any check can name them, and the pool then publishes the set's
 * limits generation in {@link ChannelMemory.limitsGen}. A shard whose kernel is older than the generation
 * published (a worker restarted from start-up data made before the last reload) leaves decide calls waiting,
 * from every front thread, until an install brings it up to date: a call never reaches a kernel that lacks a
 * limit id it names, or holds it under other numbers, whichever path or thread sends it.
 *
 * Layout of a channel's SharedArrayBuffer: CONTROL_BYTES of Int32 control words, then f64s: the batch's clock
 * (Unix ms), its sync sequence number and ack (0 without sync policies), the limits generation of an install,
 * maxLegs input rows (LEG_IN f64s) and maxLegs output rows (LEG_OUT f64s), the kernel's row layouts
 * (src/shard/abi.ts). An install carries its limits as UTF-8 JSON in the input rows' bytes.
 */
import { LEG_IN, LEG_OUT } from './abi.js';
import { overloaded, shardFailed, type SluiceError } from '../util/errors.js';

/**
 * The states of a channel's STATE word: a call is REQUEST (to decide legs) or INSTALL (to set limits) until
 * claimed. (5 was STATES, key states set through a channel: they ride in a shard's batch now.)
 */
export const IDLE = 0;
export const REQUEST = 1;
export const BUSY = 2;
export const DONE = 3;
export const INSTALL = 4;

/** Int32 control words: the state, the number of legs (an install: of bytes), and 1 when the shard failed to decide the call. */
const STATE = 0;
const LEGS = 1;
const FAILED = 2;
const CONTROL_BYTES = 64;
/** f64 header slots after the control words. */
const NOW = 0;
const SEQ = 1;
const ACK = 2;
/** An install's limits generation. */
const GEN = 3;
const HEADER = 4;

// No spinning before a sleep, on either side: measured on this project's shared 2-core machine, polling the
// state word or the doorbell for 200-20,000 loads before Atomics.wait made a call 2-50x slower under load
// (the spinning thread took the core the other side needed), and a call is ~16-50 µs without it.

/** Int32 slots between two shards' doorbells (64 bytes: each on its own cache line). */
const BELL_STRIDE = 16;

/**
 * Longest a front thread sleeps on a synchronous call to a shard (src/shard/channel.ts), in ms. A shard serves
 * calls between its batches, each a few ms at most; past this it is stalled, and the check answers 503.
 */
export const CHANNEL_TIMEOUT_MS = 1000;

/**
 * Legs one call carries (32 KiB of input and of output rows per channel): a check has at most MAX_GROUP (16);
 * a larger batch is sent in calls of this many.
 */
export const CHANNEL_LEGS = 1024;

/** The shared memory of every channel of a pool: what a shard worker is started with (ShardInit.channels). */
export interface ChannelMemory {
  /** One doorbell per shard, {@link BELL_STRIDE} Int32s apart. */
  bells: SharedArrayBuffer;
  /** `byShard[s][t]`: the channel from front thread t to shard s (thread 0: the limiter's own). */
  byShard: SharedArrayBuffer[][];
  /** Legs a channel holds per call. */
  maxLegs: number;
  /**
   * One Int32: the limits generation of the policy set in force (ShardPool.installLimits publishes it once
   * every shard that is up holds its limits); a shard decides no call while its kernel is older.
   */
  limitsGen: SharedArrayBuffer;
}

/** Allocates the channels from `threads` front threads to each of `shards` shards, `maxLegs` legs per call. */
export function channelMemory(shards: number, threads: number, maxLegs: number): ChannelMemory {
  const bytes = CONTROL_BYTES + 8 * (HEADER + maxLegs * (LEG_IN + LEG_OUT));
  return {
    bells: new SharedArrayBuffer(4 * BELL_STRIDE * Math.max(1, shards)),
    byShard: Array.from({ length: shards }, () => Array.from({ length: threads }, () => new SharedArrayBuffer(bytes))),
    maxLegs,
    limitsGen: new SharedArrayBuffer(4),
  };
}

/** Views of one channel's memory. */
class Views {
  readonly ctl: Int32Array;
  readonly head: Float64Array;
  /** Input rows: the front writes them, the shard reads them. */
  readonly legs: Float64Array;
  /** The input rows' bytes: an install's JSON. */
  readonly bytes: Uint8Array;
  /** Output rows: the shard writes them, the front reads them. */
  readonly out: Float64Array;
  constructor(sab: SharedArrayBuffer, maxLegs: number) {
    this.ctl = new Int32Array(sab, 0, CONTROL_BYTES / 4);
    this.head = new Float64Array(sab, CONTROL_BYTES, HEADER);
    this.legs = new Float64Array(sab, CONTROL_BYTES + 8 * HEADER, maxLegs * LEG_IN);
    this.bytes = new Uint8Array(sab, CONTROL_BYTES + 8 * HEADER, maxLegs * LEG_IN * 8);
    this.out = new Float64Array(sab, CONTROL_BYTES + 8 * (HEADER + maxLegs * LEG_IN), maxLegs * LEG_OUT);
  }
}

/** What a call on a channel came to: answered (the output rows are in `out`), or why not. */
export type CallResult = 'done' | 'failed' | 'timeout' | 'busy';

/**
 * The front thread's end of its channel to one shard. Write the call's legs into {@link legs}, then
 * {@link call}; on 'done' the output rows are in {@link out} until the next call.
 */
export class ShardLink {
  private readonly v: Views;
  private readonly bells: Int32Array;
  private readonly bell: number;
  readonly legs: Float64Array;
  readonly out: Float64Array;
  readonly maxLegs: number;

  constructor(mem: ChannelMemory, shard: number, thread: number) {
    this.v = new Views(mem.byShard[shard][thread], mem.maxLegs);
    this.bells = new Int32Array(mem.bells);
    this.bell = shard * BELL_STRIDE;
    this.legs = this.v.legs;
    this.out = this.v.out;
    this.maxLegs = mem.maxLegs;
  }

  /**
   * Asks the shard to decide legs [0, n) of {@link legs} at `now` and sleeps until it has, at most `timeoutMs`.
   * 'timeout': the shard did not take the call in time, which is withdrawn (nothing was decided). 'busy': the
   * shard took the call (or an earlier one given up) and has not finished it: its answer will be dropped, and
   * the legs may have been decided; the channel is usable again once the shard is done. 'failed': the shard's
   * kernel threw on the call.
   */
  call(n: number, now: number, seq: number, ack: number, timeoutMs: number): CallResult {
    const head = this.v.head;
    if (!this.ready()) return 'busy';
    head[NOW] = now;
    head[SEQ] = seq;
    head[ACK] = ack;
    return this.ring(REQUEST, n, timeoutMs);
  }

  /** Bytes one {@link install} carries. */
  get installBytes(): number {
    return this.v.bytes.length;
  }

  /**
   * Has the shard set the limits `json` holds (a JSON array of `{ id, limit }`, at most {@link installBytes}
   * bytes as UTF-8) on its kernel, whose limits are then of generation `gen`; sleeps until it has, at most
   * `timeoutMs`. The shard takes an install whatever its generation, ahead of the decide calls waiting. The
   * results are {@link call}'s; 'done' means the kernel holds the limits.
   * @throws RangeError when `json` does not fit.
   */
  install(json: string, gen: number, timeoutMs: number): CallResult {
    if (!this.ready()) return 'busy';
    const { read, written } = new TextEncoder().encodeInto(json, this.v.bytes);
    if (read !== json.length) throw new RangeError(`an install of ${json.length} characters does not fit in a channel's ${this.v.bytes.length} bytes`);
    this.v.head[GEN] = gen;
    return this.ring(INSTALL, written, timeoutMs);
  }

  /** True when the channel is free for a call: idle, or holding the answer of a call given up earlier (dropped). */
  private ready(): boolean {
    const ctl = this.v.ctl;
    const state = Atomics.load(ctl, STATE);
    if (state === DONE) Atomics.store(ctl, STATE, IDLE);
    return state === IDLE || state === DONE;
  }

  /**
   * Hands the call written into the channel (`request`: REQUEST or INSTALL, of `n` legs or bytes) to the shard
   * and sleeps until it answers.
   */
  private ring(request: number, n: number, timeoutMs: number): CallResult {
    const ctl = this.v.ctl;
    Atomics.store(ctl, LEGS, n);
    Atomics.store(ctl, STATE, request);
    Atomics.add(this.bells, this.bell, 1);
    Atomics.notify(this.bells, this.bell, 1);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = Atomics.load(ctl, STATE);
      if (s === DONE) {
        Atomics.store(ctl, STATE, IDLE);
        return Atomics.load(ctl, FAILED) === 0 ? 'done' : 'failed';
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        // withdraw the call if the shard has not claimed it; if it has, its answer is left to be dropped
        return Atomics.compareExchange(ctl, STATE, request, IDLE) === request ? 'timeout' : 'busy';
      }
      Atomics.wait(ctl, STATE, s, left);
    }
  }
}

/**
 * Why a call on shard `s`'s channel came to `r` (not 'done'), while `doing` it ('deciding', 'setting key
 * states'): OVERLOADED when the shard did not take it in time (nothing done), else SHARD_FAILED.
 */
export function channelError(s: number, r: Exclude<CallResult, 'done'>, doing: string): SluiceError {
  if (r === 'timeout') return overloaded(`shard ${s} did not answer within ${CHANNEL_TIMEOUT_MS} ms`);
  if (r === 'failed') return shardFailed(`shard ${s} failed while ${doing}`);
  return shardFailed(`shard ${s} is still deciding an earlier call (stalled for more than ${CHANNEL_TIMEOUT_MS} ms)`);
}

/** `Atomics.waitAsync` (ES2024; in Node since 16), which this project's TypeScript lib does not declare yet. */
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, i: number, v: number): { async: false; value: string } | { async: true; value: Promise<string> };
}).waitAsync;

/** Decides one call's legs: the shard worker's kernel, and its sync admissions log. */
export type Decide = (legs: Float64Array, n: number, now: number, seq: number, ack: number, out: Float64Array) => void;

/** Sets the limits of an install (the parsed JSON array of `{ id, limit }`) on the shard worker's kernel. */
export type Install = (limits: unknown) => void;

/**
 * The shard's end: serves every channel of shard `shard` (from any front thread) whenever its doorbell rings,
 * between the worker's other tasks, until the thread ends. Never blocks the worker's event loop. `gen` is the
 * limits generation of the kernel's start-up limits: decide calls wait while the generation published in
 * {@link ChannelMemory.limitsGen} is newer, until an install brings the kernel to it.
 */
export function serveChannels(mem: ChannelMemory, shard: number, decide: Decide, install: Install, gen: number): void {
  const bells = new Int32Array(mem.bells);
  const bell = shard * BELL_STRIDE;
  const published = new Int32Array(mem.limitsGen);
  const views = mem.byShard[shard].map((sab) => new Views(sab, mem.maxLegs));
  const decoder = new TextDecoder();
  // A call left BUSY is a dead predecessor's (a shard has one worker at a time): answer it as failed, so its
  // caller (or the next one on that channel) is not refused as 'busy' for ever.
  for (const v of views) {
    if (Atomics.load(v.ctl, STATE) !== BUSY) continue;
    Atomics.store(v.ctl, FAILED, 1);
    if (Atomics.compareExchange(v.ctl, STATE, BUSY, DONE) === BUSY) Atomics.notify(v.ctl, STATE);
  }
  /** Claims and answers each call waiting on a channel in state `request` (REQUEST or INSTALL). */
  const answer = (request: number): void => {
    for (const v of views) {
      if (Atomics.compareExchange(v.ctl, STATE, request, BUSY) !== request) continue;
      const n = Atomics.load(v.ctl, LEGS);
      let failed = 0;
      try {
        if (request === INSTALL) {
          // a copy: TextDecoder does not read shared memory
          install(JSON.parse(decoder.decode(v.bytes.slice(0, n))));
          if (v.head[GEN] > gen) gen = v.head[GEN];
        } else {
          decide(v.legs, n, v.head[NOW], v.head[SEQ], v.head[ACK], v.out);
        }
      } catch {
        failed = 1; // the front answers SHARD_FAILED; the worker goes on serving
      }
      Atomics.store(v.ctl, FAILED, failed);
      if (Atomics.compareExchange(v.ctl, STATE, BUSY, DONE) === BUSY) Atomics.notify(v.ctl, STATE);
    }
  };
  const serve = (): void => {
    for (;;) {
      const rung = Atomics.load(bells, bell);
      // installs first: a decide call waiting behind one may name its limits
      answer(INSTALL);
      // a kernel older than the set in force decides nothing: its calls wait for the install that is due
      if (gen >= Atomics.load(published, 0)) {
        answer(REQUEST);
      }
      const w = waitAsync(bells, bell, rung);
      // rung again while this pass ran: serve again at once
      if (w.async) {
        void w.value.then(serve);
        return;
      }
    }
  };
  serve();
}
