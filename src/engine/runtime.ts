import type { CompiledLimit, CompiledPolicy } from '../config/policies.js';
import type { KernelLimit } from '../shard/protocol.js';
import { MAX_GROUP } from '../shard/protocol.js';
import type { Hasher } from '../keys/hasher.js';
import { storeKey } from '../keys/store-key.js';

/** The key whose state a guard keeps: one per guard policy, shared by every guarded check. */
export const GUARD_KEY = '*';

/**
 * A policy as the front uses it: kernel limit ids for each leg, the hash seed that carries the policy's
 * name and version, per-leg salts, and, for a guarded policy, the guard's legs (constant hashes).
 */
export interface PolicyRuntime {
  policy: CompiledPolicy;
  seedLo: number;
  seedHi: number;
  /** Legs of one check: own limits, then the guard's. */
  legCount: number;
  limitIds: Int32Array;
  /** Salt XORed into the key hash for own leg i (leg 0: none). */
  saltLo: Uint32Array;
  saltHi: Uint32Array;
  /** Own limits then guard limits, for composing decisions. */
  legLimits: CompiledLimit[];
  /** Guard legs' fixed hashes (lo, hi interleaved), or null. */
  guardHashes: Uint32Array | null;
  /** Decided in the store (consistency strict). */
  stored: boolean;
  /** Decided locally and merged into the store behind (consistency sync). */
  synced: boolean;
  /** The guard legs' Redis keys, for a store-backed guarded policy. */
  guardStoreKeys: string[] | null;
}

const GOLDEN = 0x9e3779b97f4a7c15n;
const MASK64 = (1n << 64n) - 1n;

function salt(i: number): [number, number] {
  const s = (BigInt(i) * GOLDEN) & MASK64;
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

/** Numbers every limit for the kernel: limit id = index in the returned list. */
export function kernelLimits(policies: ReadonlyMap<string, CompiledPolicy>): {
  limits: KernelLimit[];
  firstId: Map<string, number>;
} {
  const limits: KernelLimit[] = [];
  const firstId = new Map<string, number>();
  for (const [name, p] of policies) {
    firstId.set(name, limits.length);
    for (const l of p.limits) {
      limits.push({ algorithmCode: l.algorithmCode, limit: l.limit, periodMs: l.periodMs, burst: l.burst });
    }
  }
  return { limits, firstId };
}

/** Builds every policy's runtime; `hasher` computes seeds and guard hashes. */
export function buildRuntimes(
  policies: ReadonlyMap<string, CompiledPolicy>,
  firstId: Map<string, number>,
  hasher: Hasher,
  storePrefix = '',
): Map<string, PolicyRuntime> {
  const seeds = new Map<string, [number, number]>();
  for (const [name, p] of policies) seeds.set(name, hasher.hashOne(`sluice\u0000${name}\u0000${p.version}`, 0, 0));
  const out = new Map<string, PolicyRuntime>();
  for (const [name, p] of policies) {
    const guard = p.guard === null ? null : policies.get(p.guard)!;
    const own = p.limits.length;
    const legCount = own + (guard ? guard.limits.length : 0);
    if (legCount > MAX_GROUP) throw new Error(`policy "${name}": more than ${MAX_GROUP} limits with its guard`);
    const limitIds = new Int32Array(legCount);
    const saltLo = new Uint32Array(own);
    const saltHi = new Uint32Array(own);
    for (let i = 0; i < own; i++) {
      limitIds[i] = firstId.get(name)! + i;
      [saltLo[i], saltHi[i]] = salt(i);
    }
    let guardHashes: Uint32Array | null = null;
    if (guard) {
      guardHashes = new Uint32Array(guard.limits.length * 2);
      const [gSeedLo, gSeedHi] = seeds.get(guard.name)!;
      const [lo, hi] = hasher.hashOne(GUARD_KEY, gSeedLo, gSeedHi);
      for (let i = 0; i < guard.limits.length; i++) {
        limitIds[own + i] = firstId.get(guard.name)! + i;
        const [sl, sh] = salt(i);
        const hl = (lo ^ sl) >>> 0, hh = (hi ^ sh) >>> 0;
        guardHashes[2 * i] = hl === 0 && hh === 0 ? 1 : hl;
        guardHashes[2 * i + 1] = hh;
      }
    }
    const [seedLo, seedHi] = seeds.get(name)!;
    const stored = p.consistency === 'strict';
    const synced = p.consistency === 'sync';
    out.set(name, {
      policy: p, seedLo, seedHi, legCount, limitIds, saltLo, saltHi, guardHashes, stored, synced,
      legLimits: guard ? [...p.limits, ...guard.limits] : [...p.limits],
      guardStoreKeys: (stored || synced) && guard ? guard.limits.map((_, i) => storeKey(storePrefix, guard.name, guard.version, GUARD_KEY, i)) : null,
    });
  }
  return out;
}
