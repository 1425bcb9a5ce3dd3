import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/paths.js';
import { LEG_IN, LEG_OUT, type KernelLimit } from './protocol.js';

/** The raw exports of build/kernel.wasm (assembly/index.ts). */
interface KernelExports {
  memory: WebAssembly.Memory;
  init(maxKeys: number, maxBatch: number, maxLimits: number, keyBytes: number): number;
  setLimit(id: number, algorithm: number, limit: number, period: number, burst: number, carry: number): number;
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
}

/** f64s per row of Kernel.setState's input. */
export const STATE_ROW = 6;

/** Longest key, in bytes of UTF-8. */
export const MAX_KEY_BYTES = 1024;
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
}

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
    const code = k.init(opts.maxKeys, opts.maxBatch, this.limitCapacity, keyBytes);
    if (code !== 0) throw new Error(`sluice kernel: init failed (code ${code})`);
    opts.limits.forEach((l, id) => { if (l) this.setLimit(id, l); });
    const buf = k.memory.buffer;
    this.legIn = new Float64Array(buf, k.legInPtr(), opts.maxBatch * LEG_IN);
    this.legOut = new Float64Array(buf, k.legOutPtr(), opts.maxBatch * LEG_OUT);
    this.hashIn = new Uint32Array(buf, k.hashInPtr(), opts.maxBatch * 4);
    this.hashOut = new Uint32Array(buf, k.hashOutPtr(), opts.maxBatch * 2);
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
    if (this.k.setLimit(id, l.algorithmCode, l.limit, l.periodMs, l.burst, l.carryOver ? 1 : 0) !== 0) {
      throw new Error(`sluice kernel: bad limit ${id} (room for ${this.limitCapacity})`);
    }
  }

  /**
   * Reads the state of legs [0, n) of `legIn` (hash and limit id) into `legOut` rows: [found (0/1), w0
   * (signed), w1, lastSeen (Unix ms)]. A key held under another limit id reads as not found. Changes nothing.
   */
  peek(n: number): void {
    if (this.k.peekBatch(n) !== 0) throw new Error(`sluice kernel: batch of ${n} exceeds its size`);
  }

  /** Forgets the keys of legs [0, n) of `legIn` (by hash); returns how many were held. */
  remove(n: number): number {
    const removed = this.k.removeBatch(n);
    if (removed < 0) throw new Error(`sluice kernel: batch of ${n} exceeds its size`);
    return removed;
  }

  /**
   * Removes every key under limit id `id` when none of them carries information at `nowMs` (returns 0: the
   * id can be reused), else changes nothing and returns how many still do. A full table scan.
   */
  purgeLimit(id: number, nowMs: number): number {
    return this.k.purgeLimit(id, nowMs);
  }

  /** Decides legs [0, n) of `legIn` at `nowMs` (Unix ms, integral, < 2^48) into `legOut`. */
  decide(n: number, nowMs: number): void {
    if (this.k.checkBatch(n, nowMs) !== 0) throw new Error(`sluice kernel: batch of ${n} exceeds its size`);
  }

  /**
   * Installs `n` states written into `legIn` as rows of {@link STATE_ROW} f64s: [hashLo, hashHi, limitId,
   * w0 (signed), w1, lastSeen]. Sync mode uses it to replace a key's state with the merged one.
   */
  setState(n: number, nowMs: number): void {
    if (this.k.setState(n, nowMs) !== 0) throw new Error(`sluice kernel: ${n} states exceed the input region`);
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
}
