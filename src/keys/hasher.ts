import type { Kernel } from '../shard/kernel.js';
import { HASH_IN, HASH_IN_LENGTH, HASH_IN_OFFSET, HASH_IN_SEED_HI, HASH_IN_SEED_LO, HASH_OUT, HASH_OUT_HI, HASH_OUT_LO } from '../shard/abi.js';
import { MAX_KEY_BYTES } from './bounds.js';

/**
 * Hashes keys in batches with the kernel's XXH64: keys are written straight into the kernel's key region as
 * they arrive, and one `hash(n)` call per batch hashes them all.
 */
export class Hasher {
  private n = 0;
  private offset = 0;

  constructor(private readonly kernel: Kernel, private readonly capacity: number) {}

  /** Keys queued since the last reset. */
  get count(): number {
    return this.n;
  }

  /** True when no further key is certain to fit. */
  get full(): boolean {
    return this.n >= this.capacity || this.offset + MAX_KEY_BYTES > this.kernel.keyBytes.length;
  }

  /** Queues a validated key with a seed; returns its row. */
  add(key: string, seedLo: number, seedHi: number): number {
    const row = this.n++;
    const len = writeUtf8(this.kernel.keyBytes, key, this.offset);
    const h = this.kernel.hashIn;
    h[row * HASH_IN + HASH_IN_OFFSET] = this.offset;
    h[row * HASH_IN + HASH_IN_LENGTH] = len;
    h[row * HASH_IN + HASH_IN_SEED_LO] = seedLo;
    h[row * HASH_IN + HASH_IN_SEED_HI] = seedHi;
    this.offset += len;
    return row;
  }

  /**
   * Queues a validated key given as its UTF-8 bytes (`len` bytes of `src` at `at`), without a string: the
   * same row as add() of the string they encode.
   */
  addBytes(src: Uint8Array, at: number, len: number, seedLo: number, seedHi: number): number {
    const row = this.n++;
    const into = this.kernel.keyBytes;
    const o = this.offset;
    if (len <= 64) for (let i = 0; i < len; i++) into[o + i] = src[at + i];
    else into.set(src.subarray(at, at + len), o);
    const h = this.kernel.hashIn;
    h[row * HASH_IN + HASH_IN_OFFSET] = o;
    h[row * HASH_IN + HASH_IN_LENGTH] = len;
    h[row * HASH_IN + HASH_IN_SEED_LO] = seedLo;
    h[row * HASH_IN + HASH_IN_SEED_HI] = seedHi;
    this.offset = o + len;
    return row;
  }

  /** Hashes every queued key; read results with lo(row)/hi(row) until reset(). */
  run(): void {
    if (this.n > 0) this.kernel.hash(this.n);
  }

  lo(row: number): number {
    return this.kernel.hashOut[row * HASH_OUT + HASH_OUT_LO];
  }

  hi(row: number): number {
    return this.kernel.hashOut[row * HASH_OUT + HASH_OUT_HI];
  }

  reset(): void {
    this.n = 0;
    this.offset = 0;
  }

  /** Hashes one string now (start-up only: seeds and guard keys). Must not be called mid-batch. */
  hashOne(key: string, seedLo: number, seedHi: number): [number, number] {
    if (this.n !== 0) throw new Error('Hasher.hashOne during a batch');
    this.add(key, seedLo, seedHi);
    this.run();
    const r: [number, number] = [this.lo(0), this.hi(0)];
    this.reset();
    return r;
  }
}

/** Short ASCII keys (the common case) are copied in JS; anything else goes through Buffer's UTF-8 encoder. */
function writeUtf8(into: Buffer, key: string, offset: number): number {
  const n = key.length;
  if (n <= 32) {
    let i = 0;
    for (; i < n; i++) {
      const c = key.charCodeAt(i);
      if (c > 0x7f) break;
      into[offset + i] = c;
    }
    if (i === n) return n;
  }
  return into.write(key, offset, 'utf8');
}
