import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/paths.js';
import { calendarClock, type CalendarClock } from '../util/calendar.js';
import { HASH_IN, HASH_OUT, LEG_IN, LEG_OUT, STATE_ROW, STATUS } from './abi.js';
import type { KernelLimit } from './protocol.js';

/** The raw exports of build/kernel.wasm (assembly/index.ts). */
interface KernelExports {
  memory: WebAssembly.Memory;
  init(maxKeys: number, maxBatch: number, maxLimits: number, keyBytes: number, logKeys: number, logEntries: number): number;
  setLimit(id: number, algorithm: number, limit: number, period: number, burst: number, carry: number): number;
  setWindow(id: number, endMs: number): number;
  peekBatch(n: number): number;
  removeBatch(n: number): number;
  purgeLimit(id: number, nowMs: number): number;
  checkBatch(n: number, nowMs: number): number;
  hashBatch(n: number): void;
  setState(n: number, nowMs: number): number;
  legInPtr(): number;
  legOutPtr(): number;
  hashInPtr(): number;
  hashOutPtr(): number;
  keyPtr(): number;
  size(): number;
  slotCount(): number;
  evictions(): number;
  memoryBytes(): number;
  logBlocksUsed(): number;
  logBlockEntries(): number;
}

export { STATE_ROW };

/** Key text hashed per batch; a batch goes out early when it fills. */
const DEFAULT_KEY_BYTES = 1 << 20;

let compiled: WebAssembly.Module | undefined;

/** The kernel module, compiled once per thread; pass it to workers rather than recompiling. */
export function kernelModule(): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(readFileSync(join(packageRoot(), 'build', 'kernel.wasm')));
  return compiled;
}

export interface KernelOptions {
  /** Most keys held at once; past it the table evicts. */
  maxKeys: number;
  /** Most legs (and keys to hash) in one call. */
  maxBatch: number;
  /** Bytes of the region keys are hashed from; 0 for a kernel that only decides (a shard worker). Default 1 MiB. */
  keyBytes?: number;
  /** Limits by id (holes allowed: ids a reload retired keep their meaning, see {@link LIMIT_CAPACITY}). */
  limits: readonly (KernelLimit | undefined | null)[];
  /** Room for limit ids, to add more on reloads. Default max(limits.length, {@link LIMIT_CAPACITY}). */
  limitCapacity?: number;
  /**
   * Keys that can hold a sliding log at once (one arena block each, allocated at init; past it a sliding-log
   * key is evicted, idle ones first). Default min(maxKeys, {@link LOG_KEYS}).
   */
  logKeys?: number;
  /** Entries per sliding-log block (16 bytes each): a sliding_log limit needs min(limit, period ms) ≤ it. Default {@link LOG_ENTRIES}. */
  logEntries?: number;
}

/** Default sliding-log keys per kernel: 4,096 blocks of 64 entries = 4 MiB. */
export const LOG_KEYS = 4096;
/** Default entries per sliding-log key, the policy loader's bound (SLIDING_LOG_MAX_ENTRIES). */
export const LOG_ENTRIES = 64;
/** Bytes per sliding-log entry: [timestamp ms, count], two u64. */
export const LOG_ENTRY_BYTES = 16;

/** Limit ids a kernel has room for by default: 4,096 × 64 B = 256 KiB; a reload adds ids up to it. */
export const LIMIT_CAPACITY = 4096;
/** Most limit ids a kernel can hold: a slot stores its limit id in 16 bits. */
export const MAX_LIMIT_IDS = 65_535;

/** Most keys one kernel holds: 2^26 slots of 32 bytes fill half of wasm32's 4 GiB. */
export const MAX_KERNEL_KEYS = 2 ** 25;

/**
 * One kernel instance: its own linear memory and table. Views over the I/O regions are made once, after
 * `init` (the only time memory grows), so a batch costs one `set` in, one call, and reads out.
 */
export class Kernel {
  private readonly k: KernelExports;
  /** Leg input rows, LEG_IN f64s each; write a batch here, then call decide(). */
  readonly legIn: Float64Array;
  /** Leg output rows, LEG_OUT f64s each. */
  readonly legOut: Float64Array;
  /** Hash input rows: [byte offset, byte length, seedLo, seedHi]. */
  readonly hashIn: Uint32Array;
  /** Hash output rows: [hashLo, hashHi]. */
  readonly hashOut: Uint32Array;
  /** The key byte region, as a Buffer for `write(str, offset)` without a subarray per key. */
  readonly keyBytes: Buffer;

  constructor(module: WebAssembly.Module, opts: KernelOptions) {
    const instance = new WebAssembly.Instance(module, {
      env: { abort: () => { throw new Error('sluice kernel aborted'); } },
    });
    this.k = instance.exports as unknown as KernelExports;
    const k = this.k;
    const keyBytes = opts.keyBytes ?? DEFAULT_KEY_BYTES;
    if (!Number.isInteger(opts.maxKeys) || opts.maxKeys < 1 || opts.maxKeys > MAX_KERNEL_KEYS) {
      throw new RangeError(`sluice kernel: maxKeys must be an integer in [1, ${MAX_KERNEL_KEYS}] (got ${opts.maxKeys})`);
    }
    this.limitCapacity = Math.min(MAX_LIMIT_IDS, Math.max(1, opts.limits.length, opts.limitCapacity ?? LIMIT_CAPACITY));
    const logKeys = opts.logKeys ?? Math.min(opts.maxKeys, LOG_KEYS);
    status(k.init(opts.maxKeys, opts.maxBatch, this.limitCapacity, keyBytes, logKeys, opts.logEntries ?? LOG_ENTRIES), 'init', 0);
    opts.limits.forEach((l, id) => { if (l) this.setLimit(id, l); });
    const buf = k.memory.buffer;
    this.legIn = new Float64Array(buf, k.legInPtr(), opts.maxBatch * LEG_IN);
    this.legOut = new Float64Array(buf, k.legOutPtr(), opts.maxBatch * LEG_OUT);
    this.hashIn = new Uint32Array(buf, k.hashInPtr(), opts.maxBatch * HASH_IN);
    this.hashOut = new Uint32Array(buf, k.hashOutPtr(), opts.maxBatch * HASH_OUT);
    this.keyBytes = Buffer.from(buf, k.keyPtr(), keyBytes);
  }

  /** Limit ids this kernel has room for. */
  readonly limitCapacity: number;

  /**
   * Sets limit `id` (a new id: an id keeps one meaning for the kernel's life, or state made under old numbers
   * would be read under new ones).
   * @throws Error for an id past {@link limitCapacity} or a bad algorithm code.
   */
  setLimit(id: number, l: KernelLimit): void {
    const code = this.k.setLimit(id, l.algorithmCode, l.limit, l.periodMs, l.burst, l.carryOver ? 1 : 0);
    if (code !== STATUS.OK) {
      throw new Error(`sluice kernel: bad limit ${id} (room for ${this.limitCapacity}; a sliding_log needs min(limit, period) <= ${this.k.logBlockEntries()} entries)`);
    }
    // an id set again (a reload reusing a freed id, a restarted shard catching up) keeps one window clock
    const was = this.calendarIds.indexOf(id);
    if (was >= 0) {
      this.calendarIds.splice(was, 1);
      this.calendarClocks.splice(was, 1);
    }
    if (l.calendar) {
      this.calendarIds.push(id);
      this.calendarClocks.push(calendarClock(l.calendar));
      this.windowsFrom = 1; // empty range: the next decide sets every calendar limit's window
      this.windowsUntil = 0;
    }
  }

  /** Calendar limits by id, with the clocks of their windows. */
  private readonly calendarIds: number[] = [];
  private readonly calendarClocks: CalendarClock[] = [];
  /** [windowsFrom, windowsUntil): the times every calendar limit's window set in the kernel holds. */
  private windowsFrom = 1;
  private windowsUntil = 0;

  /** Sets each calendar limit's window to the one holding `now` (the kernel keeps its end, see setWindow). */
  private setWindows(now: number): void {
    let from = -Infinity, until = Infinity;
    for (let i = 0; i < this.calendarIds.length; i++) {
      const w = this.calendarClocks[i].at(now);
      this.k.setWindow(this.calendarIds[i], w.endMs);
      if (w.startMs > from) from = w.startMs;
      if (w.endMs < until) until = w.endMs;
    }
    this.windowsFrom = from;
    this.windowsUntil = until;
  }

  /**
   * Reads the state of legs [0, n) of `legIn` (hash and limit id) into `legOut` rows: [found (0/1), w0
   * (signed), w1, lastSeen (Unix ms)]. A key held under another limit id reads as not found. Changes nothing.
   */
  peek(n: number): void {
    status(this.k.peekBatch(n), 'batch', n);
  }

  /** Forgets the keys of legs [0, n) of `legIn` (by hash); returns how many were held. */
  remove(n: number): number {
    const removed = this.k.removeBatch(n);
    if (removed === STATUS.REMOVE_TOO_MANY) status(STATUS.TOO_MANY, 'batch', n);
    return removed;
  }

  /**
   * Removes every key under limit id `id` when none of them carries information at `nowMs` (returns 0: the
   * id can be reused), else changes nothing and returns how many still do. A full table scan.
   */
  purgeLimit(id: number, nowMs: number): number {
    return this.k.purgeLimit(id, nowMs);
  }

  /**
   * Decides legs [0, n) of `legIn` at `nowMs` (Unix ms, integral, < 2^48) into `legOut`. Calendar limits get
   * the window holding `nowMs` first, when it is not the one they have (once per window boundary).
   */
  decide(n: number, nowMs: number): void {
    if ((nowMs >= this.windowsUntil || nowMs < this.windowsFrom) && this.calendarIds.length > 0) this.setWindows(nowMs);
    status(this.k.checkBatch(n, nowMs), 'batch', n);
  }

  /**
   * Installs `n` states written into `legIn` as rows of {@link STATE_ROW} f64s: [hashLo, hashHi, limitId,
   * w0 (signed), w1, lastSeen]. Sync mode uses it to replace a key's state with the merged one.
   */
  setState(n: number, nowMs: number): void {
    status(this.k.setState(n, nowMs), 'states', n);
  }

  /** XXH64 of rows [0, n) of `hashIn` into `hashOut`. */
  hash(n: number): void {
    this.k.hashBatch(n);
  }

  /** Keys held, table slots, evictions since start, bytes of linear memory. */
  stats(): { keys: number; slots: number; evictions: number; memoryBytes: number } {
    const k = this.k;
    return { keys: k.size(), slots: k.slotCount(), evictions: k.evictions(), memoryBytes: k.memoryBytes() };
  }

  /** Sliding-log blocks in use (one per key holding a log) and entries per block. */
  logStats(): { blocksUsed: number; entriesPerBlock: number } {
    return { blocksUsed: this.k.logBlocksUsed(), entriesPerBlock: this.k.logBlockEntries() };
  }
}

/**
 * The kernel's status codes (./abi.ts STATUS) read in one place: OK returns; anything else is a bug in the
 * caller (a batch past the size it set up, init twice) and throws a plain Error, never a user-facing one.
 */
function status(code: number, call: 'init' | 'batch' | 'states', n: number): void {
  if (code === STATUS.OK) return;
  if (call === 'init') throw new Error(`sluice kernel: init failed (code ${code})`);
  if (call === 'states') throw new Error(`sluice kernel: ${n} states exceed the input region`);
  throw new Error(`sluice kernel: batch of ${n} exceeds its size`);
}
